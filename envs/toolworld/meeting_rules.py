"""Meeting scheduling: the rule checks and the reference solution, for the restricted runner.

No imports and no `_` names: `gemkit.synth.tasks.restrict` runs this with only the tools.
An option for a meeting is `{"day", "hour", "room"}`; facts are `{"busy": {person: {day:
[hours]}}, "booked": {room: {day: [hours]}}, "rooms": {room: {capacity, floor, video}},
"work": {person: {start_hour, end_hour}}}`.
"""


def option_violations(spec: dict, meeting: dict, option: dict, facts: dict) -> list:
    """What placing one meeting at `option` breaks on its own."""
    out = []
    name = meeting["name"]
    day = option["day"]
    hour = option["hour"]
    room = option["room"]
    if day not in spec["days"] or hour not in spec["hours"]:
        out.append(f"slot: '{name}' at {day} {hour}:00 is outside the allowed days and hours")
        return out
    for person in meeting["attendees"]:
        if hour in facts["busy"].get(person, {}).get(day, []):
            out.append(f"attendees_free: {person} is busy on {day} at {hour}:00 ('{name}')")
    if hour in facts["booked"].get(room, {}).get(day, []):
        out.append(f"room_free: room '{room}' is booked on {day} at {hour}:00 ('{name}')")
    info = facts["rooms"][room]
    if info["capacity"] < len(meeting["attendees"]):
        out.append(
            f"capacity: room '{room}' seats {info['capacity']}, '{name}' has "
            f"{len(meeting['attendees'])} attendees"
        )
    for rule in spec.get("rules", []):
        kind = rule["type"]
        if kind == "video" and rule["meeting"] == name and not info["video"]:
            out.append(f"video: '{name}' needs a room with video; '{room}' has none")
        elif kind == "no_lunch" and hour == rule["hour"]:
            out.append(f"no_lunch: '{name}' is at {hour}:00, the lunch hour")
        elif kind == "working_hours":
            for person in meeting["attendees"]:
                work = facts["work"][person]
                if not work["start_hour"] <= hour < work["end_hour"]:
                    out.append(
                        f"working_hours: '{name}' at {hour}:00 is outside {person}'s hours "
                        f"({work['start_hour']}-{work['end_hour']})"
                    )
        elif kind == "min_floor" and info["floor"] < rule["floor"]:
            out.append(
                f"min_floor: room '{room}' is on floor {info['floor']}, under {rule['floor']}"
            )
    return out


def pair_violations(spec: dict, m1: dict, o1: dict, m2: dict, o2: dict) -> list:
    """What two placed meetings break together (double bookings, order, one per day)."""
    out = []
    same_slot = o1["day"] == o2["day"] and o1["hour"] == o2["hour"]
    shared = sorted(set(m1["attendees"]) & set(m2["attendees"]))
    if same_slot and o1["room"] == o2["room"]:
        out.append(
            f"no_double_booking: '{m1['name']}' and '{m2['name']}' both use '{o1['room']}' "
            f"on {o1['day']} at {o1['hour']}:00"
        )
    if same_slot and shared:
        out.append(
            f"no_double_booking: {', '.join(shared)} would attend '{m1['name']}' and "
            f"'{m2['name']}' at once"
        )
    t1 = (spec["days"].index(o1["day"]) if o1["day"] in spec["days"] else 99, o1["hour"])
    t2 = (spec["days"].index(o2["day"]) if o2["day"] in spec["days"] else 99, o2["hour"])
    for rule in spec.get("rules", []):
        kind = rule["type"]
        if kind == "order":
            for a, ta, b, tb in ((m1, t1, m2, t2), (m2, t2, m1, t1)):
                if rule["first"] == a["name"] and rule["second"] == b["name"] and not ta < tb:
                    out.append(f"order: '{a['name']}' must come before '{b['name']}'")
        elif kind == "one_per_day" and o1["day"] == o2["day"] and shared:
            out.append(
                f"one_per_day: {', '.join(shared)} would have both '{m1['name']}' and "
                f"'{m2['name']}' on {o1['day']}"
            )
    return out


def gather(tools: "ToolFacade", spec: dict) -> dict:  # type: ignore[name-defined]  # noqa: F821 - the restricted runner allows no import
    """Read, through the tools, every fact the task's rules need."""
    people = []
    for m in spec["meetings"]:
        for p in m["attendees"]:
            if p not in people:
                people.append(p)
    kinds = [r["type"] for r in spec.get("rules", [])]
    facts: dict = {"busy": {}, "booked": {}, "rooms": {}, "work": {}}
    for p in people:
        facts["busy"][p] = {d: tools.get_busy_hours(p, d) for d in spec["days"]}
        if "working_hours" in kinds:
            facts["work"][p] = tools.get_working_hours(p)
    for room in tools.get_all_rooms():
        facts["rooms"][room] = tools.get_room_info(["capacity", "floor", "video"], room)
        facts["booked"][room] = {d: tools.get_room_bookings(room, d) for d in spec["days"]}
    return facts


def options_for(spec: dict, meeting: dict, facts: dict) -> list:
    """Every option of one meeting that breaks nothing on its own, earliest first."""
    out = []
    for day in spec["days"]:
        for hour in spec["hours"]:
            for room in sorted(facts["rooms"]):
                option = {"day": day, "hour": hour, "room": room}
                if not option_violations(spec, meeting, option, facts):
                    out.append(option)
    return out


def solve(tools: "ToolFacade", task: dict) -> list | None:  # type: ignore[name-defined]  # noqa: F821 - the restricted runner allows no import
    """Backtracking search over each meeting's valid options."""
    spec = task["spec"]
    facts = gather(tools, spec)
    meetings = spec["meetings"]
    options = [options_for(spec, m, facts) for m in meetings]

    def search(chosen: list) -> list | None:
        i = len(chosen)
        if i == len(meetings):
            return chosen
        for option in options[i]:
            if any(
                pair_violations(spec, meetings[j], chosen[j], meetings[i], option) for j in range(i)
            ):
                continue
            found = search(chosen + [option])
            if found is not None:
                return found
        return None

    found = search([])
    if found is None:
        return None
    return [{"meeting": m["name"], **o} for m, o in zip(meetings, found, strict=True)]
