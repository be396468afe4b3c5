"""Sokoban: rules, solver, generator solvability, shaped rewards, immutability, data source."""

from __future__ import annotations

import copy

import pytest

from masdsl.envs import games_common as gc
from masdsl.envs import sokoban as sk
from masdsl.envs.registry import REGISTRY
from masdsl.errors import DataError, UserError

# player, a box two cells from its goal, on a corridor
CORRIDOR = "#######\n#@$__.#\n#######"
# two boxes, two goals: box A at (1,2) -> goal (1,3); box B at (2,2) -> goal (2,3)
TWO = "######\n#@$.##\n#_$._#\n#____#\n######"


def state(text):
    return sk.SokobanEnv().reset({"id": "t", "level": text})


def act(s, moves, ok=True):
    return sk.SokobanEnv().apply(s, "planner", {"moves": moves, "ok": ok})


def test_plain_moves_cost_a_step_each():
    s = act(state("#####\n#@__#\n#_$.#\n#####"), ["R", "L", "R"])
    assert s.last_valid and s.moves == 3
    assert s.last_reward == pytest.approx(3 * -0.01)
    assert s.level.player == (1, 2)


def test_box_on_goal_then_win():
    s = act(state(CORRIDOR), ["R", "R"])  # box to (1,4), not yet on the goal (1,5)
    assert s.last_reward == pytest.approx(-0.02) and not s.solved() and s.progress() == 0.0
    s = act(s, ["R", "U", "D"])  # the push onto the goal wins; "U" and "D" are never played
    assert s.last_reward == pytest.approx(-0.01 + 1 + 10)
    assert s.solved() and s.progress() == 1.0 and s.moves == 3 and s.last_valid
    assert sk.SokobanEnv().success(s)


def test_two_boxes_each_goal_pays_and_pushing_off_costs():
    s0 = state(TWO)
    s1 = act(s0, ["R"])  # box A onto goal (1,3): +1
    assert s1.last_reward == pytest.approx(-0.01 + 1) and s1.progress() == 0.5
    # walk round to push box B right onto (2,3): L, D, ... player (1,2) -> (1,1) -> (2,1), push R
    s2 = act(s1, ["L", "D", "R"])
    assert s2.solved() and s2.last_reward == pytest.approx(3 * -0.01 + 1 + 10)
    # pushing a box off its goal costs 1: box B on goal (2,3) pushed to (2,4)
    s_off = act(state("#######\n#@____#\n#_*_$.#\n#######"), ["D", "R"])
    assert s_off.level.boxes == frozenset({(2, 3), (2, 4)}) and s_off.last_valid
    assert s_off.last_reward == pytest.approx(2 * -0.01 - 1)


def test_blocked_move_keeps_the_prefix_and_is_penalised():
    s = act(state(CORRIDOR), ["R", "U", "R"])  # "U" walks into a wall
    assert not s.last_valid and s.moves == 1
    assert s.last_reward == pytest.approx(-0.01 - 0.5)
    assert s.level.player == (1, 2) and s.level.boxes == frozenset({(1, 3)})
    assert "move 2 (U) is blocked" in s.feedback
    # pushing a box into another box is blocked too
    s = act(state("#######\n#@$$..#\n#######"), ["R"])
    assert not s.last_valid and s.moves == 0 and s.last_reward == pytest.approx(-0.5)


@pytest.mark.parametrize("moves", [[], ["R", "jump"], "RR", [1, 2], None])
def test_malformed_moves_play_nothing(moves):
    s0 = state(CORRIDOR)
    s = act(s0, moves, ok=bool(moves))
    assert not s.last_valid and s.last_reward == gc.INVALID_PENALTY
    assert s.level == s0.level and s.moves == 0


def test_words_and_lowercase_moves_are_accepted():
    s = act(state(CORRIDOR), ["right", "r"])
    assert s.last_valid and s.level.boxes == frozenset({(1, 4)})


def test_grid_field_is_invalid_for_sokoban():
    s = sk.SokobanEnv().apply(state(CORRIDOR), "planner", {"grid": [[1]], "ok": True})
    assert not s.last_valid and s.last_reward == -0.5


def test_apply_never_mutates_its_input():
    s0 = state(TWO)
    before = copy.deepcopy(s0)
    moves = ["R", "L", "D", "R"]
    s1 = act(s0, moves)
    assert s0 == before and s1 != s0
    moves.append("U")
    assert s1.moves == 4
    assert s1.level.walls is s0.level.walls  # unchanged parts are shared, not copied


