"""Meeting scheduling, as an episode plays it: the task's text, and the verifier of a schedule.

Level 1: two meetings, each at a slot where every attendee is free, in a free room that seats
them, with nobody and no room booked twice. Harder tasks add video rooms, an order between
two meetings, working hours (needs `get_working_hours`), one meeting per person per day, a
lunch hour, a minimum floor, or one more meeting. How tasks are made is
`gemkit.synth.tasks.meeting_generator`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from gemkit.envs.toolworld import meeting_rules as rules
from gemkit.envs.toolworld.category import (
    STRUCTURE,
    Category,
    Database,
    Task,
    Verdict,
    parse_json_answer,
    respell,
    spelling,
)
from gemkit.envs.toolworld.meeting_tools import DAYS, meeting_functions

BASE_TOOLS = [
    "get_all_people",
    "get_busy_hours",
    "get_all_rooms",
    "get_room_info",
    "get_room_bookings",
    "submit_result",
]
RULE_TOOLS = {"working_hours": "get_working_hours"}
#: a schedule with a meeting outside the task's days and hours earns no partial credit: the
#: rules of that meeting (free attendees, a free room that seats them, ...) are not checked
#: for a slot the calendars do not cover, so "meeting" them is no work done
GATES = (*STRUCTURE, "slot")
#: the hours of a day
HOURS = range(24)
ANSWER_FORMAT = (
    'A JSON list with one object per meeting: [{"meeting": "...", "day": "Mon", "hour": 10, '
    '"room": "..."}, ...]. Submit it with submit_result(schedule) or as your final answer.'
)


def office_facts(db: Database) -> dict[str, Any]:
    facts: dict[str, Any] = {"busy": {}, "booked": {}, "rooms": {}, "work": {}}
    for r in db.query("SELECT * FROM busy"):
        facts["busy"].setdefault(r["person"], {}).setdefault(r["day"], []).append(r["hour"])
    for r in db.query("SELECT * FROM room_bookings"):
        facts["booked"].setdefault(r["room"], {}).setdefault(r["day"], []).append(r["hour"])
    for r in db.query("SELECT * FROM rooms"):
        facts["rooms"][r["name"]] = {
            "capacity": r["capacity"],
            "floor": r["floor"],
            "video": bool(r["video"]),
        }
    for r in db.query("SELECT * FROM people"):
        facts["work"][r["name"]] = {"start_hour": r["start_hour"], "end_hour": r["end_hour"]}
    return facts


def rule_text(rule: dict[str, Any]) -> str:
    """The human-readable sentence of one rule."""
    kind = rule["type"]
    if kind == "video":
        return f"video: '{rule['meeting']}' is in a room with video."
    if kind == "order":
        return f"order: '{rule['first']}' takes place before '{rule['second']}'."
    if kind == "working_hours":
        return "working_hours: every meeting is within all its attendees' working hours."
    if kind == "one_per_day":
        return "one_per_day: nobody has two of these meetings on the same day."
    if kind == "no_lunch":
        return f"no_lunch: no meeting starts at {rule['hour']}:00."
    if kind == "min_floor":
        return f"min_floor: every meeting is on floor {rule['floor']} or higher."
    raise ValueError(f"unknown rule type {kind!r}")


class MeetingScheduling(Category):
    """Schedule meetings across calendars and rooms under capacity, order and time rules."""

    name = "meeting_scheduling"
    env_name = "MeetingScheduling"
    description = "Schedule meetings across calendars and rooms."

    def functions(self, db: Callable[[], Database]) -> dict[str, Callable[..., Any]]:
        """The office's tool functions."""
        return meeting_functions(db)

    def make_task(self, spec: dict[str, Any], level: int, added: list[str]) -> Task:
        """A task from its spec."""
        spec = copy.deepcopy(spec)
        lines = [
            f"'{m['name']}' with {', '.join(m['attendees'])} (1 hour)" for m in spec["meetings"]
        ]
        constraints = [
            f"slot: each meeting starts on the hour, {DAYS[0]}-{spec['days'][-1]}, between "
            f"{spec['hours'][0]}:00 and {spec['hours'][-1]}:00.",
            "attendees_free: every attendee is free at that hour.",
            "room_free: the room is not already booked at that hour.",
            "capacity: the room seats every attendee.",
            "no_double_booking: no person and no room is in two of these meetings at once.",
        ] + [rule_text(r) for r in spec["rules"]]
        tools = list(BASE_TOOLS)
        for r in spec["rules"]:
            extra = RULE_TOOLS.get(r["type"])
            if extra and extra not in tools:
                tools.insert(-1, extra)
        prompt = (
            "Schedule these meetings: "
            + "; ".join(lines)
            + ". Use the tools to read calendars, rooms and bookings. The schedule must satisfy "
            "every rule:\n"
            + "\n".join(f"{i + 1}. {c}" for i, c in enumerate(constraints))
            + f"\n\nAnswer format: {ANSWER_FORMAT}"
        )
        return Task(self.name, level, spec, prompt, ANSWER_FORMAT, constraints, tools, added)

    def constraint_ids(self, task: Task) -> list[str]:
        """Ids of the task's constraints."""
        base = ["format", "unknown_item", "slot", "attendees_free", "room_free", "capacity"]
        return base + ["no_double_booking"] + sorted({r["type"] for r in task.spec["rules"]})

    def verify(self, db: Database, task: Task, answer: Any) -> Verdict:
        """Check a schedule against every rule; each violation names its rule."""
        ids = self.constraint_ids(task)
        data, error = parse_json_answer(answer)
        if isinstance(data, dict):
            data = data.get("schedule", data.get("meetings"))
        if error or not isinstance(data, list):
            return Verdict.from_violations(
                [f"format: {error or 'the schedule must be a JSON list of meetings'}"], ids
            )
        facts = db.cached("facts", lambda: office_facts(db))
        spec = task.spec
        by_name = {m["name"]: m for m in spec["meetings"]}
        meetings, rooms, days = spelling(by_name), spelling(facts["rooms"]), spelling(DAYS)
        out: list[str] = []
        placed: dict[str, dict[str, Any]] = {}
        for entry in data:
            # exact types: a JSON `true` is an int to isinstance, and 10.0 is not an hour
            ok = (
                isinstance(entry, dict)
                and type(entry.get("meeting")) is str
                and type(entry.get("day")) is str
                and type(entry.get("hour")) is int
                and type(entry.get("room")) is str
            )
            if not ok:
                out.append(
                    "format: each entry needs meeting (text), day (text), hour (integer), room"
                )
                continue
            # names in the database's spelling: case and spacing are not the model's mistake
            entry = {
                **entry,
                "meeting": respell(entry["meeting"], by_name, meetings),
                "room": respell(entry["room"], facts["rooms"], rooms),
                "day": respell(entry["day"], DAYS, days),
            }
            if entry["meeting"] not in by_name:
                out.append(f"unknown_item: no meeting named {entry['meeting']!r} in this task")
                continue
            if entry["meeting"] in placed:
                out.append(f"format: '{entry['meeting']}' is scheduled twice")
                continue
            if entry["room"] not in facts["rooms"]:
                out.append(f"unknown_item: no room named {entry['room']!r}")
                continue
            # a value that does not exist earns nothing: not a day of the week, not an hour
            if entry["day"] not in DAYS:
                out.append(f"unknown_item: no day named {entry['day'][:40]!r}; days are {DAYS}")
                continue
            if entry["hour"] not in HOURS:
                hour = str(entry["hour"])
                hour = hour if len(hour) <= 12 else f"{hour[:12]}…"
                out.append(f"unknown_item: {hour} is not an hour of the day (0-23)")
                continue
            placed[entry["meeting"]] = {k: entry[k] for k in ("day", "hour", "room")}
        for name in by_name:
            if name not in placed and not any(v.startswith("format") for v in out):
                out.append(f"format: '{name}' is not scheduled")
        names = list(placed)
        for i, n in enumerate(names):
            out += rules.option_violations(spec, by_name[n], placed[n], facts)
            for m in names[:i]:
                out += rules.pair_violations(spec, by_name[m], placed[m], by_name[n], placed[n])
        return Verdict.from_violations(out, ids, GATES)
