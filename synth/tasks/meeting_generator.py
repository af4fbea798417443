"""How meeting-scheduling tasks are made: a seeded office, two meetings, harder rules.

Hardening adds video rooms, an order between two meetings, working hours, one meeting per
person per day, a lunch hour, a minimum floor, or one more meeting. The played side is
`gemkit.envs.toolworld.meeting_scheduling`.
"""

from __future__ import annotations

import copy
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np

from gemkit.envs.toolworld import meeting_rules as rules
from gemkit.envs.toolworld.category import Database, Task
from gemkit.envs.toolworld.meeting_scheduling import MeetingScheduling, office_facts, rule_text
from gemkit.envs.toolworld.meeting_tools import DAYS, HOURS
from gemkit.synth.tasks.base import TaskGenerator
from gemkit.synth.world.names import NameGenerator

TEAMS = ["design", "platform", "sales", "research"]
TOPICS = [
    "Design review", "Sprint planning", "Budget sync", "Hiring panel", "Customer call",
    "Roadmap", "Retro", "Security audit", "Launch prep", "Data review",
]  # fmt: skip
MAX_MEETINGS = 4

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
        # names from their own seeded stream, so offices rarely share a person or a room
        names = NameGenerator(np.random.default_rng(rng.integers(2**63)))
        people = [names.unique(lambda: names.word(2, 2)) for _ in range(10)]
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
        for r in [names.unique(lambda: names.word(2, 2)) for _ in range(4)]:
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


class MeetingGenerator(TaskGenerator, MeetingScheduling):
    """Makes meeting-scheduling tasks: office database, proposal, hardening, exact counts."""

    solution_file = "gemkit.envs.toolworld.meeting_rules"

    def build_database(self, path: Path, rng: np.random.Generator) -> None:
        """Write the seeded office database."""
        build_meeting_database(path, rng)

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

    def count_solutions(self, db: Database, task: Task) -> int:
        """Exact count by backtracking over each meeting's valid options."""
        facts = db.cached("facts", lambda: office_facts(db))
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
        n_rooms = len(db.cached("facts", lambda: office_facts(db))["rooms"])
        per = len(task.spec["days"]) * len(task.spec["hours"]) * n_rooms
        return int(per ** len(task.spec["meetings"]))
