"""Path planning on a square grid (10x10 by default) with about 22 % of the cells blocked:
breadth-first distances, a generator whose start and goal are always connected, the `plan_path`
env and the `plan_path(split, n, size=10)` data source.

Grid text: one row per line, `.` free and `#` blocked. The board (`env.board`, and the tool
program's stdin) also marks the agent `A` and the goal `G`. Cells are (row, column), 0-based;
"U" is row - 1, "D" row + 1, "L" column - 1, "R" column + 1. `env.position` is `[row, column]`,
`env.size` the side of the grid.

**Reward of a list of moves** (`step_reward()`, the sum of these terms; PettingLLMs'
`PlanPathGridEnvState` with its default coefficients):

- `step_penalty()`: -0.01 per legal move; `invalid_penalty()`: -0.1 per blocked move (off the
  grid or into a `#`). A blocked move does not end the list: the agent stays put and the
  remaining moves still run, as in the reference.
- `distance_shaping()`: on every move, legal or not, `0.99 * phi(after) - phi(before)` with
  `phi(cell) = -(Manhattan distance from cell to the goal)`: about +1 for a step toward the goal,
  -1 for a step away, and `+0.01 * distance` for a blocked move (the reference's discount, kept
  so that its numbers replay exactly). That discount pays for walking in circles: each move of a
  closed walk earns `0.01 * distance`, so 20 moves D,U,D,U on an open 5x5 board score +1.3, more
  than one correct move. `env plan_path(gamma=1.0)` (what the shipped workflows use) makes the
  shaping telescope: a walk earns `phi(end) - phi(start)`, a closed walk exactly 0 (minus its
  step penalties), never more than staying put.
- `win_bonus()`: +1 on the move that reaches the goal; later moves are ignored.
- `optimal_bonus()`: +0.5 when the goal is reached after exactly as many moves (blocked ones
  included, counted over the episode) as the shortest path from the start.
- `step_limit_penalty()`: -1 on the move that uses the last of `max_steps` (default 100; the
  reference's 10 000 is never reached) moves counted over the episode; the episode is then over.
- `no_action_penalty()`: -2 for an empty list or one holding something other than a direction
  (nothing is played).

After the goal or the step limit every action scores 0. `valid()` is False when a move was
blocked.
"""

from __future__ import annotations

import functools
import json
import random
from collections import deque
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Mapping

from masdsl.envs import games_common as gc
from masdsl.envs.games import MoveGameEnv, Played
from masdsl.envs.games_common import DIRS, Cell
from masdsl.envs.plan_path_probe import wrong_path
from masdsl.envs.registry import data_source, env
from masdsl.errors import DataError, UserError

SIZE = 10  # default side of a generated grid
MIN_SIZE, MAX_SIZE = 3, 30
BLOCK_RATIO = 0.22  # the reference's share of blocked cells
BLOCKED = 22  # blocked cells in a generated 10x10 grid (`blocked_cells(size)` in general)
MIN_DISTANCE = 5  # a 10x10 start and goal are at least this many moves apart (`min_distance(size)`)
# reward coefficients (PettingLLMs' PlanPathGridEnvState defaults, except MAX_STEPS)
STEP_PENALTY = gc.STEP_PENALTY
INVALID_MOVE_PENALTY = -0.1
GOAL_REWARD = 1.0
OPTIMAL_BONUS = 0.5
STEP_LIMIT_PENALTY = -1.0
SHAPING_WEIGHT = 1.0
GAMMA = 0.99
MAX_STEPS = 100
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
    return Maze(height, width, blocked, goal, dist)


def potential(maze: Maze, cell: Cell) -> int:
    """phi(cell) = -(Manhattan distance from `cell` to the goal), the reference's potential.

    >>> potential(make_maze(["...", "..."], (0, 2)), (1, 0))
    -3
    """
    return -(abs(cell[0] - maze.goal[0]) + abs(cell[1] - maze.goal[1]))


