"""TowerOfHanoi: move every disk to peg C, one at a time, never a larger disk on a smaller one."""

from __future__ import annotations

import re

import numpy as np

from gemkit.envs.games.base import GameEnv, InvalidMove, Outcome
from gemkit.policy import SyncPolicy

PEGS = "ABC"
MOVE_RE = re.compile(r"^\s*([A-Za-z]+)\s*(?:->|→|to|,|-|\s)\s*([A-Za-z]+)\s*$", re.IGNORECASE)
PEG_LINE_RE = re.compile(r"^Peg ([ABC]) \(bottom to top\):(.*)$", re.MULTILINE)
#: The settling rewards of a whole game add up to this; winning adds 1.0.
SETTLE_TOTAL = 0.5


def parse_move(move: str) -> tuple[str, str]:
    """Split a move like `A C` or `A->C` into (from, to) peg letters, or raise `InvalidMove`."""
    text = move.strip()
    if len(text) == 2 and text.isalpha():
        text = f"{text[0]} {text[1]}"
    m = MOVE_RE.match(text) if len(text) <= 40 else None
    if m is None:
        raise InvalidMove(
            f"{move[:40]!r} is not a move: name two pegs, the source then the target."
        )
    src, dst = m[1].upper(), m[2].upper()
    for peg in (src, dst):
        if peg not in PEGS:
            raise InvalidMove(f"unknown peg {peg[:10]!r}: the pegs are A, B and C.")
    if src == dst:
        raise InvalidMove(f"the source and target peg are both {src}: move a disk to another peg.")
    return src, dst


def settled(pegs: dict[str, list[int]], num_disks: int) -> int:
    """How many of the largest disks already sit in their final place at the bottom of peg C."""
    count = 0
    for disk, want in zip(pegs["C"], range(num_disks, 0, -1), strict=False):
        if disk != want:
            break
        count += 1
    return count


def solve_moves(
    pegs: dict[str, list[int]], num_disks: int, target: str = "C"
) -> list[tuple[str, str]]:
    """The shortest move list that gathers every disk on `target`, from any legal position.

    Largest disk first: if it is already on its target, recurse on the smaller ones with the
    same target; otherwise park the smaller ones on the spare peg, move it, and carry the
    parked tower (a classic Hanoi) onto it.
    """
    where = {disk: peg for peg, disks in pegs.items() for disk in disks}
    moves: list[tuple[str, str]] = []

    def tower(k: int, src: str, dst: str) -> None:
        if k == 0:
            return
        spare = next(p for p in PEGS if p not in (src, dst))
        tower(k - 1, src, spare)
        moves.append((src, dst))
        tower(k - 1, spare, dst)

    def gather(k: int, dst: str) -> None:
        if k == 0:
            return
        if where[k] == dst:
            gather(k - 1, dst)
            return
        spare = next(p for p in PEGS if p not in (where[k], dst))
        gather(k - 1, spare)
        moves.append((where[k], dst))
        tower(k - 1, spare, dst)

    gather(num_disks, target)
    return moves


class TowerOfHanoi(GameEnv):
    """Gather disks 1..n (1 smallest) on peg C, starting from a scrambled legal position.

    The largest disk never starts on C, so every game needs at least 2^(n-1) moves. Settling a
    disk for the first time (it and every larger disk at the bottom of C in order) earns
    `SETTLE_TOTAL / n`; finishing earns 1.0.
    """

    def __init__(self, num_disks: int = 3, max_turns: int = 20):
        super().__init__(max_turns)
        if not 1 <= num_disks <= 20:
            raise ValueError(f"num_disks must be in 1..20, got {num_disks}")
        self.num_disks = num_disks
        self.pegs: dict[str, list[int]] = {p: [] for p in PEGS}
        self.best_settled = 0

    def rules(self) -> str:
        """Rules text."""
        n = self.num_disks
        return (
            f"Tower of Hanoi with {n} disks numbered 1 (smallest) to {n} (largest) on three "
            "pegs A, B and C. The disks start scattered over the pegs; your goal is to stack all "
            f"of them on peg C, largest at the bottom ({n} ... 1). Each move takes the top disk "
            "of one peg and puts it on top of another peg. You may never put a larger disk on a "
            "smaller one. A move names the source peg then the target peg."
        )

    def move_format(self) -> str:
        """Two boxed peg letters, source then target."""
        return "\\boxed{X Y} moving the top disk of peg X onto peg Y, e.g. \\boxed{A C}"

    def new_game(self) -> None:
        """Scatter the disks: the largest on A or B, every other disk on any peg."""
        n = self.num_disks
        homes = [PEGS[int(self.np_random.integers(0, 2))]]
        homes += [PEGS[int(i)] for i in self.np_random.integers(0, 3, size=n - 1)]
        self.pegs = {p: [] for p in PEGS}
        for disk, peg in zip(range(n, 0, -1), homes, strict=False):
            self.pegs[peg].append(disk)
        self.best_settled = settled(self.pegs, n)

    def play(self, move: str) -> Outcome:
        """Move the top disk of the source peg onto the target peg."""
        src, dst = parse_move(move)
        if not self.pegs[src]:
            raise InvalidMove(f"peg {src} is empty: there is no disk to move.")
        disk = self.pegs[src][-1]
        if self.pegs[dst] and self.pegs[dst][-1] < disk:
            raise InvalidMove(
                f"disk {disk} cannot go on the smaller disk {self.pegs[dst][-1]} on peg {dst}: "
                "a larger disk may never sit on a smaller one."
            )
        self.pegs[src].pop()
        self.pegs[dst].append(disk)
        now = settled(self.pegs, self.num_disks)
        reward = 0.0
        if now > self.best_settled:
            reward = SETTLE_TOTAL * (now - self.best_settled) / self.num_disks
            self.best_settled = now
        feedback = f"Moved disk {disk} from peg {src} to peg {dst}."
        if now == self.num_disks:
            return Outcome(feedback + " All disks are on peg C: solved!", reward + 1.0, True, True)
        return Outcome(feedback, reward, info={"settled": now})

    def state_text(self) -> str:
        """Each peg's disks, bottom to top."""
        lines = [
            f"Peg {p} (bottom to top): " + (" ".join(map(str, d)) if d else "(empty)")
            for p, d in self.pegs.items()
        ]
        return "\n".join(lines)

    def random_action(self, rng: np.random.Generator) -> str:
        """A random ordered pair of different pegs."""
        src, dst = rng.choice(3, size=2, replace=False)
        return f"\\boxed{{{PEGS[int(src)]} {PEGS[int(dst)]}}}"


def parse_pegs(observation: str) -> dict[str, list[int]] | None:
    """Read the pegs from the last state shown in an observation, or None if there is none."""
    found: dict[str, list[int]] = {}
    for m in PEG_LINE_RE.finditer(observation):
        found[m[1]] = [int(x) for x in m[2].split() if x.isdigit()]
    return found if len(found) == 3 else None


class TowerOfHanoiExpert(SyncPolicy):
    """Plays the first move of the shortest solution from the position it reads each turn."""

    def __init__(self, num_disks: int = 3, **_: object):
        self.num_disks = num_disks

    def choose(self, observation: str) -> str:
        """Parse the pegs and answer the next optimal move."""
        pegs = parse_pegs(observation)
        if pegs is None:
            return "\\boxed{A C}"
        n = sum(len(d) for d in pegs.values())
        moves = solve_moves(pegs, n)
        src, dst = moves[0] if moves else ("A", "C")
        return f"\\boxed{{{src} {dst}}}"
