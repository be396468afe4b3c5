"""The game rewards replay the reference (PettingLLMs) on the same moves.

Two kinds of checks:

1. every case of /work/shared/PAPER.md's table "The reference's rewards on the same moves"
   (sudoku, sokoban, plan_path, the game tool role), to the printed precision;
2. a transcription of the reference's step code (`pettingllms/multi_agent_env/stateful/
   env_state.py` at HEAD a054fb1: `SudukuEnvState.step` for a full grid,
   `PlanPathGridEnvState.step_single`, `SokobanGridEnvState.step_single`, with their default
   coefficients) run side by side with masdsl on random move lists and grids, where masdsl
   does not differ on purpose (docs/concepts.md "Rewards of the game workflows").
"""

from __future__ import annotations

import random

import pytest

from masdsl.envs import games_common as gc
from masdsl.envs import plan_path as pp
from masdsl.envs import sokoban as sk
from masdsl.envs import sudoku as sd
from masdsl.envs.registry import REGISTRY, load_builtins
from tests.support.overrides import NO_TRACKING
from tests.support.reference_rewards import RefPlanPath, RefSokoban, RefSudoku

load_builtins()


def reward(state) -> float:
    return REGISTRY.functions["step_reward"].fn(state)


def term(state, name: str) -> float:
    return REGISTRY.functions[name].fn(state)


def terms_sum(state) -> float:
    return sum(v for _, v in state.last_terms)


# ---- PAPER.md's table, case by case ---------------------------------------------------------

SUDOKU_ROW = sd.sudoku("train", n=1)[0]  # the first 4x4 training puzzle (10 empty cells)


def sudoku_env():
    env = sd.SudokuEnv()
    return env, env.reset(SUDOKU_ROW)


def test_sudoku_exact_solution_scores_2_49():
    env, s0 = sudoku_env()
    s1 = env.apply(s0, "planner", {"grid": [list(r) for r in s0.solution], "ok": True})
    assert s1.solved() and s1.last_valid
    assert reward(s1) == pytest.approx(2.49, abs=1e-9)  # -0.01 + 2 + 0.5
    assert (term(s1, "step_penalty"), term(s1, "win_bonus"), term(s1, "optimal_bonus")) == (-0.01, 2.0, 0.5)
    assert RefSudoku(s0.puzzle).step([list(r) for r in s0.solution]) == pytest.approx(reward(s1))


def test_sudoku_full_grid_with_two_empty_cells_swapped_scores_0_242():
    env, s0 = sudoku_env()
    (a, b) = [(r, c) for r in range(4) for c in range(4) if not s0.puzzle[r][c]][:2]
    grid = [list(r) for r in s0.solution]
    grid[a[0]][a[1]], grid[b[0]][b[1]] = grid[b[0]][b[1]], grid[a[0]][a[1]]
    assert grid != [list(r) for r in s0.solution]
    s1 = env.apply(s0, "planner", {"grid": grid, "ok": True})
    # -0.01 + 0.5 * 10/16 (filled 6/16 -> 16/16) + 0.02 * (30 - 8) constraints - 0.5 conflict
    assert sd.constraints_satisfied(s0.puzzle) == 8 and sd.constraints_satisfied(s1.grid) == 30
    assert reward(s1) == pytest.approx(0.242, abs=1e-3) and reward(s1) == pytest.approx(0.2425)
    assert term(s1, "fill_shaping") == pytest.approx(0.3125)
    assert term(s1, "constraint_shaping") == pytest.approx(0.44)
    assert term(s1, "conflict_penalty") == -0.5 and term(s1, "win_bonus") == 0.0
    assert not s1.solved() and not s1.last_valid and "twice in column" in s1.feedback
    assert RefSudoku(s0.puzzle).step(grid) == pytest.approx(reward(s1))


# a 7x6 room: box (2,2) two cells above its goal (4,2); the player at (4,5)
ROOM = "#######\n#_____#\n#_$___#\n#_____#\n#_.__@#\n#######"


def sokoban_state(text=ROOM, **kw):
    env = sk.SokobanEnv(**kw)
    return env, env.reset({"id": "room", "level": text})


