"""Meeting scheduling's tools: people and their busy hours, rooms and their bookings.

Each reads the episode's office database (read-only) and returns plain data;
`submit_result` ends the episode with the schedule as the answer the verifier checks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gemkit.envs.toolworld.category import SUBMITTED, Database
from gemkit.tools.base import ToolResult

#: the office's calendar: days and the hours a meeting may start at
DAYS = ["Mon", "Tue", "Wed"]
HOURS = list(range(9, 17))


def meeting_functions(db: Callable[[], Database]) -> dict[str, Callable[..., Any]]:
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

    def submit_result(schedule: list[dict[str, Any]] | str) -> ToolResult:
        """Submit the final schedule (one object per meeting); this ends the task.

        Args:
            schedule: the meetings, each with meeting, day, hour, room.
        """
        return ToolResult.final_answer(schedule, SUBMITTED)

    fns: list[Callable[..., Any]] = [
        get_all_people, get_busy_hours, get_working_hours, get_all_rooms, get_room_info,
        get_room_bookings, submit_result,
    ]  # fmt: skip
    return {f.__name__: f for f in fns}
