"""Sudoku (4x4 and 9x9): the rules, the reward, the `sudoku` env and the `sudoku(split, n, size=4)`
data source. The solver that counts solutions and the generator of puzzles with exactly one
solution are in `masdsl.envs.sudoku_solver` (`solve`, `count_solutions`, `generate`).

A grid is a tuple of rows of ints, 0 marking an empty cell. The board text (`env.board`, and
the tool program's stdin) is one row per line, values separated by spaces.

**Reward of a grid submission** (`step_reward()`, the sum of these terms; PettingLLMs'
`SudukuEnvState` for a full-grid action):

- `no_action_penalty()`: -2 when nothing was parsed; `invalid_penalty()`: -1 for a malformed
  grid (wrong shape, a value outside 0..size, a given overwritten). Either way the board is
  unchanged. (The reference ignores the givens, so a legal grid that overwrites them counts
  as solved there; here it is malformed.)
- otherwise the grid replaces the board, as in the reference, and scores `step_penalty()`
  (-0.01), then either, when it solves the puzzle (full, no value twice in a row, column or box),
  `win_bonus()` (+2) and `optimal_bonus()` (+0.5 when no more grids were scored before it than
  the puzzle has empty cells: in practice always), or else
  `fill_shaping()` = 0.5 x the change in the fraction of filled cells (of all size x size),
  `constraint_shaping()` = 0.02 x the change in satisfied constraints (each row, column and box
  without a repeated value counts its filled cells minus one), and `conflict_penalty()` (-0.5)
  when a value repeats in a row, column or box.

The exact solution of a 4x4 puzzle thus scores -0.01 + 2 + 0.5 = 2.49 on the first submission.
Zeros are allowed in a submission (a partly filled grid scores its shaping; the reference
rejects them with -1). After the puzzle is solved every action scores 0. `progress()` is the
fraction of the originally empty cells holding their solution value (1 once solved); for a
user's puzzle with several solutions it counts against the first one the solver finds, and any
legal completion still counts as solved.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from masdsl.envs import games_common as gc
from masdsl.envs.games import GameEnv
from masdsl.envs.registry import data_source, env
from masdsl.envs.sudoku_solver import BOX, Grid, generate, solve
from masdsl.errors import DataError, UserError

# reward coefficients (PettingLLMs' SudukuEnvState)
STEP_PENALTY = gc.STEP_PENALTY
SOLVED_BONUS = 2.0
OPTIMAL_BONUS = 0.5
MALFORMED_PENALTY = -1.0
CONFLICT_PENALTY = -0.5
FILL_WEIGHT = 0.5
CONSTRAINT_WEIGHT = 0.02
# `env.legend`: how to read `env.board`, for prompts
LEGEND = "one row per line, values separated by spaces, 0 marks an empty cell"


# ---- rules and reward ---------------------------------------------------------------------


def units(size: int) -> list[tuple[str, int, list[tuple[int, int]]]]:
    """Every row, column and box of a `size` grid: `(kind, number, cells)`, numbered from 1."""
    b = BOX[size]
    out = [("row", i + 1, [(i, c) for c in range(size)]) for i in range(size)]
    out += [("column", i + 1, [(r, i) for r in range(size)]) for i in range(size)]
    out += [("box", i + 1, [((i // b) * b + d // b, (i % b) * b + d % b) for d in range(size)])
            for i in range(size)]
    return out


def malformed(puzzle: Grid, grid: Any) -> str | None:
    """Why `grid` cannot be played on `puzzle` at all (shape, range, a given changed), or None.

    >>> P = ((1, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0))
    >>> malformed(P, [[1, 2, 3, 4]])
    'wrong shape: expected 4 rows of 4 values'
    >>> malformed(P, [[2, 0, 0, 0]] + [[0] * 4] * 3)
    'overwrites the given 1 at row 1, column 1'
    >>> malformed(P, [[1, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 5, 0]])
    'value 5 out of range 0..4 at row 4, column 3'
    >>> malformed(P, [[1, 0, 0, 1]] + [[0] * 4] * 3) is None  # legal to play; it breaks a rule
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
    return None


