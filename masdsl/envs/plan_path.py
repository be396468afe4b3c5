"""Path planning on a 10x10 grid with about 22 % of the cells blocked: breadth-first distances, a
generator whose start and goal are always connected, the `plan_path` env and the
`plan_path(split, n)` data source.

Grid text: one row per line, `.` free and `#` blocked. The board (`env.board`, and the tool
program's stdin) also marks the agent `A` and the goal `G`. Cells are (row, column), 0-based;
"U" is row - 1, "D" row + 1, "L" column - 1, "R" column + 1. `env.position` is `[row, column]`.

**Reward of a list of moves** (`step_reward()`; the shape of DESIGN.md §6): each move executed
earns `STEP_PENALTY` (-0.01), plus potential-based shaping `GAMMA * phi(after) - phi(before)`
with `GAMMA` = 0.99 and `phi(cell) = -dist(cell) / max_dist`, where `dist` is the breadth-first
distance to the goal and `max_dist` the largest such distance over the cells connected to the
goal (so phi is in [-1, 0] and 0 at the goal; Ng, Harada & Russell 1999: shaping of this form
leaves the optimal policy unchanged), plus `GOAL_REWARD` (+1) on the move that reaches the goal.
Moves run in order and stop at the goal (later moves are ignored) or at the first blocked move
(off the grid or into a `#`): the moves before it stay played, the action is invalid and
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
from masdsl.errors import DataError

SIZE = 10
BLOCKED = 22  # blocked cells in a generated grid (22 % of 100)
MIN_DISTANCE = 5  # generated start and goal are at least this many moves apart
GAMMA = 0.99
STEP_PENALTY = -0.01
GOAL_REWARD = 1.0
# `env.legend`: how to read `env.board`, for prompts
LEGEND = "# blocked, . free, A you, G the goal; U/D/L/R move you one cell (U is up)"


@dataclass(frozen=True)
class Maze:
    """A grid and its goal, with the distance of every cell to the goal (-1: cut off)."""

    height: int
    width: int
    blocked: frozenset[Cell]
    goal: Cell
    dist: tuple[tuple[int, ...], ...]
    max_dist: int

    def free(self, cell: Cell) -> bool:
        r, c = cell
        return 0 <= r < self.height and 0 <= c < self.width and cell not in self.blocked


def distances(height: int, width: int, blocked: frozenset[Cell], source: Cell) -> tuple[tuple[int, ...], ...]:
    """Breadth-first distance of every cell from `source` (-1 where unreachable or blocked).

    >>> distances(2, 3, frozenset({(0, 1)}), (0, 0))
    ((0, -1, 4), (1, 2, 3))
    """
    dist = [[-1] * width for _ in range(height)]
    dist[source[0]][source[1]] = 0
    queue = deque([source])
    while queue:
        r, c = queue.popleft()
        for dr, dc in DIRS.values():
            nr, nc = r + dr, c + dc
            if 0 <= nr < height and 0 <= nc < width and (nr, nc) not in blocked and dist[nr][nc] < 0:
                dist[nr][nc] = dist[r][c] + 1
                queue.append((nr, nc))
    return tuple(tuple(row) for row in dist)


def make_maze(rows: list[str], goal: Cell) -> Maze:
    """A `Maze` from grid rows (`.` free, `#` blocked) and a free goal cell."""
    blocked = frozenset((r, c) for r, row in enumerate(rows) for c, ch in enumerate(row) if ch == "#")
    height, width = len(rows), len(rows[0])
    dist = distances(height, width, blocked, goal)
    return Maze(height, width, blocked, goal, dist, max(1, max(max(row) for row in dist)))


def potential(maze: Maze, cell: Cell) -> float:
    """phi(cell) = -dist(cell) / max_dist: -1 at the farthest connected cell, 0 at the goal."""
    return -maze.dist[cell[0]][cell[1]] / maze.max_dist


def play(maze: Maze, position: Cell, moves: list[str]) -> tuple[Cell, float, bool, int]:
    """Play `moves` from `position`: `(position after, reward, all legal, moves executed)`.

    On a 1x4 corridor with the goal at the right end, max_dist is 3, and one step right from
    the left end earns -0.01 + 0.99 * (-2/3) - (-3/3) = 0.33:

    >>> maze = make_maze(["...."], (0, 3))
    >>> pos, reward, ok, done = play(maze, (0, 0), ["R"])
    >>> pos, round(reward, 4), ok, done
    ((0, 1), 0.33, True, 1)
    >>> pos, reward, ok, done = play(maze, (0, 1), ["R", "R", "L"])  # "L" is never played
    >>> pos, round(reward, 4), ok, done
    ((0, 3), 1.65, True, 2)
    >>> pos, reward, ok, done = play(maze, (0, 1), ["U"])
    >>> pos, round(reward, 4), ok, done
    ((0, 1), -0.5, False, 0)
    """
    reward, executed = 0.0, 0
    for move in moves:
        if position == maze.goal:
            break
        dr, dc = DIRS[move]
        nxt = (position[0] + dr, position[1] + dc)
        if not maze.free(nxt):
            return position, reward + gc.INVALID_PENALTY, False, executed
        executed += 1
        reward += STEP_PENALTY + GAMMA * potential(maze, nxt) - potential(maze, position)
        if nxt == maze.goal:
            reward += GOAL_REWARD
        position = nxt
    return position, reward, True, executed


def shortest_path(maze: Maze, start: Cell) -> list[str] | None:
    """A shortest list of moves from `start` to the goal (walking down `dist`), or None.

    >>> shortest_path(make_maze([".#.", "..."], (0, 2)), (0, 0))
    ['D', 'R', 'R', 'U']
    """
    if maze.dist[start[0]][start[1]] < 0:
        return None
    path, cell = [], start
    while cell != maze.goal:
        for move, (dr, dc) in DIRS.items():
            nxt = (cell[0] + dr, cell[1] + dc)
            if maze.free(nxt) and maze.dist[nxt[0]][nxt[1]] == maze.dist[cell[0]][cell[1]] - 1:
                path.append(move)
                cell = nxt
                break
    return path


def generate(seed: int, max_tries: int = 10_000) -> tuple[list[str], Cell, Cell]:
    """`(grid rows, start, goal)`: SIZE x SIZE, BLOCKED cells blocked, start and goal free and
    connected, at least MIN_DISTANCE moves apart; deterministic in `seed`.

    >>> rows, start, goal = generate(0)
    >>> sum(row.count("#") for row in rows), len(shortest_path(make_maze(rows, goal), start)) >= MIN_DISTANCE
    (22, True)
    """
    rng = random.Random(f"plan_path-{seed}")
    cells = [(r, c) for r in range(SIZE) for c in range(SIZE)]
    for _ in range(max_tries):
        blocked = set(rng.sample(cells, BLOCKED))
        start, goal = rng.sample([cell for cell in cells if cell not in blocked], 2)
        rows = ["".join("#" if (r, c) in blocked else "." for c in range(SIZE)) for r in range(SIZE)]
        dist = distances(SIZE, SIZE, frozenset(blocked), goal)[start[0]][start[1]]
        if dist >= MIN_DISTANCE:
            return rows, start, goal
    raise DataError(f"plan_path: no connected start and goal after {max_tries} tries (seed {seed})")


def render(maze: Maze, position: Cell) -> str:
    """Board text: `#` blocked, `.` free, `A` the agent, `G` the goal (`A` once reached).

    >>> print(render(make_maze([".#.", "..."], (0, 2)), (1, 0)))
    .#G
    A..
    """
    marks = {maze.goal: "G", position: "A"}
    return "\n".join("".join(marks.get((r, c), "#" if (r, c) in maze.blocked else ".")
                             for c in range(maze.width)) for r in range(maze.height))


# ---- the env ------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanPathState(gc.GameState):
    maze: Maze
    start: Cell
    position: Cell

    def solved(self) -> bool:
        return self.position == self.maze.goal

    def progress(self) -> float:
        """1 - dist(position) / dist(start), clipped to [0, 1] (walking away scores 0)."""
        d0 = self.maze.dist[self.start[0]][self.start[1]]
        d = self.maze.dist[self.position[0]][self.position[1]]
        return 1.0 if d0 <= 0 else min(1.0, max(0.0, 1.0 - d / d0))


def walk(state: PlanPathState, role: str, moves: Any) -> PlanPathState:
    """The state after `role` plays `moves` (see the module doc for legality and reward)."""
    if not moves:
        return gc.invalid(state, role, "no moves")
    clean = gc.normalise_moves(moves)
    if clean is None:
        return gc.invalid(state, role, f"moves must be a list of U/D/L/R, got {moves!r:.80}")
    position, reward, legal, executed = play(state.maze, state.position, clean)
    if legal:
        note = "reached the goal" if position == state.maze.goal else f"played {executed} moves"
    else:
        note = f"invalid action: move {executed + 1} ({clean[executed]}) is blocked; played {executed} moves"
    return replace(state, position=position, moves=state.moves + executed, last_role=role,
                   last_valid=legal, last_reward=reward, feedback=note)


def _cell(value: Any, name: str, row_id: Any) -> Cell:
    if (isinstance(value, (list, tuple)) and len(value) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
        return (value[0], value[1])
    raise DataError(f"plan_path: task row {row_id!r}: `{name}` must be [row, column], got {value!r}")


def maze_from_task(task: Mapping[str, Any]) -> tuple[Maze, Cell]:
    """The task's maze and start, checked (a `DataError` names the row otherwise)."""
    row_id = task.get("id", "?") if isinstance(task, Mapping) else "?"
    raw = gc.task_field(task, "grid", "plan_path")
    rows = raw.splitlines() if isinstance(raw, str) else raw
    if (not isinstance(rows, (list, tuple)) or not rows or not all(isinstance(r, str) for r in rows)
            or len({len(r) for r in rows}) != 1 or not rows[0] or set("".join(rows)) - set(".#")):
        raise DataError(f"plan_path: task row {row_id!r}: `grid` must be equal-length rows of `.` and `#`")
    start = _cell(gc.task_field(task, "start", "plan_path"), "start", row_id)
    goal = _cell(gc.task_field(task, "goal", "plan_path"), "goal", row_id)
    for name, (r, c) in (("start", start), ("goal", goal)):
        if not (0 <= r < len(rows) and 0 <= c < len(rows[0])) or rows[r][c] == "#":
            raise DataError(f"plan_path: task row {row_id!r}: `{name}` {[r, c]} is off the grid or blocked")
    maze = make_maze(list(rows), goal)
    if maze.dist[start[0]][start[1]] < 0:
        raise DataError(f"plan_path: task row {row_id!r}: the goal cannot be reached from the start")
    return maze, start