def test_sokoban_plain_move_scores_minus_0_008():
    env, s0 = sokoban_state()
    assert sk.potential(s0.level) == -2
    s1 = env.apply(s0, "planner", {"moves": ["U"], "ok": True})
    assert reward(s1) == pytest.approx(-0.008, abs=1e-9)  # -0.01 + 0.1 * (0.99 * -2 + 2)
    assert term(s1, "push_shaping") == pytest.approx(0.002)


def test_sokoban_push_toward_a_goal_scores_0_091():
    env, s0 = sokoban_state("#######\n#__@__#\n#__$__#\n#_____#\n#__.__#\n#######")
    s1 = env.apply(s0, "planner", {"moves": ["D"], "ok": True})
    assert s1.level.boxes == frozenset({(3, 3)})
    assert reward(s1) == pytest.approx(0.091, abs=1e-9)  # -0.01 + 0.1 * (0.99 * -1 + 2)
    assert term(s1, "push_shaping") == pytest.approx(0.101)


def test_sokoban_move_into_a_wall_scores_minus_0_048_and_the_rest_still_runs():
    env, s0 = sokoban_state()
    s1 = env.apply(s0, "planner", {"moves": ["R"], "ok": True})  # (4,6) is the wall
    assert reward(s1) == pytest.approx(-0.048, abs=1e-9)  # -0.05 + 0.1 * (0.99 * -2 + 2)
    assert term(s1, "invalid_penalty") == -0.05 and not s1.last_valid
    s2 = env.apply(s0, "planner", {"moves": ["R", "U", "R", "U"], "ok": True})
    assert s2.level.player == (2, 5) and s2.moves == 2 and s2.steps == 4  # both U ran
    assert reward(s2) == pytest.approx(2 * -0.048 + 2 * -0.008)
    assert "move 1 (R), move 3 (R)" in s2.feedback


def test_sokoban_8_move_solve_scores_11_13():
    env, s0 = sokoban_state()
    plan = sk.solve(s0.level)
    assert plan == ["U", "U", "U", "L", "L", "L", "D", "D"]
    s1 = env.apply(s0, "planner", {"moves": plan, "ok": True})
    assert s1.solved()
    # 8 steps, 6 walks at distance 2 (+0.002 each), pushes +0.101 and +0.1, box on goal, win
    assert reward(s1) == pytest.approx(11.13, abs=5e-3) and reward(s1) == pytest.approx(11.133)
    assert term(s1, "box_on_goal") == 1.0 and term(s1, "win_bonus") == 10.0
    ref = RefSokoban(s0.level)
    assert ref.step(plan) == pytest.approx(reward(s1))


def test_sokoban_step_limit_reached_scores_minus_5():
    env, s0 = sokoban_state()
    assert s0.max_steps == 200  # the reference's default
    s = s0
    for _ in range(4):  # 4 x 50 moves walking up and down: the 200th hits the limit
        s = env.apply(s, "planner", {"moves": ["U", "D"] * 25, "ok": True})
    assert s.steps == 200 and not s.solved()
    assert term(s, "step_limit_penalty") == -5.0
    ref = RefSokoban(s0.level)
    rewards = [ref.step(["U", "D"] * 25) for _ in range(4)]
    assert rewards[-1] == pytest.approx(reward(s))
    after = env.apply(s, "planner", {"moves": ["U"], "ok": True})  # the episode is over
    assert reward(after) == 0.0 and "step limit" in after.feedback and after.steps == 200


# an open 5x5 grid; start (0,0), goal (2,3): Manhattan and shortest distance 5
OPEN = {"id": "open", "grid": "\n".join(["....."] * 5), "start": [0, 0], "goal": [2, 3]}


def plan_state(task=OPEN, **kw):
    env = pp.PlanPathEnv(**kw)
    return env, env.reset(task)


def test_plan_path_first_move_of_a_shortest_path_scores_1_03():
    env, s0 = plan_state()
    s1 = env.apply(s0, "planner", {"moves": ["R"], "ok": True})
    assert reward(s1) == pytest.approx(1.03, abs=1e-9)  # -0.01 + (0.99 * -4 + 5)
    assert term(s1, "distance_shaping") == pytest.approx(1.04)


