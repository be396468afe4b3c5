"""Sudoku: generator uniqueness, solver, rules, shaped rewards, immutability, data source."""

from __future__ import annotations

import copy
import itertools

import pytest

from masdsl.envs import games_common as gc
from masdsl.envs import sudoku as sd
from masdsl.envs import sudoku_solver as solver
from masdsl.envs.registry import REGISTRY
from masdsl.errors import DataError, UserError
from masdsl.sandbox import Limits

SOLUTION = ((1, 2, 3, 4), (3, 4, 1, 2), (2, 1, 4, 3), (4, 3, 2, 1))
# 6 empty cells; unique solution SOLUTION (checked in test_hand_puzzle_is_unique)
PUZZLE = ((1, 2, 3, 4), (3, 0, 1, 0), (0, 1, 0, 3), (4, 0, 2, 0))


def is_solution(puzzle, grid) -> bool:
    """An independent checker: every row, column and box is a permutation, givens kept."""
    n = len(puzzle)
    b = solver.BOX[n]
    want = set(range(1, n + 1))
    rows = [set(r) for r in grid]
    cols = [{grid[r][c] for r in range(n)} for c in range(n)]
    boxes = [{grid[br + i][bc + j] for i in range(b) for j in range(b)}
             for br in range(0, n, b) for bc in range(0, n, b)]
    kept = all(not puzzle[r][c] or puzzle[r][c] == grid[r][c] for r in range(n) for c in range(n))
    return kept and all(s == want for s in rows + cols + boxes)


def brute_force_count(puzzle) -> int:
    """Count 4x4 solutions by trying every combination of row permutations."""
    perms = [p for p in itertools.permutations(range(1, 5))]
    options = [[p for p in perms if all(not g or g == v for g, v in zip(row, p))] for row in puzzle]
    return sum(is_solution(puzzle, grid) for grid in itertools.product(*options))


def state(puzzle=PUZZLE):
    return sd.SudokuEnv().reset({"id": "t", "puzzle": [list(r) for r in puzzle]})


def test_hand_puzzle_is_unique():
    assert solver.count_solutions(PUZZLE) == 1 == brute_force_count(PUZZLE)
    assert solver.solve(PUZZLE) == SOLUTION


@pytest.mark.parametrize("seed", range(12))
def test_solver_counts_agree_with_brute_force(seed):
    # random partial grids, including ambiguous and contradictory ones
    import random

    rng = random.Random(seed)
    full = solver.solve(((0,) * 4,) * 4)
    grid = [list(r) for r in full]
    for r, c in rng.sample([(r, c) for r in range(4) for c in range(4)], rng.randint(6, 14)):
        grid[r][c] = 0
    if seed % 3 == 0:  # make it contradictory or different
        grid[0][0] = grid[0][1] or 1
    puzzle = tuple(tuple(r) for r in grid)
    assert solver.count_solutions(puzzle, limit=1000) == brute_force_count(puzzle)


# 200 4x4 puzzles per split; 9x9 ones are slower to generate, so 100 per split (200 in all)
@pytest.mark.parametrize("size,split,n", [(4, "train", 200), (4, "eval", 200), (9, "train", 100), (9, "eval", 100)])
def test_every_generated_puzzle_has_one_solution(size, split, n):
    rows = sd.sudoku(split, size=size, n=n)
    assert len(rows) == n
    assert len({r["id"] for r in rows}) == n
    for i, row in enumerate(rows):
        puzzle = tuple(tuple(r) for r in row["puzzle"])
        assert len(puzzle) == size and all(len(r) == size for r in puzzle)
        assert sum(v == 0 for r in puzzle for v in r) == solver.EMPTY_CELLS[size]
        assert solver.count_solutions(puzzle, limit=2) == 1
        assert is_solution(puzzle, solver.solve(puzzle))
        if i < 20:
            assert solver.generate(row["seed"], size) == puzzle  # the seed reproduces the row