@env("plan_path", fields=("board", "tool_output", "moves", "position", "feedback", "legend"))
class PlanPathEnv:
    """Path planning (10x10). Planner field `moves` (U/D/L/R), tool field `code` (stdin: the
    board text). Success: the agent stands on the goal."""

    def __init__(self, *, limits: Any = None):
        self.limits = limits

    def reset(self, task: Mapping[str, Any]) -> PlanPathState:
        maze, start = maze_from_task(task)
        return PlanPathState(maze=maze, start=start, position=start)

    def apply(self, state: PlanPathState, role: str, fields: Mapping[str, Any]) -> PlanPathState:
        kind, value = gc.pick_action(fields)
        if kind is None:
            return gc.noop(state, role)
        if kind == "moves":
            return walk(state, role, value)
        if kind == "code":
            return gc.tool_step(state, role, value, stdin=render(state.maze, state.position) + "\n",
                                limits=self.limits,
                                score=lambda out: walk(state, role, gc.parse_tool_output("actions", out)))
        return gc.invalid(state, role, f"plan_path takes `moves`, not `{kind}`")

    def view(self, state: PlanPathState) -> Mapping[str, Any]:
        return {"board": render(state.maze, state.position), "tool_output": state.tool_output,
                "moves": state.moves, "position": list(state.position), "feedback": state.feedback,
                "legend": LEGEND}

    def success(self, state: PlanPathState) -> bool:
        return state.solved()


@data_source("plan_path", fields=("id", "seed", "grid", "start", "goal"))
def plan_path(split: str, n: int = 64) -> list[dict]:
    """Generated 10x10 grids with a connected start and goal; train and eval disjoint."""
    gc.check_split(split, n, "plan_path")

    def make(seed: int) -> tuple[str, dict]:
        rows, start, goal = generate(seed)
        text = "\n".join(rows)
        key = f"{text}\n{start}\n{goal}"
        return key, {"id": f"plan_path-{split}-{seed}", "seed": seed, "grid": text,
                     "start": list(start), "goal": list(goal)}

    return gc.split_rows(split, n, make)