def test_plan_path_whole_shortest_path_scores_6_55():
    env, s0 = plan_state()
    path = ["R", "R", "R", "D", "D"]
    s1 = env.apply(s0, "planner", {"moves": path, "ok": True})
    assert s1.solved()
    assert reward(s1) == pytest.approx(6.55, abs=1e-9)  # 5.05 shaping and steps, +1 goal, +0.5
    assert term(s1, "optimal_bonus") == 0.5 and term(s1, "win_bonus") == 1.0
    ref = RefPlanPath(OPEN["grid"].splitlines(), OPEN["start"], OPEN["goal"])
    assert ref.step(path) == pytest.approx(reward(s1))
    # a longer path to the goal loses the optimal bonus
    s2 = env.apply(s0, "planner", {"moves": ["D", "U"] + path, "ok": True})
    assert s2.solved() and term(s2, "optimal_bonus") == 0.0


def test_plan_path_invalid_move_scores_minus_0_05_and_the_rest_still_runs():
    env, s0 = plan_state()
    s1 = env.apply(s0, "planner", {"moves": ["U"], "ok": True})  # off the grid at distance 5
    assert reward(s1) == pytest.approx(-0.05, abs=1e-9)  # -0.1 + (0.99 * -5 + 5)
    assert term(s1, "invalid_penalty") == -0.1 and not s1.last_valid
    s2 = env.apply(s0, "planner", {"moves": ["U", "R"], "ok": True})
    assert s2.position == (0, 1) and s2.steps == 2
    assert reward(s2) == pytest.approx(-0.05 + 1.03)


def test_plan_path_step_limit_reached_scores_minus_1():
    env, s0 = plan_state(max_steps=6)
    s1 = env.apply(s0, "planner", {"moves": ["L"] * 6, "ok": True})
    assert s1.steps == 6 and term(s1, "step_limit_penalty") == -1.0
    ref = RefPlanPath(OPEN["grid"].splitlines(), OPEN["start"], OPEN["goal"], max_steps=6)
    assert ref.step(["L"] * 6) == pytest.approx(reward(s1))
    assert pp.PlanPathEnv().reset(OPEN).max_steps == pp.MAX_STEPS == 100


@pytest.mark.parametrize("game,no_code", [("sudoku", -1.0), ("sokoban", -2.0), ("plan_path", -2.0)])
def test_game_tool_program_fails_minus_2_no_code_as_the_reference_ends(game, no_code):
    """A failed program is -2 everywhere; no program is -1 in sudoku and -2 in the move games,
    where the reference's missing tool action ends at the planner's no-action -2: writing no
    program never beats trying one."""
    env, s0 = {"sudoku": sudoku_env, "sokoban": sokoban_state, "plan_path": plan_state}[game]()
    failed = env.apply(s0, "tool", {"code": "raise SystemExit(3)", "ok": True})
    assert reward(failed) == -2.0 and term(failed, "tool_penalty") == -2.0 and not failed.last_valid
    none = env.apply(s0, "tool", {"code": "", "ok": False})
    assert reward(none) == no_code and term(none, "tool_penalty") == no_code
    assert reward(none) >= reward(failed)
    garbage = env.apply(s0, "tool", {"code": "print('no plan here')", "ok": True})
    assert reward(garbage) == -2.0  # a program that runs but prints no plan: the planner's no action


# ---- side by side with the transcribed reference --------------------------------------------