def test_data_source_is_deterministic_and_prefix_stable():
    assert sd.sudoku("train", n=20) == sd.sudoku("train", n=20)
    assert sd.sudoku("train", n=30)[:20] == sd.sudoku("train", n=20)
    assert sd.sudoku("eval", n=0) == []


@pytest.mark.parametrize("args", [("test",), ("train", 5, 5), ("train", -1), ("train", "3"), ("train", 4, 16)])
def test_data_source_rejects_bad_arguments(args):
    with pytest.raises(UserError):
        sd.sudoku(*args)


def test_data_source_takes_n_then_size():
    assert sd.sudoku("train", 3) == sd.sudoku("train", n=3, size=4)
    assert [len(r["puzzle"]) for r in sd.sudoku("eval", 2, size=9)] == [9, 9]


def test_submitting_the_solution_scores_the_bonuses():
    s0 = state()
    s1 = sd.SudokuEnv().apply(s0, "planner", {"grid": [list(r) for r in SOLUTION], "ok": True})
    assert s1.last_valid and s1.solved() and s1.progress() == 1.0
    assert s1.last_reward == pytest.approx(-0.01 + 2.0 + 0.5)  # step, solved, optimal
    assert s1.moves == 1
    again = sd.SudokuEnv().apply(s1, "planner", {"grid": [list(r) for r in SOLUTION], "ok": True})
    assert again.last_reward == 0.0 and "already solved" in again.feedback  # the episode is over


def test_partial_and_wrong_fills_score_the_reference_shaping():
    env = sd.SudokuEnv()
    assert sd.constraints_satisfied(PUZZLE) == 18
    # fill 3 of the 6 empty cells correctly: (1,1)=4, (1,3)=2, (2,0)=2
    partial = [[1, 2, 3, 4], [3, 4, 1, 2], [2, 1, 0, 3], [4, 0, 2, 0]]
    s1 = env.apply(state(), "planner", {"grid": partial, "ok": True})
    assert sd.constraints_satisfied(s1.grid) == 27
    # -0.01 step + 0.5 * 3/16 more cells filled + 0.02 * 9 more constraints satisfied
    assert s1.last_valid and s1.last_reward == pytest.approx(-0.01 + 0.5 * 3 / 16 + 0.02 * 9)
    assert s1.progress() == pytest.approx(0.5)
    # a legal grid that undoes one correct cell: one cell less, three constraints less
    undo = [[1, 2, 3, 4], [3, 4, 1, 0], [2, 1, 0, 3], [4, 0, 2, 0]]
    s2 = env.apply(s1, "planner", {"grid": undo, "ok": True})
    assert s2.last_valid and s2.last_reward == pytest.approx(-0.01 - 0.5 / 16 - 0.02 * 3)
    assert not s2.solved() and s2.progress() == pytest.approx(2 / 6)
    assert REGISTRY.functions["fill_shaping"].fn(s2) == pytest.approx(-0.5 / 16)
    assert REGISTRY.functions["constraint_shaping"].fn(s2) == pytest.approx(-0.06)


@pytest.mark.parametrize("grid,why", [
    ([[1, 2, 3, 4], [3, 3, 1, 0], [0, 1, 0, 3], [4, 0, 2, 0]], "twice in row 2"),
    ([[1, 2, 3, 4], [3, 0, 1, 0], [0, 1, 0, 3], [4, 1, 2, 0]], "twice in column 2"),
    ([[1, 2, 3, 4], [3, 0, 1, 4], [0, 1, 0, 3], [4, 0, 2, 0]], "twice in column 4"),
])
def test_grids_that_break_a_rule_reach_the_board_with_the_conflict_penalty(grid, why):
    s0 = state()
    s1 = sd.SudokuEnv().apply(s0, "planner", {"grid": grid, "ok": True})
    assert not s1.last_valid and why in s1.feedback
    assert s1.grid == tuple(tuple(r) for r in grid) and s1.moves == 1 and not s1.solved()
    fill = 0.5 / 16
    constraints = 0.02 * (sd.constraints_satisfied(s1.grid) - 18)
    assert s1.last_reward == pytest.approx(-0.01 + fill + constraints - 0.5)
    assert REGISTRY.functions["conflict_penalty"].fn(s1) == -0.5


