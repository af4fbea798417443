"""Meeting scheduling: place meetings in people's calendars and in rooms.

Level 1: two meetings, each at a slot where every attendee is free, in a free room that seats
them, with nobody and no room booked twice. Hardening adds video rooms, an order between two
meetings, working hours (needs `get_working_hours`), one meeting per person per day, a lunch
hour, a minimum floor, or one more meeting.
"""

from __future__ import annotations

import copy
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from gemkit.synth.tasks import meeting_scheduling_solution as rules
from gemkit.synth.tasks.base import Category, Database, Task, Verdict, parse_json_answer

PEOPLE = [
    "Ana", "Bruno", "Chen", "Dara", "Elif", "Femi", "Greta", "Hugo", "Iris", "Jonas", "Kofi",
    "Lena", "Mateo", "Nora", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tara",
]  # fmt: skip
TEAMS = ["design", "platform", "sales", "research"]
ROOMS = ["Aurora", "Birch", "Cobalt", "Delta", "Ember", "Fjord"]
TOPICS = [
    "Design review", "Sprint planning", "Budget sync", "Hiring panel", "Customer call",
    "Roadmap", "Retro", "Security audit", "Launch prep", "Data review",
]  # fmt: skip
DAYS = ["Mon", "Tue", "Wed"]
HOURS = list(range(9, 17))
MAX_MEETINGS = 4

BASE_TOOLS = [
    "get_all_people",
    "get_busy_hours",
    "get_all_rooms",
    "get_room_info",
    "get_room_bookings",
    "submit_result",
]
RULE_TOOLS = {"working_hours": "get_working_hours"}
ANSWER_FORMAT = (
    'A JSON list with one object per meeting: [{"meeting": "...", "day": "Mon", "hour": 10, '
    '"room": "..."}, ...]. Submit it with submit_result(schedule) or as your final answer.'
)

SCHEMA = """
CREATE TABLE people (name TEXT PRIMARY KEY, team TEXT, start_hour INTEGER, end_hour INTEGER);
CREATE TABLE busy (person TEXT, day TEXT, hour INTEGER);
CREATE TABLE rooms (name TEXT PRIMARY KEY, capacity INTEGER, floor INTEGER, video INTEGER);
CREATE TABLE room_bookings (room TEXT, day TEXT, hour INTEGER);
"""