@pytest.mark.parametrize("seed", range(40))
def test_plan_path_matches_the_reference_on_random_moves(seed):
    rng = random.Random(seed)
    size = rng.choice([5, 10])
    row = pp.plan_path(rng.choice(["train", "eval"]), n=seed % 7 + 1, size=size)[-1]
    rows = row["grid"].splitlines()
    env = pp.PlanPathEnv(max_steps=60)
    s = env.reset(row)
    ref = RefPlanPath(rows, row["start"], row["goal"], max_steps=60)
    plan = pp.shortest_path(s.maze, s.start)
    for turn in range(4):
        if rng.random() < 0.3:
            moves = list(plan)  # sometimes the shortest path (from the start)
        else:
            moves = [rng.choice("UDLR") for _ in range(rng.randint(1, 25))]
        s = env.apply(s, "planner", {"moves": moves, "ok": True})
        assert reward(s) == pytest.approx(ref.step(moves), abs=1e-9), (seed, turn, moves)
        assert terms_sum(s) == pytest.approx(reward(s))
        assert s.solved() == (ref.pos == ref.goal) and s.position == ref.pos


@pytest.mark.parametrize("seed", range(40))
def test_sokoban_matches_the_reference_on_random_moves(seed):
    # one box: the reference's only difference (a push off a goal, -0.5 there, -1 here) can
    # not happen, since the push onto the goal wins
    rng = random.Random(seed)
    row = sk.sokoban(rng.choice(["train", "eval"]), n=seed % 5 + 1, boxes=1)[-1]
    env = sk.SokobanEnv(max_steps=50)
    s = env.reset(row)
    ref = RefSokoban(s.level, max_steps=50)
    plan = sk.solve(s.level)
    for turn in range(4):
        if turn == 0 and rng.random() < 0.3:
            moves = list(plan)
        else:
            moves = [rng.choice("UDLR") for _ in range(rng.randint(1, 25))]
        s = env.apply(s, "planner", {"moves": moves, "ok": True})
        assert reward(s) == pytest.approx(ref.step(moves), abs=1e-9), (seed, turn, moves)
        assert terms_sum(s) == pytest.approx(reward(s))
        assert s.level.player == ref.player and s.level.boxes == frozenset(ref.boxes)


@pytest.mark.parametrize("seed", range(40))
def test_sudoku_matches_the_reference_on_random_full_grids(seed):
    # full grids that keep the givens (the reference ignores givens; masdsl rejects changing them)
    rng = random.Random(seed)
    size = 9 if seed % 8 == 7 else 4
    row = sd.sudoku(rng.choice(["train", "eval"]), n=seed % 5 + 1, size=size)[-1]
    env = sd.SudokuEnv()
    s = env.reset(row)
    ref = RefSudoku(s.puzzle)
    empty = [(r, c) for r in range(size) for c in range(size) if not s.puzzle[r][c]]
    for turn in range(3):
        grid = [list(r) for r in s.solution]
        for r, c in rng.sample(empty, rng.randint(0, min(4, len(empty)))):
            grid[r][c] = rng.randint(1, size)
        s = env.apply(s, "planner", {"grid": grid, "ok": True})
        assert reward(s) == pytest.approx(ref.step(grid), abs=1e-9), (seed, turn, grid)
        assert terms_sum(s) == pytest.approx(reward(s))
        assert s.solved() == ref.done


def test_sudoku_keeps_the_reference_bug_fixed_givens_count():
    # a legal full grid that overwrites a given: the reference calls it solved (+2.49);
    # masdsl rejects it as malformed and the board keeps the givens
    puzzle = ((1, 2, 3, 4), (3, 4, 1, 2), (2, 1, 4, 3), (4, 3, 0, 0))
    other = [[2, 1, 4, 3], [4, 3, 2, 1], [1, 2, 3, 4], [3, 4, 1, 2]]  # valid, different givens
    assert RefSudoku(puzzle).step(other) == pytest.approx(2.49)
    env = sd.SudokuEnv()
    s = env.apply(env.reset({"id": "g", "puzzle": [list(r) for r in puzzle]}), "planner", {"grid": other, "ok": True})
    assert not s.solved() and reward(s) == -1.0 and term(s, "invalid_penalty") == -1.0
    assert s.grid == puzzle and "overwrites the given" in s.feedback


