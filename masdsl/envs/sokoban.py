"""Sokoban on 6x6 boards: level text, the rules, a breadth-first solver, a generator whose every
level is verified solvable, the `sokoban` env and the `sokoban(split, n, boxes)` data source.

Level text (XSB notation, one row per line): `#` wall, `_` floor, `.` goal, `$` box, `*` box on a
goal, `@` player, `+` player on a goal. Moves are "U", "D", "L", "R" (up is row - 1); walking
into a box pushes it when the cell behind it is free.

**Reward of a list of moves** (`step_reward()`, the sum of these terms; PettingLLMs'
`SokobanGridEnvState` with its default coefficients):

- `step_penalty()`: -0.01 per legal move; `invalid_penalty()`: -0.05 per blocked move (into a
  wall, or pushing a box into a wall or another box). A blocked move does not end the list:
  the player stays put and the remaining moves still run, as in the reference.
- `push_shaping()`: on every move, legal or not, `0.1 * (0.99 * phi(after) - phi(before))` with
  `phi = -(sum over boxes of the Manhattan distance to the nearest goal)`: +0.101 for a push one
  cell toward a goal, and a small `0.001 * distance` on a move that leaves the boxes where they
  are (the reference's discount, kept so its numbers replay exactly). That discount makes a
  closed walk pay (each move earns `0.001 * distance`, and pushing a box away and back earns
  `0.001 * distance` per push too); `env sokoban(gamma=1.0)`, what the shipped workflows use,
  makes the shaping telescope so that a closed walk earns exactly 0 before its step penalties
  (with `box_on_goal()`'s -1 for a push off a goal, no loop of pushes gains either).
- `box_on_goal()`: +1 per push onto a goal, -1 per push off a goal (the reference: -0.5; -1 here
  so that pushing a box off and back on cannot farm reward).
- `win_bonus()`: +10 on the move that puts the last box on a goal; later moves are ignored.
- `step_limit_penalty()`: -5 on the move that uses the last of `max_steps` (default 200, the
  reference's) moves counted over the episode, blocked ones included; the episode is then over.
- `no_action_penalty()`: -2 for an empty list or one holding something other than a direction
  (nothing is played).

After a win or the step limit every action scores 0. `valid()` is False when a move was blocked.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, replace
from typing import Any, Mapping

from masdsl.envs import games_common as gc
from masdsl.envs.games import MoveGameEnv, Played
from masdsl.envs.games_common import DIRS, Cell
from masdsl.envs.registry import data_source, env
from masdsl.errors import DataError, UserError

SIZE = 6  # generated levels are SIZE x SIZE including the outer wall
MAX_INNER_WALLS = 2
MIN_SOLUTION_MOVES = 4  # generated levels need at least this many moves
MAX_BOXES = 3
# reward coefficients (PettingLLMs' SokobanGridEnvState defaults, except BOX_OFF_GOAL)
STEP_PENALTY = gc.STEP_PENALTY
INVALID_MOVE_PENALTY = -0.05
BOX_ON_GOAL = 1.0
BOX_OFF_GOAL = -1.0
WIN_BONUS = 10.0
STEP_LIMIT_PENALTY = -5.0
SHAPING_WEIGHT = 0.1
GAMMA = 0.99
MAX_STEPS = 200
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


def potential(level: Level) -> float:
    """phi = -(sum over boxes of the Manhattan distance to the nearest goal); 0 when solved.

    >>> potential(parse_level("#######\\n#@$__.#\\n#######"))
    -3
    """
    return -sum(min(abs(b[0] - g[0]) + abs(b[1] - g[1]) for g in level.goals) for b in level.boxes)


def play(level: Level, moves: list[str], *, steps: int = 0, max_steps: int = MAX_STEPS,
         gamma: float = GAMMA) -> Played:
    """Play `moves` from `level`, `steps` moves into the episode (see the module doc).

    >>> lv = parse_level("######\\n#@$_.#\\n######")
    >>> p = play(lv, ["R", "R", "L"])  # two pushes, the second onto the goal; "L" never runs
    >>> round(p.reward, 3), p.executed, p.blocked, p.after.solved()
    (11.181, 2, (), True)
    >>> p = play(lv, ["U", "R"])  # "U" hits the wall, "R" still runs
    >>> round(p.reward, 3), p.executed, p.blocked
    (0.043, 1, (1,))
    """
    terms: dict[str, float] = {}
    executed, blocked = 0, []
    for i, move in enumerate(moves):
        if level.solved() or steps >= max_steps:
            break
        before = potential(level)
        nxt = step(level, move)
        if nxt is None:
            gc.add_terms(terms, "invalid_penalty", INVALID_MOVE_PENALTY)
            blocked.append(i + 1)
        else:
            gc.add_terms(terms, "step_penalty", STEP_PENALTY)
            change = len(nxt.boxes & nxt.goals) - len(level.boxes & level.goals)
            if change:
                gc.add_terms(terms, "box_on_goal", change * (BOX_ON_GOAL if change > 0 else -BOX_OFF_GOAL))
            executed += 1
            level = nxt
        gc.add_terms(terms, "push_shaping", SHAPING_WEIGHT * (gamma * potential(level) - before))
        steps += 1
        if level.solved():
            gc.add_terms(terms, "win_bonus", WIN_BONUS)
        elif steps >= max_steps:
            gc.add_terms(terms, "step_limit_penalty", STEP_LIMIT_PENALTY)
    return Played(level, terms, executed, tuple(blocked), steps)


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
    steps: int = 0  # moves counted towards the step limit (blocked ones included)
    max_steps: int = MAX_STEPS
    gamma: float = GAMMA

    def solved(self) -> bool:
        return self.level.solved()

    def progress(self) -> float:
        """Fraction of the boxes standing on goals."""
        return len(self.level.boxes & self.level.goals) / len(self.level.boxes)


@env("sokoban", fields=("board", "tool_output", "moves", "feedback", "legend", "size"))
class SokobanEnv(MoveGameEnv):
    """Sokoban (6x6). Planner field `moves` (U/D/L/R), tool field `code` (stdin: the board
    text). Success: every box on a goal. `env sokoban(max_steps=200, gamma=0.99)`: the step
    limit over the episode and the discount of `push_shaping()`."""

    name, legend, board_field = "sokoban", LEGEND, "level"
    solved_note, was_solved_note = "all boxes on goals", "all boxes are already on goals"

    def __init__(self, *, limits: Any = None, max_steps: int = MAX_STEPS, gamma: float = GAMMA) -> None:
        super().__init__(limits=limits, max_steps=max_steps, gamma=gamma)

    def reset(self, task: Mapping[str, Any]) -> SokobanState:
        text = gc.task_field(task, "level", "sokoban")
        try:
            level = parse_level(text)
        except (ValueError, TypeError, AttributeError) as exc:
            raise DataError(f"sokoban: task row {task.get('id', '?')!r}: bad level: {exc}") from None
        return SokobanState(level=level, max_steps=self.max_steps, gamma=self.gamma)

    def play_moves(self, state: SokobanState, moves: list[str]) -> Played:
        return play(state.level, moves, steps=state.steps, max_steps=state.max_steps, gamma=state.gamma)

    def board(self, state: SokobanState) -> str:
        return render(state.level)

    def size(self, state: SokobanState) -> int:
        return max(state.level.height, state.level.width)


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


gc.register_term("push_shaping", ("sokoban",),
                 "Sokoban's potential shaping, 0.1 * (0.99 * phi(after) - phi(before)) per move, "
                 "phi = -(box distances to the nearest goal): +0.101 per push one cell toward a goal.")
gc.register_term("box_on_goal", ("sokoban",),
                 "Sokoban: +1 per push of a box onto a goal, -1 per push off a goal.")