def build_meeting_database(path: Path, rng: np.random.Generator) -> None:
    """Write a seeded office: people with calendars and working hours, rooms with bookings."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    conn = sqlite3.connect(tmp)
    try:
        conn.execute("PRAGMA journal_mode=OFF")
        conn.execute("PRAGMA synchronous=OFF")
        conn.executescript(SCHEMA)
        people = [PEOPLE[int(i)] for i in rng.choice(len(PEOPLE), size=10, replace=False)]
        for p in people:
            start = int(rng.choice([8, 9, 10]))
            conn.execute(
                "INSERT INTO people VALUES (?,?,?,?)",
                (p, TEAMS[int(rng.integers(len(TEAMS)))], start, start + int(rng.integers(6, 9))),
            )
            density = float(rng.uniform(0.25, 0.5))
            conn.executemany(
                "INSERT INTO busy VALUES (?,?,?)",
                [(p, d, h) for d in DAYS for h in HOURS if rng.random() < density],
            )
        for r in [ROOMS[int(i)] for i in rng.choice(len(ROOMS), size=4, replace=False)]:
            conn.execute(
                "INSERT INTO rooms VALUES (?,?,?,?)",
                (
                    r,
                    int(rng.choice([2, 4, 6, 10])),
                    int(rng.integers(1, 5)),
                    int(rng.random() < 0.5),
                ),
            )
            conn.executemany(
                "INSERT INTO room_bookings VALUES (?,?,?)",
                [(r, d, h) for d in DAYS for h in HOURS if rng.random() < 0.3],
            )
        conn.commit()
    finally:
        conn.close()
    tmp.replace(path)


def meeting_functions(
    db: Callable[[], Database], submit: Callable[[Any], str] | None = None
) -> dict[str, Callable[..., Any]]:
    """The office's tool functions over the database `db()` returns at call time."""

    def person_check(person: str) -> None:
        if not db().query("SELECT 1 FROM people WHERE name = ?", (person,)):
            raise ValueError(f"no person named {person!r}; get_all_people lists them")

    def room_check(room: str) -> None:
        if not db().query("SELECT 1 FROM rooms WHERE name = ?", (room,)):
            raise ValueError(f"no room named {room!r}; get_all_rooms lists them")

    def day_check(day: str) -> None:
        if day not in DAYS:
            raise ValueError(f"unknown day {day!r}; days are {', '.join(DAYS)}")

    def get_all_people() -> list[dict[str, str]]:
        """List everyone in the office with their team."""
        return db().query("SELECT name, team FROM people ORDER BY name")

    def get_busy_hours(person: str, day: str) -> list[int]:
        """The hours (24h clock, start of each busy hour) a person is busy on a day.

        Args:
            person: the person's name.
            day: Mon, Tue or Wed.
        """
        person_check(person)
        day_check(day)
        rows = db().query(
            "SELECT hour FROM busy WHERE person = ? AND day = ? ORDER BY hour", (person, day)
        )
        return [r["hour"] for r in rows]

    def get_working_hours(person: str) -> dict[str, int]:
        """A person's working hours: meetings must start at or after start_hour and before end_hour.

        Args:
            person: the person's name.
        """
        person_check(person)
        row = db().query("SELECT start_hour, end_hour FROM people WHERE name = ?", (person,))[0]
        return dict(row)

    def get_all_rooms() -> list[str]:
        """List the meeting rooms."""
        return [r["name"] for r in db().query("SELECT name FROM rooms ORDER BY name")]

    def get_room_info(info_keywords: list[str] | str, room: str) -> dict[str, Any]:
        """Facts about a room; keywords: capacity, floor, video.

        Args:
            info_keywords: the facts wanted (a list, or comma-separated); empty for all.
            room: the room name.
        """
        room_check(room)
        allowed = ["capacity", "floor", "video"]
        if isinstance(info_keywords, str):
            info_keywords = info_keywords.split(",")
        wanted = [k.strip().lower() for k in info_keywords if k.strip()] or allowed
        unknown = [k for k in wanted if k not in allowed]
        if unknown:
            raise ValueError(f"unknown info keyword(s) {unknown}; room infos are {allowed}")
        row = db().query("SELECT * FROM rooms WHERE name = ?", (room,))[0]
        return {k: bool(row[k]) if k == "video" else row[k] for k in wanted}

    def get_room_bookings(room: str, day: str) -> list[int]:
        """The hours a room is already booked on a day.

        Args:
            room: the room name.
            day: Mon, Tue or Wed.
        """
        room_check(room)
        day_check(day)
        rows = db().query(
            "SELECT hour FROM room_bookings WHERE room = ? AND day = ? ORDER BY hour", (room, day)
        )
        return [r["hour"] for r in rows]

    def submit_result(schedule: list[dict[str, Any]] | str) -> str:
        """Submit the final schedule (one object per meeting); this ends the task.

        Args:
            schedule: the meetings, each with meeting, day, hour, room.
        """
        return "Received the schedule." if submit is None else submit(schedule)

    fns = [
        get_all_people, get_busy_hours, get_working_hours, get_all_rooms, get_room_info,
        get_room_bookings, submit_result,
    ]  # fmt: skip
    return {f.__name__: f for f in fns}