def play(maze: Maze, position: Cell, moves: list[str], *, steps: int = 0, shortest: int | None = None,
         max_steps: int = MAX_STEPS, gamma: float = GAMMA) -> Played:
    """Play `moves` from `position`, `steps` moves into an episode whose shortest solution has
    `shortest` moves (see the module doc for the reward).

    On a 1x4 corridor with the goal at the right end, one step right from the left end earns
    -0.01 + (0.99 * -2 - -3) = 1.01; walking the whole corridor adds the goal's +1 and the
    optimal path's +0.5:

    >>> maze = make_maze(["...."], (0, 3))
    >>> w = play(maze, (0, 0), ["R"])
    >>> w.after, round(w.reward, 4), w.executed, w.blocked
    ((0, 1), 1.01, 1, ())
    >>> w = play(maze, (0, 0), ["R", "R", "R", "L"], shortest=3)  # "L" is never played
    >>> w.after, round(w.reward, 4), sorted(w.terms)
    ((0, 3), 4.5, ['distance_shaping', 'optimal_bonus', 'step_penalty', 'win_bonus'])
    >>> w = play(maze, (0, 1), ["U", "R"])  # "U" leaves the grid; "R" still runs
    >>> w.after, round(w.reward, 4), w.executed, w.blocked
    ((0, 2), 0.92, 1, (1,))
    """
    terms: dict[str, float] = {}
    executed, blocked = 0, []
    for i, move in enumerate(moves):
        if position == maze.goal or steps >= max_steps:
            break
        before = potential(maze, position)
        dr, dc = DIRS[move]
        nxt = (position[0] + dr, position[1] + dc)
        if maze.free(nxt):
            gc.add_terms(terms, "step_penalty", STEP_PENALTY)
            executed += 1
            position = nxt
        else:
            gc.add_terms(terms, "invalid_penalty", INVALID_MOVE_PENALTY)
            blocked.append(i + 1)
        gc.add_terms(terms, "distance_shaping", SHAPING_WEIGHT * (gamma * potential(maze, position) - before))
        steps += 1
        if position == maze.goal:
            gc.add_terms(terms, "win_bonus", GOAL_REWARD)
            if steps == shortest:
                gc.add_terms(terms, "optimal_bonus", OPTIMAL_BONUS)
        elif steps >= max_steps:
            gc.add_terms(terms, "step_limit_penalty", STEP_LIMIT_PENALTY)
    return Played(position, terms, executed, tuple(blocked), steps)


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


def blocked_cells(size: int) -> int:
    """Blocked cells in a generated `size` x `size` grid: 22 % of them, rounded.

    >>> blocked_cells(10), blocked_cells(5)
    (22, 6)
    """
    return round(BLOCK_RATIO * size * size)


def min_distance(size: int) -> int:
    """The shortest start-to-goal distance a generated grid allows: half the side, rounded up.

    >>> min_distance(10), min_distance(5)
    (5, 3)
    """
    return (size + 1) // 2


def check_size(size: Any) -> int:
    """`size` if it is a supported grid side, else a `UserError`."""
    if not isinstance(size, int) or isinstance(size, bool) or not MIN_SIZE <= size <= MAX_SIZE:
        raise UserError(f"plan_path: size must be an integer from {MIN_SIZE} to {MAX_SIZE}, got {size!r}")
    return size


def generate(seed: int, size: int = SIZE, max_tries: int = 10_000) -> tuple[list[str], Cell, Cell]:
    """`(grid rows, start, goal)`: `size` x `size`, `blocked_cells(size)` cells blocked, start
    and goal free and connected, at least `min_distance(size)` moves apart; deterministic in
    (seed, size).

    >>> rows, start, goal = generate(0)
    >>> sum(row.count("#") for row in rows), len(shortest_path(make_maze(rows, goal), start)) >= MIN_DISTANCE
    (22, True)
    >>> rows, start, goal = generate(0, size=5)
    >>> len(rows), sum(row.count("#") for row in rows), len(shortest_path(make_maze(rows, goal), start)) >= 3
    (5, 6, True)
    """
    check_size(size)
    # the 10x10 stream keeps its historical name, so its puzzles do not change
    rng = random.Random(f"plan_path-{seed}" if size == SIZE else f"plan_path-{size}-{seed}")
    cells = [(r, c) for r in range(size) for c in range(size)]
    n_blocked, least = blocked_cells(size), min_distance(size)
    for _ in range(max_tries):
        blocked = set(rng.sample(cells, n_blocked))
        start, goal = rng.sample([cell for cell in cells if cell not in blocked], 2)
        rows = ["".join("#" if (r, c) in blocked else "." for c in range(size)) for r in range(size)]
        dist = distances(size, size, frozenset(blocked), goal)[start[0]][start[1]]
        if dist >= least:
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
    steps: int = 0  # moves counted towards the step limit and the optimal bonus (blocked included)
    max_steps: int = MAX_STEPS
    gamma: float = GAMMA

    def solved(self) -> bool:
        return self.position == self.maze.goal

    def progress(self) -> float:
        """1 - dist(position) / dist(start), clipped to [0, 1] (walking away scores 0)."""
        d0 = self.maze.dist[self.start[0]][self.start[1]]
        d = self.maze.dist[self.position[0]][self.position[1]]
        return 1.0 if d0 <= 0 else min(1.0, max(0.0, 1.0 - d / d0))


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