def conflict(grid: Grid) -> str | None:
    """The first value repeated in a row, column or box of a well-formed grid, or None.

    >>> conflict(((1, 0, 0, 1),) + ((0,) * 4,) * 3)
    'value 1 twice in row 1'
    >>> conflict(((1, 0, 0, 0), (0, 1, 0, 0)) + ((0,) * 4,) * 2)
    'value 1 twice in box 1'
    """
    for kind, number, cells in units(len(grid)):
        values = [grid[r][c] for r, c in cells if grid[r][c]]
        for v in values:
            if values.count(v) > 1:
                return f"value {v} twice in {kind} {number}"
    return None


def grid_problem(puzzle: Grid, grid: Any) -> str | None:
    """Why `grid` is not a legal grid for `puzzle` (malformed, or a rule broken), or None.

    >>> P = ((1, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0))
    >>> grid_problem(P, [[1, 0, 0, 1]] + [[0] * 4] * 3)
    'value 1 twice in row 1'
    >>> grid_problem(P, [[1, 2, 3, 4], [3, 4, 1, 2], [2, 1, 4, 3], [4, 3, 2, 1]]) is None
    True
    """
    return malformed(puzzle, grid) or conflict(grid)


def is_full(grid: Grid) -> bool:
    """Whether no cell is empty."""
    return all(v for row in grid for v in row)


def is_solved(grid: Grid) -> bool:
    """Whether a well-formed grid is a solution: full and no value twice in a row, column or
    box (the givens are kept by every grid that reaches the board)."""
    return is_full(grid) and conflict(grid) is None


def progress_of(puzzle: Grid, solution: Grid, grid: Grid) -> float:
    """Fraction of the originally empty cells of `grid` that hold their solution value (1 for
    any solution, so a user's puzzle with several solutions is scored fairly).

    >>> S = ((1, 2, 3, 4), (3, 4, 1, 2), (2, 1, 4, 3), (4, 3, 2, 1))
    >>> P = ((1, 2, 3, 4), (3, 4, 1, 2), (2, 1, 0, 0), (0, 0, 0, 0))
    >>> progress_of(P, S, ((1, 2, 3, 4), (3, 4, 1, 2), (2, 1, 4, 3), (0, 0, 0, 0)))
    0.3333333333333333
    """
    empty = [(r, c) for r, row in enumerate(puzzle) for c, v in enumerate(row) if not v]
    if not empty or is_solved(grid):
        return 1.0
    return sum(grid[r][c] == solution[r][c] for r, c in empty) / len(empty)


def filled_fraction(grid: Grid) -> float:
    """Filled cells over all cells (the reference's `_calculate_progress`)."""
    return sum(1 for row in grid for v in row if v) / (len(grid) ** 2)


def constraints_satisfied(grid: Grid) -> int:
    """The reference's `_count_constraints_satisfied`: each row, column and box with no repeated
    value counts its filled cells minus one.

    >>> constraints_satisfied(((1, 2, 3, 4), (3, 4, 1, 2), (2, 1, 4, 3), (4, 3, 2, 1)))
    36
    >>> constraints_satisfied(((1, 2, 0, 0), (0,) * 4, (0,) * 4, (0,) * 4))  # row 1, box 1
    2
    """
    total = 0
    for _, _, cells in units(len(grid)):
        values = [grid[r][c] for r, c in cells if grid[r][c]]
        if len(values) == len(set(values)) and len(values) > 1:
            total += len(values) - 1
    return total