@pytest.mark.parametrize("grid,why,penalty", [
    ([], "no grid", -2.0),
    ([[1, 2, 3, 4]], "wrong shape", -1.0),
    ([[1, 2, 3, 4], [3, 4, 1, 2], [2, 1, 4, 3], [4, 3, 2, 1, 1]], "wrong shape", -1.0),
    ([[2, 1, 3, 4], [3, 4, 1, 2], [1, 2, 4, 3], [4, 3, 2, 1]], "overwrites the given", -1.0),
    ([[1, 2, 3, 4], [3, 0, 1, 0], [0, 1, 0, 3], [4, 0, 2, 7]], "out of range", -1.0),
    ([[1, 2, 3, 4], [3, "4", 1, 0], [0, 1, 0, 3], [4, 0, 2, 0]], "out of range", -1.0),
    ("1234", "wrong shape", -1.0),
])
def test_malformed_grids_are_penalised_and_leave_the_board(grid, why, penalty):
    s0 = state()
    s1 = sd.SudokuEnv().apply(s0, "planner", {"grid": grid, "ok": bool(grid)})
    assert s1.last_reward == penalty
    assert not s1.last_valid and why in s1.feedback
    assert s1.grid == s0.grid and s1.moves == 0


def test_box_duplicate_is_invalid():
    puzzle = ((0,) * 4,) * 4
    problem = sd.grid_problem(puzzle, [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]])
    assert problem == "value 1 twice in box 1"
    problem = sd.grid_problem(puzzle, [[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 3], [0, 0, 3, 0]])
    assert problem == "value 3 twice in box 4"


def test_moves_field_is_invalid_for_sudoku_and_no_field_is_a_noop():
    env = sd.SudokuEnv()
    s = env.apply(state(), "planner", {"moves": ["U"], "ok": True})
    assert not s.last_valid and s.last_reward == -2.0
    s = env.apply(state(), "critic", {"output": "hmm", "ok": True})
    assert s.last_valid and s.last_reward == 0.0 and s.grid == PUZZLE


def test_apply_never_mutates_its_input():
    env = sd.SudokuEnv()
    s0 = state()
    before = copy.deepcopy(s0)
    fields = {"grid": [list(r) for r in SOLUTION], "ok": True}
    s1 = env.apply(s0, "planner", fields)
    assert s0 == before and s0.grid == PUZZLE
    fields["grid"][3][3] = 9  # the caller's list changing later must not reach the state
    assert s1.grid == SOLUTION
    env.apply(s1, "planner", {"grid": [], "ok": False})
    assert s1.grid == SOLUTION and s1.last_valid


def test_env_bound_functions_dispatch_on_the_state():
    fns = {n: REGISTRY.functions[n] for n in ("step_reward", "solved", "progress", "valid")}
    for spec in fns.values():
        assert spec.envs == gc.GAMES and spec.allowed_in("sudoku") and not spec.allowed_in("code")
        assert (spec.min_args, spec.max_args) == (0, 0)  # called as `step_reward()` in a .mas
    s1 = sd.SudokuEnv().apply(state(), "planner", {"grid": [list(r) for r in SOLUTION], "ok": True})
    assert fns["step_reward"].fn(s1) == pytest.approx(2.49)
    assert fns["solved"].fn(s1) is True and fns["valid"].fn(s1) is True
    assert fns["progress"].fn(state()) == 0.0
    with pytest.raises(UserError):
        fns["solved"].fn({"not": "a game state"})


