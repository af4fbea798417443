"""What a text-adventure engine is sent: one short command, cleaned of what the engine misreads.

Shared by the `textworld:`, `twx:` and `scienceworld:` families. A model's reply may carry a
command in `\\boxed{...}` (gemkit's answer convention), several lines, or junk; the engines
want one line of plain words. TextWorld's interpreter (Frotz) also reads a line that starts
with a backslash as one of its own commands and can loop on it, and treats `quit`, `restart`,
`save`, `restore` and `undo` as questions about the session itself: those never reach it.
"""

from __future__ import annotations

import re

from gemkit.answers import extract_boxed

#: the longest command passed on; longer ones are refused with a message
MAX_COMMAND = 200
#: words that act on the game session instead of the world (refused)
META_VERBS = frozenset(
    {"quit", "q", "restart", "save", "restore", "undo", "script", "unscript", "transcript"}
)
_UNSAFE = re.compile(r"[^A-Za-z0-9 ,.'?!-]+")


def clean_command(action: object) -> tuple[str | None, str | None]:
    """`(command, None)` to send to the engine, or `(None, why)` when there is none to send.

    The command is the last `\\boxed{...}` when there is one, else the first non-empty line,
    with anything but letters, digits, spaces and plain punctuation turned into spaces.
    """
    if not isinstance(action, str):
        return None, f"A command is text, got {type(action).__name__}."
    boxed = extract_boxed(action)
    text = (
        boxed
        if boxed is not None
        else next((line for line in action.splitlines() if line.strip()), "")
    )
    command = " ".join(_UNSAFE.sub(" ", text).split())
    if not command:
        return None, "Type a command, such as 'look', 'inventory', 'go north' or 'take key'."
    if len(command) > MAX_COMMAND:
        return None, (
            f"A command is a few words (such as 'take key'), at most {MAX_COMMAND} "
            f"characters; this one has {len(command)}."
        )
    if command.split()[0].lower() in META_VERBS:
        return None, (
            f"'{command.split()[0]}' acts on the game session, not the world, and is not "
            "allowed; play on with commands such as 'look' or 'go north'."
        )
    return command, None
