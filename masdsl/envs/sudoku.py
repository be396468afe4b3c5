"""Sudoku (4x4 and 9x9): a solver that counts solutions, a generator of puzzles with exactly one
solution, the `sudoku` env and the `sudoku(split, size, n)` data source.

A grid is a tuple of rows of ints, 0 marking an empty cell. The board text (`env.board`, and
the tool program's stdin) is one row per line, values separated by spaces.

**Reward of a grid submission** (`step_reward()`; the shape of DESIGN.md §6):

- invalid (wrong shape, a value outside 0..size, a given overwritten, a repeated value in a
  row, column or box) -> `INVALID_PENALTY` (-0.5), board unchanged;
- otherwise `progress(after) - progress(before)` (progress: fraction of the originally empty
  cells holding their solution value), plus `SOLVED_BONUS` (+2) when this grid solves the
  puzzle and the board was not solved before.

Zeros are allowed in a submission (a partly filled grid is valid and scores its progress).
Only legal grids reach the board, so a board without zeros is a solution: `solved()` is "no
empty cell left", and a full board has progress 1. Generated puzzles have one solution; for a
user's puzzle with several, progress counts against the first one the solver finds, and any
legal completion still counts as solved.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from itertools import islice
from typing import Any, Iterator, Mapping

from masdsl.envs import games_common as gc
from masdsl.envs.registry import data_source, env
from masdsl.errors import DataError, UserError

BOX = {4: 2, 9: 3}  # supported sizes -> side of a box
EMPTY_CELLS = {4: 10, 9: 50}  # the generator empties up to this many cells, keeping uniqueness
SOLVED_BONUS = 2.0
# `env.legend`: how to read `env.board`, for prompts
LEGEND = "one row per line, values separated by spaces, 0 marks an empty cell"

Grid = tuple[tuple[int, ...], ...]


# ---- solver -------------------------------------------------------------------------------


def _solutions(flat: list[int], size: int, rng: random.Random | None = None) -> Iterator[list[int]]:
    """Every completion of a flat grid (row-major, 0 = empty), by backtracking on bitmasks with
    the most-constrained cell first; `rng` shuffles the values tried (to draw random grids)."""
    b = BOX[size]
    full = (1 << size) - 1
    rows, cols, boxes = [0] * size, [0] * size, [0] * size
    cells = list(flat)
    empties = []
    for i, v in enumerate(cells):
        r, c = divmod(i, size)
        k = (r // b) * b + c // b
        if not v:
            empties.append((i, r, c, k))
            continue
        bit = 1 << (v - 1)
        if (rows[r] | cols[c] | boxes[k]) & bit:
            return  # the givens already clash
        rows[r] |= bit
        cols[c] |= bit
        boxes[k] |= bit

    def search(todo: list[tuple[int, int, int, int]]) -> Iterator[list[int]]:
        if not todo:
            yield list(cells)
            return
        best, best_mask, best_n = 0, 0, size + 1
        for idx, (_, r, c, k) in enumerate(todo):
            mask = full & ~(rows[r] | cols[c] | boxes[k])
            n = mask.bit_count()
            if n < best_n:
                best, best_mask, best_n = idx, mask, n
                if n <= 1:
                    break
        if best_n == 0:
            return
        i, r, c, k = todo[best]
        rest = todo[:best] + todo[best + 1:]
        values = [v for v in range(1, size + 1) if best_mask >> (v - 1) & 1]
        if rng is not None:
            rng.shuffle(values)
        for v in values:
            bit = 1 << (v - 1)
            rows[r] |= bit
            cols[c] |= bit
            boxes[k] |= bit
            cells[i] = v
            yield from search(rest)
            rows[r] ^= bit
            cols[c] ^= bit
            boxes[k] ^= bit
            cells[i] = 0

    yield from search(empties)


def _flat(grid: Grid) -> list[int]:
    return [v for row in grid for v in row]


def _grid(flat: list[int], size: int) -> Grid:
    return tuple(tuple(flat[r * size:(r + 1) * size]) for r in range(size))


def count_solutions(grid: Grid, limit: int = 2) -> int:
    """How many solutions `grid` has, counting no further than `limit`.

    >>> count_solutions(((1, 2, 3, 4), (3, 4, 1, 2), (2, 1, 4, 3), (4, 3, 2, 0)))
    1
    >>> count_solutions(((0,) * 4,) * 4, limit=1000)
    288
    >>> count_solutions(((1, 1, 0, 0), (0,) * 4, (0,) * 4, (0,) * 4))
    0
    """
    return sum(1 for _ in islice(_solutions(_flat(grid), len(grid)), limit))


def solve(grid: Grid) -> Grid | None:
    """The first solution of `grid`, or None.

    >>> solve(((0, 0, 0, 4), (0, 4, 0, 0), (2, 0, 0, 0), (0, 0, 3, 0)))
    ((3, 2, 1, 4), (1, 4, 2, 3), (2, 3, 4, 1), (4, 1, 3, 2))
    """
    first = next(_solutions(_flat(grid), len(grid)), None)
    return None if first is None else _grid(first, len(grid))


def generate(seed: int, size: int = 4) -> Grid:
    """A puzzle with exactly one solution, deterministic in (seed, size).

    A random full grid is drawn, then cells are emptied in random order as long as the puzzle
    keeps a unique solution, up to `EMPTY_CELLS[size]` empty cells.

    >>> p = generate(0)
    >>> sum(v == 0 for row in p for v in row), count_solutions(p)
    (10, 1)
    """
    rng = random.Random(f"sudoku-{size}-{seed}")
    flat = next(_solutions([0] * size * size, size, rng))
    order = list(range(size * size))
    rng.shuffle(order)
    emptied = 0
    for i in order:
        if emptied == EMPTY_CELLS[size]:
            break
        value, flat[i] = flat[i], 0
        if sum(1 for _ in islice(_solutions(flat, size), 2)) == 1:
            emptied += 1
        else:
            flat[i] = value
    return _grid(flat, size)


# ---- rules and reward ---------------------------------------------------------------------


def grid_problem(puzzle: Grid, grid: Any) -> str | None:
    """Why `grid` is not a legal submission for `puzzle`, or None when it is.

    >>> P = ((1, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0))
    >>> grid_problem(P, [[1, 2, 3, 4]])
    'wrong shape: expected 4 rows of 4 values'
    >>> grid_problem(P, [[2, 0, 0, 0]] + [[0] * 4] * 3)
    'overwrites the given 1 at row 1, column 1'
    >>> grid_problem(P, [[1, 0, 0, 1]] + [[0] * 4] * 3)
    'value 1 twice in row 1'
    >>> grid_problem(P, [[1, 0, 0, 0], [0, 1, 0, 0]] + [[0] * 4] * 2)
    'value 1 twice in box 1'
    >>> grid_problem(P, [[1, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 5, 0]])
    'value 5 out of range 0..4 at row 4, column 3'
    >>> grid_problem(P, [[1, 2, 3, 4], [3, 4, 1, 2], [2, 1, 4, 3], [4, 3, 2, 1]]) is None
    True
    """
    size = len(puzzle)
    if (not isinstance(grid, (list, tuple)) or len(grid) != size
            or any(not isinstance(row, (list, tuple)) or len(row) != size for row in grid)):
        return f"wrong shape: expected {size} rows of {size} values"
    for r, row in enumerate(grid):
        for c, v in enumerate(row):
            if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= size:
                return f"value {v!r} out of range 0..{size} at row {r + 1}, column {c + 1}"
            if puzzle[r][c] and v != puzzle[r][c]:
                return f"overwrites the given {puzzle[r][c]} at row {r + 1}, column {c + 1}"
    b = BOX[size]
    units = [("row", i + 1, [(i, c) for c in range(size)]) for i in range(size)]
    units += [("column", i + 1, [(r, i) for r in range(size)]) for i in range(size)]
    units += [("box", i + 1, [((i // b) * b + d // b, (i % b) * b + d % b) for d in range(size)])
              for i in range(size)]
    for kind, number, cells in units:
        values = [grid[r][c] for r, c in cells if grid[r][c]]
        for v in values:
            if values.count(v) > 1:
                return f"value {v} twice in {kind} {number}"
    return None


def is_full(grid: Grid) -> bool:
    """Whether no cell is empty (for a legal grid: whether it is a solution)."""
    return all(v for row in grid for v in row)


def progress_of(puzzle: Grid, solution: Grid, grid: Grid) -> float:
    """Fraction of the originally empty cells of a legal `grid` that hold their solution value
    (1 for a full grid: a legal full grid is a solution).

    >>> S = ((1, 2, 3, 4), (3, 4, 1, 2), (2, 1, 4, 3), (4, 3, 2, 1))
    >>> P = ((1, 2, 3, 4), (3, 4, 1, 2), (2, 1, 0, 0), (0, 0, 0, 0))
    >>> progress_of(P, S, ((1, 2, 3, 4), (3, 4, 1, 2), (2, 1, 4, 3), (0, 0, 0, 0)))
    0.3333333333333333
    """
    empty = [(r, c) for r, row in enumerate(puzzle) for c, v in enumerate(row) if not v]
    if not empty or is_full(grid):
        return 1.0
    return sum(grid[r][c] == solution[r][c] for r, c in empty) / len(empty)


def grid_reward(puzzle: Grid, solution: Grid, before: Grid, after: Grid) -> float:
    """The reward of moving the board from `before` to a legal `after` (see the module doc).

    >>> S = ((1, 2, 3, 4), (3, 4, 1, 2), (2, 1, 4, 3), (4, 3, 2, 1))
    >>> P = ((1, 2, 3, 4), (3, 4, 1, 2), (2, 1, 0, 0), (0, 0, 0, 0))
    >>> grid_reward(P, S, P, S)
    3.0
    >>> round(grid_reward(P, S, P, ((1, 2, 3, 4), (3, 4, 1, 2), (2, 1, 4, 3), (0, 0, 0, 0))), 4)
    0.3333
    """
    gain = progress_of(puzzle, solution, after) - progress_of(puzzle, solution, before)
    newly_solved = is_full(after) and not is_full(before)
    return gain + (SOLVED_BONUS if newly_solved else 0.0)


def render(grid: Grid) -> str:
    """Board text: one row per line, values separated by spaces, 0 for an empty cell.

    >>> print(render(((1, 0), (0, 2))))
    1 0
    0 2
    """
    return "\n".join(" ".join(str(v) for v in row) for row in grid)


# ---- the env ------------------------------------------------------------------------------


@dataclass(frozen=True)
class SudokuState(gc.GameState):
    size: int
    puzzle: Grid
    solution: Grid
    grid: Grid

    def solved(self) -> bool:
        return is_full(self.grid)  # only legal grids reach the board

    def progress(self) -> float:
        return progress_of(self.puzzle, self.solution, self.grid)


def submit(state: SudokuState, role: str, grid: Any) -> SudokuState:
    """The state after `role` submits `grid` (legal: board replaced; otherwise penalised)."""
    if not grid:
        return gc.invalid(state, role, "no grid")
    problem = grid_problem(state.puzzle, grid)
    if problem:
        return gc.invalid(state, role, problem)
    after = tuple(tuple(row) for row in grid)
    reward = grid_reward(state.puzzle, state.solution, state.grid, after)
    if is_full(after):
        note = "solved"
    else:
        note = f"{progress_of(state.puzzle, state.solution, after):.0%} of the empty cells correct"
    return replace(state, grid=after, moves=state.moves + 1, last_role=role, last_valid=True,
                   last_reward=reward, feedback=note)


def puzzle_from_task(task: Mapping[str, Any]) -> Grid:
    """The task's puzzle as a Grid, checked (a `DataError` names the row otherwise)."""
    raw = gc.task_field(task, "puzzle", "sudoku")
    size = len(raw) if isinstance(raw, (list, tuple)) else 0
    row_id = task.get("id", "?")
    if size not in BOX:
        raise DataError(f"sudoku: task row {row_id!r}: puzzle must be 4x4 or 9x9, got {raw!r}")
    problem = grid_problem(((0,) * size,) * size, raw)
    if problem:
        raise DataError(f"sudoku: task row {row_id!r}: puzzle {problem}")
    return tuple(tuple(row) for row in raw)