def test_view_and_reset():
    env = sd.SudokuEnv()
    s = state()
    v = env.view(s)
    assert v["board"] == "1 2 3 4\n3 0 1 0\n0 1 0 3\n4 0 2 0"
    assert v["moves"] == 0 and v["tool_output"] == "" and v["size"] == 4
    assert not env.success(s)
    for bad in ({"id": "x"}, {"id": "x", "puzzle": [[1, 2]]}, {"id": "x", "puzzle": [[1, 1, 0, 0]] + [[0] * 4] * 3}):
        with pytest.raises(DataError, match="'x'"):
            env.reset(bad)


# ---- the tool role: a program run in the sandbox on the puzzle ---------------------------

SOLVER = '''
import sys
rows = [[int(v) for v in line.split()] for line in sys.stdin if line.strip()]
n = len(rows); b = int(n ** 0.5)
def ok(r, c, v):
    if v in rows[r] or any(rows[i][c] == v for i in range(n)):
        return False
    br, bc = r - r % b, c - c % b
    return all(rows[br + i][bc + j] != v for i in range(b) for j in range(b))
def fill():
    for r in range(n):
        for c in range(n):
            if rows[r][c] == 0:
                for v in range(1, n + 1):
                    if ok(r, c, v):
                        rows[r][c] = v
                        if fill():
                            return True
                        rows[r][c] = 0
                return False
    return True
fill()
print("\\n".join(" ".join(map(str, row)) for row in rows))
'''


def tool(s, code, ok=True, limits=None):
    return sd.SudokuEnv(limits=limits).apply(s, "tool", {"code": code, "ok": ok})


def test_tool_program_runs_on_the_puzzle_and_is_scored_as_a_submission():
    s0 = state()
    s1 = tool(s0, SOLVER)
    assert s1.tool_output.split() == [str(v) for row in SOLUTION for v in row]
    assert s1.last_valid and s1.last_reward == pytest.approx(2.49)  # as if the planner sent it
    assert s1.grid == s0.grid and s1.moves == 0  # the board itself is the planner's
    assert s1.tool_code == SOLVER and s1.last_role == "tool"
    assert sd.SudokuEnv().view(s1)["tool_output"] == s1.tool_output


def test_tool_program_reads_stdin_and_bad_output_is_penalised():
    s1 = tool(state(), "import sys\nprint(sys.stdin.read().replace('0', '9'))")
    assert "9" in s1.tool_output and "3 9 1 9" in s1.tool_output  # it saw the puzzle
    assert not s1.last_valid and s1.last_reward == -1.0  # 9 is out of range on a 4x4
    s2 = tool(state(), "print('I could not solve it')")
    assert s2.tool_output.strip() == "I could not solve it"
    assert not s2.last_valid and s2.last_reward == -2.0  # no grid in its output


def test_failing_tool_programs_are_contained_and_penalised():
    from masdsl.sandbox import Limits

    crash = tool(state(), "print('partial')\nraise SystemExit('boom')")
    assert not crash.last_valid and crash.last_reward == -2.0
    assert "partial" in crash.tool_output and "exited with status 1" in crash.tool_output
    assert "boom" in crash.tool_output
    loop = tool(state(), "while True:\n    pass", limits=Limits(timeout_s=1))
    assert not loop.last_valid and "timed out" in loop.tool_output
    empty = tool(state(), "", ok=False)
    assert not empty.last_valid and empty.last_reward == -1.0 and empty.tool_output == ""


def test_any_legal_completion_of_an_ambiguous_user_puzzle_counts_as_solved():
    # blank two rows of SOLUTION: several completions exist
    puzzle = SOLUTION[:2] + ((0,) * 4,) * 2
    first, second = (solver.unflatten(g, 4) for g in itertools.islice(solver.solutions(solver.flatten(puzzle), 4), 2))
    assert first != second
    s0 = state(puzzle)
    assert s0.solution == first
    s1 = sd.SudokuEnv().apply(s0, "planner", {"grid": [list(r) for r in second], "ok": True})
    assert s1.solved() and s1.progress() == 1.0 and s1.last_valid
    assert s1.last_reward == pytest.approx(2.49)