def grid_terms(puzzle: Grid, before: Grid, after: Grid, scored_before: int = 0) -> dict[str, float]:
    """The reward terms of moving the board from `before` to a well-formed `after`, with
    `scored_before` grids scored earlier in the episode (see the module doc).

    >>> S = ((1, 2, 3, 4), (3, 4, 1, 2), (2, 1, 4, 3), (4, 3, 2, 1))
    >>> P = ((1, 2, 3, 4), (3, 4, 1, 2), (2, 1, 0, 0), (0, 0, 0, 0))
    >>> round(sum(grid_terms(P, P, S).values()), 4)
    2.49
    >>> sorted(grid_terms(P, P, ((1, 2, 3, 4), (3, 4, 1, 2), (2, 1, 4, 3), (0, 0, 0, 0))).items())
    [('constraint_shaping', 0.1), ('fill_shaping', 0.0625), ('step_penalty', -0.01)]
    """
    terms = {"step_penalty": STEP_PENALTY}
    if is_solved(after):
        terms["win_bonus"] = SOLVED_BONUS
        if scored_before <= sum(1 for row in puzzle for v in row if not v):
            terms["optimal_bonus"] = OPTIMAL_BONUS
        return terms
    terms["fill_shaping"] = FILL_WEIGHT * (filled_fraction(after) - filled_fraction(before))
    terms["constraint_shaping"] = CONSTRAINT_WEIGHT * (constraints_satisfied(after) - constraints_satisfied(before))
    if conflict(after) is not None:
        terms["conflict_penalty"] = CONFLICT_PENALTY
    return terms


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
        return is_solved(self.grid)  # every grid on the board keeps the givens

    def progress(self) -> float:
        return progress_of(self.puzzle, self.solution, self.grid)


def submit(state: SudokuState, role: str, grid: Any) -> SudokuState:
    """The state after `role` submits `grid`: a well-formed grid replaces the board (even one
    that breaks a rule, as in the reference) and is scored; otherwise the board stays."""
    if state.solved():
        return gc.finished(state, role, "the puzzle is already solved")
    if not grid:
        return gc.no_action(state, role, "no grid")
    problem = malformed(state.puzzle, grid)
    if problem:
        return gc.invalid(state, role, problem, MALFORMED_PENALTY)
    after = tuple(tuple(row) for row in grid)
    terms = grid_terms(state.puzzle, state.grid, after, state.moves)
    clash = conflict(after)
    if clash:
        note = f"breaks the rules: {clash}"
    elif is_full(after):
        note = "solved"
    else:
        note = f"{progress_of(state.puzzle, state.solution, after):.0%} of the empty cells correct"
    return gc.scored(state, role, terms, valid=clash is None, feedback=note, grid=after,
                     moves=state.moves + 1)


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


@env("sudoku", fields=("board", "tool_output", "moves", "feedback", "legend", "size"))
class SudokuEnv(GameEnv):
    """Sudoku 4x4/9x9. Planner field `grid` (a filled grid), tool field `code` (stdin: the
    puzzle as board text). Success: the board holds a solution (full, no rule broken, givens
    kept)."""

    name, legend, action, takes, tool_parser = "sudoku", LEGEND, "grid", "a `grid`", "grid"

    def reset(self, task: Mapping[str, Any]) -> SudokuState:
        puzzle = puzzle_from_task(task)
        solution = solve(puzzle)
        if solution is None:
            raise DataError(f"sudoku: task row {task.get('id', '?')!r}: puzzle has no solution")
        return SudokuState(size=len(puzzle), puzzle=puzzle, solution=solution, grid=puzzle)

    def act(self, state: SudokuState, role: str, grid: Any) -> SudokuState:
        return submit(state, role, grid)

    def board(self, state: SudokuState) -> str:
        return render(state.grid)

    def tool_stdin(self, state: SudokuState) -> str:
        return render(state.puzzle) + "\n"  # the puzzle, not the board: a tool solves from the givens

    def size(self, state: SudokuState) -> int:
        return state.size


@data_source("sudoku", fields=("id", "seed", "size", "puzzle"))
def sudoku(split: str, n: int = 64, size: int = 4) -> list[dict]:
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


gc.register_term("fill_shaping", ("sudoku",),
                 "Sudoku: 0.5 x the change in the fraction of filled cells (0 for a solving grid).")
gc.register_term("constraint_shaping", ("sudoku",),
                 "Sudoku: 0.02 x the change in satisfied constraints (rows, columns and boxes "
                 "without a repeat count their filled cells minus one; 0 for a solving grid).")
gc.register_term("conflict_penalty", ("sudoku",),
                 "Sudoku: -0.5 for a grid with a value twice in a row, column or box.")