def test_every_term_is_a_registered_env_bound_function_of_its_games():
    reg = load_builtins()
    expect = {
        "step_penalty": gc.GAMES, "invalid_penalty": gc.GAMES, "no_action_penalty": gc.GAMES,
        "tool_penalty": gc.GAMES, "win_bonus": gc.GAMES, "optimal_bonus": ("sudoku", "plan_path"),
        "step_limit_penalty": ("sokoban", "plan_path"), "push_shaping": ("sokoban",),
        "box_on_goal": ("sokoban",), "distance_shaping": ("plan_path",),
        "fill_shaping": ("sudoku",), "constraint_shaping": ("sudoku",), "conflict_penalty": ("sudoku",),
    }
    for name, games in expect.items():
        spec = reg.functions[name]
        assert spec.envs == games and spec.returns == "number", name
        assert (spec.min_args, spec.max_args) == (0, 0), name
        assert not spec.allowed_in("code") and spec.doc, name


def test_shipped_workflows_add_up_every_term_of_their_game():
    import masdsl

    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "workflows"
    want = {
        "sudoku": {"step_penalty", "invalid_penalty", "fill_shaping", "constraint_shaping",
                   "conflict_penalty", "win_bonus", "optimal_bonus", "no_action_penalty"},
        "sokoban": {"step_penalty", "invalid_penalty", "push_shaping", "box_on_goal", "win_bonus",
                    "step_limit_penalty", "no_action_penalty"},
        "plan_path": {"step_penalty", "invalid_penalty", "distance_shaping", "win_bonus",
                      "optimal_bonus", "step_limit_penalty", "no_action_penalty"},
    }
    for game, names in want.items():
        for suffix in ("", "_single"):
            text = (root / f"{game}{suffix}.mas").read_text()
            masdsl.load(str(root / f"{game}{suffix}.mas"))  # it checks
            for role_text in text.split("role ")[1:]:
                reward_text = role_text.split("reward", 1)[1].split("}", 1)[0]
                called = {n for n in names | {"tool_penalty"} if f"{n}()" in reward_text}
                tool = role_text.startswith("tool")
                assert called == (names | {"tool_penalty"} if tool else names), (game, suffix)


def test_the_shipped_plan_path_workflow_pays_the_table_through_its_reward_expressions(tmp_path):
    """End to end: `workflows/plan_path.mas` on the 5x5 case, replayed completions."""
    import json

    from pathlib import Path

    import masdsl
    from masdsl.config import resolve_config
    from masdsl.runtime.backends.replay import ReplayEngine
    from masdsl.runtime.executor import rollout
    from tests.support.rollout_plans import plan_of
    from masdsl.runtime.inputs import make_env

    # the shipped file uses gamma 1.0; the reference's table is paid with its discount 0.99
    text = (Path(__file__).resolve().parents[2] / "workflows" / "plan_path.mas").read_text()
    assert "env plan_path(gamma=1.0)" in text
    wf = masdsl.loads(text.replace("env plan_path(gamma=1.0)", "env plan_path(gamma=0.99)"), name="plan_path_ref")
    cfg = resolve_config(wf.train, overrides=[NO_TRACKING])
    task = {**OPEN, "seed": 0}
    rows = {("tool", 0): ["```python\nraise SystemExit(1)\n```", "```python\nprint('[\"R\",\"R\",\"R\",\"D\",\"D\"]')\n```"],
            ("planner", 0): ['["R", "R", "R", "D", "D"]', "no idea"]}
    path = tmp_path / "replay.jsonl"
    path.write_text("".join(json.dumps({"task_id": "open", "role": r, "turn": t, "outputs": o}) + "\n"
                            for (r, t), o in rows.items()))
    ro = rollout(plan_of(wf, cfg, samples=2), make_env(wf, cfg.sandbox), [task], {"shared": ReplayEngine(path)},
                 mode="train", step=0)
    got = [(r.role, r.candidate, r.selected, round(r.reward, 6)) for r in ro.records]
    assert got == [("tool", 0, False, -2.0), ("tool", 1, True, 6.55),
                   ("planner", 0, True, 6.55), ("planner", 1, False, -2.0)]
    assert "the 5x5 grid" in ro.records[0].prompt_text and "10x10" not in ro.records[0].prompt_text
    assert ro.episodes[0].success == 1.0