@env("sudoku", fields=("board", "tool_output", "moves", "feedback", "legend"))
class SudokuEnv:
    """Sudoku 4x4/9x9. Planner field `grid` (a filled grid), tool field `code` (stdin: the
    puzzle as board text). Success: the board is full (every grid on it is legal)."""

    def __init__(self, *, limits: Any = None):
        self.limits = limits

    def reset(self, task: Mapping[str, Any]) -> SudokuState:
        puzzle = puzzle_from_task(task)
        solution = solve(puzzle)
        if solution is None:
            raise DataError(f"sudoku: task row {task.get('id', '?')!r}: puzzle has no solution")
        return SudokuState(size=len(puzzle), puzzle=puzzle, solution=solution, grid=puzzle)

    def apply(self, state: SudokuState, role: str, fields: Mapping[str, Any]) -> SudokuState:
        kind, value = gc.pick_action(fields)
        if kind is None:
            return gc.noop(state, role)
        if kind == "grid":
            return submit(state, role, value)
        if kind == "code":
            return gc.tool_step(state, role, value, stdin=render(state.puzzle) + "\n",
                                limits=self.limits,
                                score=lambda out: submit(state, role, gc.parse_tool_output("grid", out)))
        return gc.invalid(state, role, f"sudoku takes a `grid`, not `{kind}`")

    def view(self, state: SudokuState) -> Mapping[str, Any]:
        return {"board": render(state.grid), "tool_output": state.tool_output,
                "moves": state.moves, "feedback": state.feedback, "legend": LEGEND}

    def success(self, state: SudokuState) -> bool:
        return state.solved()


@data_source("sudoku", fields=("id", "seed", "size", "puzzle"))
def sudoku(split: str, size: int = 4, n: int = 64) -> list[dict]:
    """Generated puzzles with a unique solution; train and eval disjoint (see games_common)."""
    gc.check_split(split, n, "sudoku")
    if size not in BOX:
        raise UserError(f"sudoku: size must be 4 or 9, got {size!r}")

    def make(seed: int) -> tuple[str, dict]:
        puzzle = generate(seed, size)
        row = {"id": f"sudoku{size}-{split}-{seed}", "seed": seed, "size": size,
               "puzzle": [list(r) for r in puzzle]}
        return render(puzzle), row

    return gc.split_rows(split, n, make)
