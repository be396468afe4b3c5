"""Sokoban on 6x6 boards: level text, the rules, a breadth-first solver, a generator whose every
level is verified solvable, the `sokoban` env and the `sokoban(split, n, boxes)` data source.

Level text (XSB notation, one row per line): `#` wall, `_` floor, `.` goal, `$` box, `*` box on a
goal, `@` player, `+` player on a goal. Moves are "U", "D", "L", "R" (up is row - 1); walking
into a box pushes it when the cell behind it is free.

**Reward of a list of moves** (`step_reward()`; the shape of DESIGN.md §6, as in gym-sokoban):
each move executed costs `STEP_PENALTY` (-0.01); a push that puts a box on a goal earns +1 and
one that pushes a box off a goal costs -1 (so on/off pushing cannot farm reward); the move that
puts the last box on its goal earns `WIN_BONUS` (+10). Moves run in order and stop at the win
(later moves are ignored) or at the first blocked move (into a wall, or pushing a box into a wall
or another box): the moves before it stay played, the action is invalid (`valid()` False) and
`INVALID_PENALTY` (-0.5) is added. A list that is empty or holds something other than a
direction is invalid as a whole and plays nothing.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, replace
from typing import Any, Mapping

from masdsl.envs import games_common as gc
from masdsl.envs.games_common import DIRS, Cell
from masdsl.envs.registry import data_source, env
from masdsl.errors import DataError, UserError

SIZE = 6  # generated levels are SIZE x SIZE including the outer wall
MAX_INNER_WALLS = 2
MIN_SOLUTION_MOVES = 4  # generated levels need at least this many moves
MAX_BOXES = 3
STEP_PENALTY = -0.01
BOX_REWARD = 1.0
WIN_BONUS = 10.0
MAX_SEARCH_STATES = 200_000
# `env.legend`: how to read `env.board`, for prompts
LEGEND = ("# wall, _ floor, . goal, $ box, * box on a goal, @ you, + you on a goal; "
          "U/D/L/R move you one cell (U is up) and push a box in front of you")


@dataclass(frozen=True)
class Level:
    """A board position; walls and goals are shared between successive positions."""

    height: int
    width: int
    walls: frozenset[Cell]
    goals: frozenset[Cell]
    boxes: frozenset[Cell]
    player: Cell

    def solved(self) -> bool:
        return self.boxes <= self.goals


def parse_level(text: str | list[str]) -> Level:
    """A `Level` from XSB text; `ValueError` says what is wrong.

    >>> lv = parse_level("#####\\n#@$.#\\n#####")
    >>> lv.player, sorted(lv.boxes), sorted(lv.goals)
    ((1, 1), [(1, 2)], [(1, 3)])
    """
    rows = text.splitlines() if isinstance(text, str) else list(text)
    rows = [r for r in rows if r.strip()]
    if not rows or any(not isinstance(r, str) for r in rows):
        raise ValueError("empty level")
    walls, goals, boxes, players = set(), set(), set(), []
    for r, row in enumerate(rows):
        for c, ch in enumerate(row):
            if ch not in "#_ -.$*@+":
                raise ValueError(f"unknown character {ch!r} at row {r + 1}, column {c + 1}")
            cell = (r, c)
            if ch == "#":
                walls.add(cell)
            if ch in ".*+":
                goals.add(cell)
            if ch in "$*":
                boxes.add(cell)
            if ch in "@+":
                players.append(cell)
    if len(players) != 1:
        raise ValueError(f"expected one player (@ or +), found {len(players)}")
    if not boxes or len(boxes) != len(goals):
        raise ValueError(f"expected as many goals as boxes (at least one), found "
                         f"{len(goals)} goals and {len(boxes)} boxes")
    width = max(len(r) for r in rows)
    return Level(len(rows), width, frozenset(walls), frozenset(goals), frozenset(boxes), players[0])


def render(level: Level) -> str:
    """XSB text of a level.

    >>> print(render(parse_level(["#####", "#+$_#", "#_*_#", "#####"])))
    #####
    #+$_#
    #_*_#
    #####
    """
    lines = []
    for r in range(level.height):
        line = []
        for c in range(level.width):
            cell = (r, c)
            if cell in level.walls:
                ch = "#"
            elif cell == level.player:
                ch = "+" if cell in level.goals else "@"
            elif cell in level.boxes:
                ch = "*" if cell in level.goals else "$"
            else:
                ch = "." if cell in level.goals else "_"
            line.append(ch)
        lines.append("".join(line))
    return "\n".join(lines)


def step(level: Level, move: str) -> Level | None:
    """The level after one move, or None when the move is blocked.

    >>> lv = parse_level("######\\n#@$_.#\\n######")
    >>> render(step(lv, "R")).splitlines()[1]
    '#_@$.#'
    >>> step(lv, "U") is None, step(step(step(lv, "R"), "R"), "R") is None
    (True, True)
    """
    dr, dc = DIRS[move]
    r, c = level.player
    nxt = (r + dr, c + dc)

    def free(cell: Cell) -> bool:
        return (0 <= cell[0] < level.height and 0 <= cell[1] < level.width
                and cell not in level.walls and cell not in level.boxes)

    if nxt in level.boxes:
        beyond = (nxt[0] + dr, nxt[1] + dc)
        if not free(beyond):
            return None
        return replace(level, boxes=(level.boxes - {nxt}) | {beyond}, player=nxt)
    if not free(nxt):
        return None
    return replace(level, player=nxt)


def play(level: Level, moves: list[str]) -> tuple[Level, float, bool, int]:
    """Play `moves` from `level`: `(level after, reward, all legal, moves executed)`.

    >>> lv = parse_level("######\\n#@$_.#\\n######")
    >>> after, reward, ok, done = play(lv, ["R", "R", "L"])
    >>> round(reward, 2), ok, done, after.solved()
    (10.98, True, 2, True)
    >>> after, reward, ok, done = play(lv, ["R", "U"])
    >>> round(reward, 2), ok, done
    (-0.51, False, 1)
    """
    reward, executed = 0.0, 0
    for move in moves:
        if level.solved():
            break
        nxt = step(level, move)
        if nxt is None:
            return level, reward + gc.INVALID_PENALTY, False, executed
        executed += 1
        reward += STEP_PENALTY + BOX_REWARD * (len(nxt.boxes & nxt.goals) - len(level.boxes & level.goals))
        if nxt.solved():
            reward += WIN_BONUS
        level = nxt
    return level, reward, True, executed


def solve(level: Level, max_states: int = MAX_SEARCH_STATES) -> list[str] | None:
    """A shortest list of moves that solves `level` (breadth-first over (player, boxes)), or
    None when it has no solution (or more than `max_states` positions are reachable).

    Pushes into a dead corner (off a goal, walled on two orthogonal sides) are pruned: no box
    there can ever move again, so no solution passes through them.

    >>> solve(parse_level("######\\n#@$_.#\\n######"))
    ['R', 'R']
    >>> solve(parse_level("#####\\n#$@.#\\n#####")) is None
    True
    """
    w = level.width + 1  # cell (r, c) is r * w + c; the spare column keeps rows from wrapping
    cells = {(r, c) for r in range(level.height) for c in range(level.width)} - level.walls
    free = {r * w + c for r, c in cells}
    dead = {r * w + c for r, c in cells if _cornered(level, (r, c))}
    goals = frozenset(r * w + c for r, c in level.goals)
    deltas = [(move, dr * w + dc) for move, (dr, dc) in DIRS.items()]
    start = (level.player[0] * w + level.player[1], frozenset(r * w + c for r, c in level.boxes))
    parent: dict[tuple[int, frozenset[int]], tuple[Any, str] | None] = {start: None}
    queue = deque([start])
    while queue:
        key = queue.popleft()
        player, boxes = key
        if boxes <= goals:
            path = []
            while parent[key] is not None:
                key, move = parent[key]
                path.append(move)
            return path[::-1]
        for move, d in deltas:
            nxt = player + d
            if nxt not in free:
                continue
            if nxt in boxes:
                beyond = nxt + d
                if beyond not in free or beyond in boxes or beyond in dead:
                    continue
                new = (nxt, (boxes - {nxt}) | {beyond})
            else:
                new = (nxt, boxes)
            if new not in parent:
                if len(parent) >= max_states:
                    return None
                parent[new] = (key, move)
                queue.append(new)
    return None


def _cornered(level: Level, box: Cell) -> bool:
    """Whether `box` is off a goal and walled in on two orthogonal sides (a dead box)."""
    r, c = box
    vertical = (r - 1, c) in level.walls or (r + 1, c) in level.walls
    horizontal = (r, c - 1) in level.walls or (r, c + 1) in level.walls
    return box not in level.goals and vertical and horizontal


def generate(seed: int, boxes: int = 1, max_tries: int = 10_000) -> Level:
    """A SIZE x SIZE level with `boxes` boxes, none on a goal, solvable (checked by `solve`) in
    no fewer than MIN_SOLUTION_MOVES moves; deterministic in (seed, boxes).

    >>> lv = generate(0)
    >>> len(lv.boxes), lv.boxes & lv.goals, len(solve(lv)) >= MIN_SOLUTION_MOVES
    (1, frozenset(), True)
    """
    rng = random.Random(f"sokoban-{boxes}-{seed}")
    border = {(r, c) for r in range(SIZE) for c in range(SIZE) if r in (0, SIZE - 1) or c in (0, SIZE - 1)}
    inner = [(r, c) for r in range(1, SIZE - 1) for c in range(1, SIZE - 1)]
    for _ in range(max_tries):
        extra = rng.sample(inner, rng.randint(0, MAX_INNER_WALLS))
        free = [cell for cell in inner if cell not in extra]
        picks = rng.sample(free, 2 * boxes + 1)
        level = Level(SIZE, SIZE, frozenset(border | set(extra)), frozenset(picks[:boxes]),
                      frozenset(picks[boxes:2 * boxes]), picks[-1])
        if any(_cornered(level, box) for box in level.boxes):
            continue  # a box in a corner off its goal can never move: skip the search
        plan = solve(level)
        if plan is not None and len(plan) >= MIN_SOLUTION_MOVES:
            return level
    raise DataError(f"sokoban: no solvable level with {boxes} boxes after {max_tries} tries (seed {seed})")


# ---- the env ------------------------------------------------------------------------------


@dataclass(frozen=True)
class SokobanState(gc.GameState):
    level: Level

    def solved(self) -> bool:
        return self.level.solved()

    def progress(self) -> float:
        """Fraction of the boxes standing on goals."""
        return len(self.level.boxes & self.level.goals) / len(self.level.boxes)


def move(state: SokobanState, role: str, moves: Any) -> SokobanState:
    """The state after `role` plays `moves` (see the module doc for legality and reward)."""
    if not moves:
        return gc.invalid(state, role, "no moves")
    clean = gc.normalise_moves(moves)
    if clean is None:
        return gc.invalid(state, role, f"moves must be a list of U/D/L/R, got {moves!r:.80}")
    level, reward, legal, executed = play(state.level, clean)
    if legal:
        note = "all boxes on goals" if level.solved() else f"played {executed} moves"
    else:
        note = f"invalid action: move {executed + 1} ({clean[executed]}) is blocked; played {executed} moves"
    return replace(state, level=level, moves=state.moves + executed, last_role=role,
                   last_valid=legal, last_reward=reward, feedback=note)


@env("sokoban", fields=("board", "tool_output", "moves", "feedback", "legend"))
class SokobanEnv:
    """Sokoban (6x6). Planner field `moves` (U/D/L/R), tool field `code` (stdin: the board
    text). Success: every box on a goal."""

    def __init__(self, *, limits: Any = None):
        self.limits = limits

    def reset(self, task: Mapping[str, Any]) -> SokobanState:
        text = gc.task_field(task, "level", "sokoban")
        try:
            level = parse_level(text)
        except (ValueError, TypeError, AttributeError) as exc:
            raise DataError(f"sokoban: task row {task.get('id', '?')!r}: bad level: {exc}") from None
        return SokobanState(level=level)

    def apply(self, state: SokobanState, role: str, fields: Mapping[str, Any]) -> SokobanState:
        kind, value = gc.pick_action(fields)
        if kind is None:
            return gc.noop(state, role)
        if kind == "moves":
            return move(state, role, value)
        if kind == "code":
            return gc.tool_step(state, role, value, stdin=render(state.level) + "\n",
                                limits=self.limits,
                                score=lambda out: move(state, role, gc.parse_tool_output("actions", out)))
        return gc.invalid(state, role, f"sokoban takes `moves`, not `{kind}`")

    def view(self, state: SokobanState) -> Mapping[str, Any]:
        return {"board": render(state.level), "tool_output": state.tool_output,
                "moves": state.moves, "feedback": state.feedback, "legend": LEGEND}

    def success(self, state: SokobanState) -> bool:
        return state.solved()


@data_source("sokoban", fields=("id", "seed", "level"))
def sokoban(split: str, n: int = 64, boxes: int = 1) -> list[dict]:
    """Generated 6x6 levels, each verified solvable; train and eval disjoint (see games_common)."""
    gc.check_split(split, n, "sokoban")
    if not isinstance(boxes, int) or isinstance(boxes, bool) or not 1 <= boxes <= MAX_BOXES:
        raise UserError(f"sokoban: boxes must be an integer from 1 to {MAX_BOXES}, got {boxes!r}")

    def make(seed: int) -> tuple[str, dict]:
        text = render(generate(seed, boxes))
        return text, {"id": f"sokoban{boxes}-{split}-{seed}", "seed": seed, "level": text}

    return gc.split_rows(split, n, make)