@env("plan_path", fields=("board", "tool_output", "moves", "position", "goal", "feedback", "legend", "size"))
class PlanPathEnv(MoveGameEnv):
    """Path planning (10x10 by default). Planner field `moves` (U/D/L/R), tool field `code`
    (stdin: the board text). Success: the agent stands on the goal. `env plan_path(max_steps=100,
    gamma=0.99, helper=false)`: the step limit over the episode, the discount of
    `distance_shaping()` (1.0: a closed walk earns no shaping) and whether a tool program may
    `import grid` (`masdsl.envs.grid_helper`: `grid.shortest_path(board)`)."""

    name, legend, board_field = "plan_path", LEGEND, "position"
    solved_note, was_solved_note = "reached the goal", "the goal is already reached"

    def __init__(self, *, limits: Any = None, max_steps: int = MAX_STEPS, gamma: float = GAMMA,
                 helper: bool = False) -> None:
        super().__init__(limits=limits, max_steps=max_steps, gamma=gamma)
        if not isinstance(helper, bool):
            raise UserError(f"plan_path: helper must be true or false, got {helper!r}")
        self.helper = helper

    def tool_modules(self, state: PlanPathState) -> dict[str, str]:
        return {"grid": helper_source()} if self.helper else {}

    def reset(self, task: Mapping[str, Any]) -> PlanPathState:
        maze, start = maze_from_task(task)
        return PlanPathState(maze=maze, start=start, position=start, max_steps=self.max_steps,
                             gamma=self.gamma)

    def play_moves(self, state: PlanPathState, moves: list[str]) -> Played:
        return play(state.maze, state.position, moves, steps=state.steps,
                    shortest=state.maze.dist[state.start[0]][state.start[1]],
                    max_steps=state.max_steps, gamma=state.gamma)

    def board(self, state: PlanPathState) -> str:
        return render(state.maze, state.position)

    def demonstration(self, state: PlanPathState, field: str) -> str | None:
        """The planner's shortest path as a JSON list, or the tool's program that prints it
        (with the helper, the three lines that call it; without, the helper's own breadth-first
        search with its I/O, the paper's contract).

        >>> env = PlanPathEnv(helper=True)
        >>> state = env.reset({"id": "t", "grid": ["..", ".."], "start": [0, 0], "goal": [1, 1]})
        >>> env.demonstration(state, "moves")
        '["D", "R"]'
        >>> print(env.demonstration(state, "code"))
        ```python
        import sys, json, grid
        board = sys.stdin.read()
        print(json.dumps(grid.shortest_path(board)))
        ```
        >>> env.demonstration(state, "grid") is None
        True
        """
        if field == "moves":
            return json.dumps(shortest_path(state.maze, state.position))
        if field != "code":
            return None
        if self.helper:
            body = "import sys, json, grid\nboard = sys.stdin.read()\nprint(json.dumps(grid.shortest_path(board)))"
        else:
            search = helper_source().split("from collections import deque", 1)[1].strip()  # no docstring
            body = ("import sys, json\nfrom collections import deque\n\n" + search
                    + "\n\n\nprint(json.dumps(shortest_path(sys.stdin.read())))")
        return f"```python\n{body}\n```"

    def size(self, state: PlanPathState) -> int:
        return max(state.maze.height, state.maze.width)

    def wrong_plan(self, state: PlanPathState) -> str:  # `train.eval_probe=wrong_plan` (masdsl.runtime.probes)
        return json.dumps(wrong_path(state.maze, state.position))

    def extra_view(self, state: PlanPathState) -> dict[str, Any]:
        return {"position": list(state.position), "goal": list(state.maze.goal)}


@functools.cache
def helper_source() -> str:
    """The source of `masdsl.envs.grid_helper`, sent to tool programs as the module `grid`."""
    return (Path(__file__).parent / "grid_helper.py").read_text(encoding="utf-8")


@data_source("plan_path", fields=("id", "seed", "grid", "start", "goal"))
def plan_path(split: str, n: int = 64, size: int = SIZE) -> list[dict]:
    """Generated `size` x `size` grids (10x10 by default) with a connected start and goal;
    train and eval disjoint."""
    gc.check_split(split, n, "plan_path")
    check_size(size)
    prefix = "plan_path" if size == SIZE else f"plan_path{size}"

    def make(seed: int) -> tuple[str, dict]:
        rows, start, goal = generate(seed, size)
        text = "\n".join(rows)
        key = f"{text}\n{start}\n{goal}"
        return key, {"id": f"{prefix}-{split}-{seed}", "seed": seed, "grid": text,
                     "start": list(start), "goal": list(goal)}

    return gc.split_rows(split, n, make)


gc.register_term("distance_shaping", ("plan_path",),
                 "Plan-Path's potential shaping, 0.99 * phi(after) - phi(before) per move with "
                 "phi = -(Manhattan distance to the goal): about +1 per step toward the goal.")