def _facts(db: Database) -> dict[str, Any]:
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
    solution_file = "meeting_scheduling_solution"

    def build_database(self, path: Path, rng: np.random.Generator) -> None:
        """Write the seeded office database."""
        build_meeting_database(path, rng)

    def functions(
        self, db: Callable[[], Database], submit: Callable[[Any], str] | None = None
    ) -> dict[str, Callable[..., Any]]:
        """The office's tool functions."""
        return meeting_functions(db, submit)

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

    def _meeting(self, db: Database, rng: np.random.Generator, taken: list[str]) -> dict[str, Any]:
        people = [r["name"] for r in db.query("SELECT name FROM people ORDER BY name")]
        size = int(rng.integers(2, 5))
        attendees = sorted(people[int(i)] for i in rng.choice(len(people), size, replace=False))
        topic = next(
            t for t in (TOPICS[int(i)] for i in rng.permutation(len(TOPICS))) if t not in taken
        )
        return {"name": topic, "attendees": attendees}

    def propose(self, db: Database, rng: np.random.Generator) -> Task:
        """Two meetings of 2-4 random people."""
        meetings: list[dict[str, Any]] = []
        for _ in range(2):
            meetings.append(self._meeting(db, rng, [m["name"] for m in meetings]))
        spec = {"days": list(DAYS), "hours": list(HOURS), "meetings": meetings, "rules": []}
        return self.make_task(spec, 1, ["base: two meetings, free attendees, free rooms"])

    def harden(self, db: Database, task: Task, rng: np.random.Generator) -> list[Task]:
        """One-step-harder candidates: a new rule, or one more meeting."""
        spec = task.spec
        kinds = {r["type"] for r in spec["rules"]}
        names = [m["name"] for m in spec["meetings"]]
        candidates: list[tuple[dict[str, Any], str]] = []

        def with_rule(rule: dict[str, Any]) -> None:
            s = copy.deepcopy(spec)
            s["rules"].append(rule)
            candidates.append((s, rule_text(rule)))

        needs_video = {r["meeting"] for r in spec["rules"] if r["type"] == "video"}
        free = [n for n in names if n not in needs_video]
        if free:
            with_rule({"type": "video", "meeting": free[int(rng.integers(len(free)))]})
        ordered = {(r["first"], r["second"]) for r in spec["rules"] if r["type"] == "order"}
        a, b = (names[int(i)] for i in rng.choice(len(names), 2, replace=False))
        if (a, b) not in ordered and (b, a) not in ordered:
            with_rule({"type": "order", "first": a, "second": b})
        for kind, rule in (
            ("working_hours", {"type": "working_hours"}),
            ("one_per_day", {"type": "one_per_day"}),
            ("no_lunch", {"type": "no_lunch", "hour": 12}),
            ("min_floor", {"type": "min_floor", "floor": 2}),
        ):
            if kind not in kinds:
                with_rule(rule)
        if len(spec["meetings"]) < MAX_MEETINGS:
            s = copy.deepcopy(spec)
            s["meetings"].append(self._meeting(db, rng, names))
            candidates.append((s, f"one more meeting ('{s['meetings'][-1]['name']}')"))
        order = rng.permutation(len(candidates))
        return [
            self.make_task(candidates[int(i)][0], task.level + 1, [candidates[int(i)][1]])
            for i in order
        ]

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
        facts = db.cached("facts", lambda: _facts(db))
        spec = task.spec
        by_name = {m["name"]: m for m in spec["meetings"]}
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
            if entry["meeting"] not in by_name:
                out.append(f"unknown_item: no meeting named {entry['meeting']!r} in this task")
                continue
            if entry["meeting"] in placed:
                out.append(f"format: '{entry['meeting']}' is scheduled twice")
                continue
            if entry["room"] not in facts["rooms"]:
                out.append(f"unknown_item: no room named {entry['room']!r}")
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
        return Verdict.from_violations(out, ids)

    def count_solutions(self, db: Database, task: Task) -> int:
        """Exact count by backtracking over each meeting's valid options."""
        facts = db.cached("facts", lambda: _facts(db))
        spec = task.spec
        meetings = spec["meetings"]
        options = [rules.options_for(spec, m, facts) for m in meetings]

        def count(chosen: list[dict[str, Any]]) -> int:
            i = len(chosen)
            if i == len(meetings):
                return 1
            total = 0
            for o in options[i]:
                if not any(
                    rules.pair_violations(spec, meetings[j], chosen[j], meetings[i], o)
                    for j in range(i)
                ):
                    total += count([*chosen, o])
            return total

        return count([])

    def count_space(self, db: Database, task: Task) -> int:
        """Every placement of every meeting at any allowed slot in any room."""
        n_rooms = len(db.cached("facts", lambda: _facts(db))["rooms"])
        per = len(task.spec["days"]) * len(task.spec["hours"]) * n_rooms
        return int(per ** len(task.spec["meetings"]))