def test_solver_finds_shortest_plans_and_rejects_dead_levels():
    assert sk.solve(sk.parse_level(CORRIDOR)) == ["R", "R", "R"]
    assert len(sk.solve(sk.parse_level(TWO))) == 4
    assert sk.solve(sk.parse_level("#####\n#@_$#\n#_._#\n#####")) is None  # box in a corner


@pytest.mark.parametrize("boxes,n", [(1, 200), (2, 200), (3, 200)])
def test_every_generated_level_is_solvable(boxes, n):
    env = sk.SokobanEnv()
    rows = sk.sokoban("train", n=n, boxes=boxes) + sk.sokoban("eval", n=n, boxes=boxes)
    assert len({r["id"] for r in rows}) == 2 * n
    for row in rows:
        level = sk.parse_level(row["level"])
        assert (level.height, level.width) == (6, 6) and len(level.boxes) == boxes
        assert not level.boxes & level.goals
        plan = sk.solve(level)
        assert plan is not None and len(plan) >= sk.MIN_SOLUTION_MOVES
        # playing the solver's plan through the env solves it, with the telescoped reward
        s = env.apply(env.reset(row), "planner", {"moves": plan, "ok": True})
        assert s.solved() and s.last_valid
        assert s.last_reward == pytest.approx(boxes + 10 - 0.01 * len(plan))


def test_data_source_is_deterministic_and_checked():
    assert sk.sokoban("eval", n=10) == sk.sokoban("eval", n=10)
    assert sk.sokoban("eval", n=12)[:10] == sk.sokoban("eval", n=10)
    assert sk.render(sk.generate(sk.sokoban("train", n=3)[2]["seed"])) == sk.sokoban("train", n=3)[2]["level"]
    for args in [("dev",), ("train", 4, 0), ("train", 4, 4), ("train", -2)]:
        with pytest.raises(UserError):
            sk.sokoban(*args)


@pytest.mark.parametrize("level,why", [
    (None, "bad level"),
    ("#####\n#@$x#\n#####", "unknown character"),
    ("#####\n#_$.#\n#####", "one player"),
    ("#####\n#@$_#\n#####", "as many goals as boxes"),
])
def test_reset_rejects_bad_levels(level, why):
    with pytest.raises(DataError, match=why):
        sk.SokobanEnv().reset({"id": "row7", "level": level})
    with pytest.raises(DataError, match="row7"):
        sk.SokobanEnv().reset({"id": "row7", "level": level})


def test_view_and_env_functions():
    env = sk.SokobanEnv()
    s = env.apply(state(CORRIDOR), "planner", {"moves": ["R"], "ok": True})
    v = env.view(s)
    assert v["board"] == "#######\n#_@$_.#\n#######" and v["moves"] == 1
    assert REGISTRY.functions["step_reward"].fn(s) == pytest.approx(-0.01)
    assert REGISTRY.functions["valid"].fn(s) is True
    assert REGISTRY.functions["solved"].fn(s) is False
    assert REGISTRY.functions["progress"].fn(s) == 0.0
    assert REGISTRY.functions["step_reward"].allowed_in("sokoban")


def test_tool_program_gets_the_board_on_stdin_and_its_plan_is_scored():
    env = sk.SokobanEnv()
    s0 = state(CORRIDOR)
    echo = env.apply(s0, "tool", {"code": "import sys\nprint(sys.stdin.read())", "ok": True})
    assert echo.tool_output.strip() == CORRIDOR
    assert not echo.last_valid and echo.last_reward == -0.5  # a board is not a list of moves
    plan = "import json, sys\nrow = sys.stdin.read().splitlines()[1]\nprint(json.dumps(['R'] * (row.index('.') - row.index('@') - 1)))"
    s1 = env.apply(s0, "tool", {"code": plan, "ok": True})
    assert s1.tool_output.strip() == '["R", "R", "R"]'
    assert s1.last_valid and s1.last_reward == pytest.approx(1 + 10 - 0.03)
    assert s1.level == s0.level and s1.moves == 0 and not s1.solved()  # the board did not move
    # the planner then plays the tool's advice
    s2 = act(s1, ["R", "R", "R"])
    assert s2.solved() and s2.tool_output == s1.tool_output


def test_failing_tool_program_is_penalised():
    s = sk.SokobanEnv().apply(state(CORRIDOR), "tool", {"code": "import os\nos._exit(3)", "ok": True})
    assert not s.last_valid and s.last_reward == -0.5 and "status 3" in s.tool_output
