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


def walk(d):
    """The reference's reward of a legal move that pushes nothing, boxes at total distance d."""
    return -0.01 + 0.1 * (0.99 * -d + d)


def push(d_before, d_after, on_goal=0, win=False):
    """... of a legal push taking the total box distance from d_before to d_after."""
    return -0.01 + 0.1 * (0.99 * -d_after + d_before) + on_goal + (10 if win else 0)


def blocked(d):
    """... of a blocked move (the player stays put), boxes at total distance d."""
    return -0.05 + 0.1 * (0.99 * -d + d)


def test_plain_moves_cost_a_step_each():
    s = act(state("#####\n#@__#\n#_$.#\n#####"), ["R", "L", "R"])
    assert s.last_valid and s.moves == 3 and s.steps == 3
    assert s.last_reward == pytest.approx(3 * walk(1)) == pytest.approx(3 * -0.009)
    assert s.level.player == (1, 2)
    assert REGISTRY.functions["step_penalty"].fn(s) == pytest.approx(-0.03)
    assert REGISTRY.functions["push_shaping"].fn(s) == pytest.approx(0.003)


def test_box_on_goal_then_win():
    s = act(state(CORRIDOR), ["R", "R"])  # box to (1,4), not yet on the goal (1,5)
    assert s.last_reward == pytest.approx(push(3, 2) + push(2, 1)) == pytest.approx(0.092 + 0.091)
    assert not s.solved() and s.progress() == 0.0
    s = act(s, ["R", "U", "D"])  # the push onto the goal wins; "U" and "D" are never played
    assert s.last_reward == pytest.approx(push(1, 0, on_goal=1, win=True)) == pytest.approx(11.09)
    assert s.solved() and s.progress() == 1.0 and s.moves == 3 and s.steps == 3 and s.last_valid
    assert sk.SokobanEnv().success(s)
    after = act(s, ["L"])  # the episode is over: nothing is played, reward 0
    assert after.last_reward == 0.0 and after.level == s.level and "already" in after.feedback


def test_two_boxes_each_goal_pays_and_pushing_off_costs():
    s0 = state(TWO)
    s1 = act(s0, ["R"])  # box A onto goal (1,3): +1
    assert s1.last_reward == pytest.approx(push(2, 1, on_goal=1)) and s1.progress() == 0.5
    # walk round to push box B right onto (2,3): L, D, ... player (1,2) -> (1,1) -> (2,1), push R
    s2 = act(s1, ["L", "D", "R"])
    assert s2.solved() and s2.last_reward == pytest.approx(2 * walk(1) + push(1, 0, on_goal=1, win=True))
    # pushing a box off its goal costs 1 (the reference: 0.5): box on goal (2,2) pushed to (2,3)
    s_off = act(state("#######\n#@____#\n#_*_$.#\n#######"), ["D", "R"])
    assert s_off.level.boxes == frozenset({(2, 3), (2, 4)}) and s_off.last_valid
    assert s_off.last_reward == pytest.approx(walk(1) + push(1, 2, on_goal=-1))
    assert REGISTRY.functions["box_on_goal"].fn(s_off) == sk.BOX_OFF_GOAL == -1.0


def test_blocked_move_is_penalised_and_the_rest_still_runs():
    s = act(state(CORRIDOR), ["R", "U", "R"])  # "U" walks into a wall; the last "R" still runs
    assert not s.last_valid and s.moves == 2 and s.steps == 3
    assert s.last_reward == pytest.approx(push(3, 2) + blocked(2) + push(2, 1))
    assert s.level.player == (1, 3) and s.level.boxes == frozenset({(1, 4)})
    assert "move 2 (U)" in s.feedback and "played 2 moves" in s.feedback
    assert REGISTRY.functions["invalid_penalty"].fn(s) == -0.05
    # pushing a box into another box is blocked too
    s = act(state("#######\n#@$$..#\n#######"), ["R"])
    assert not s.last_valid and s.moves == 0 and s.last_reward == pytest.approx(blocked(3))


def test_step_limit_ends_the_episode():
    env = sk.SokobanEnv(max_steps=5)
    s = env.apply(env.reset({"id": "t", "level": CORRIDOR}), "planner", {"moves": ["U"] * 7, "ok": True})
    assert s.steps == 5 and not s.solved() and "step limit" in s.feedback
    assert s.last_reward == pytest.approx(5 * blocked(3) - 5)
    assert REGISTRY.functions["step_limit_penalty"].fn(s) == -5.0
    s2 = env.apply(s, "planner", {"moves": ["R"], "ok": True})
    assert s2.last_reward == 0.0 and s2.level == s.level
    for bad in ({"max_steps": 0}, {"max_steps": 2.5}, {"gamma": 0}, {"gamma": 1.5}):
        with pytest.raises(UserError):
            sk.SokobanEnv(**bad)
    # gamma = 1 leaves only the potential difference: a walk costs exactly the step penalty
    flat = sk.SokobanEnv(gamma=1.0)
    s = flat.apply(flat.reset({"id": "t", "level": CORRIDOR}), "planner", {"moves": ["U"], "ok": True})
    assert s.last_reward == pytest.approx(-0.05)


@pytest.mark.parametrize("moves", [[], ["R", "jump"], "RR", [1, 2], None])
def test_malformed_moves_play_nothing(moves):
    s0 = state(CORRIDOR)
    s = act(s0, moves, ok=bool(moves))
    assert not s.last_valid and s.last_reward == gc.NO_ACTION_PENALTY == -2.0
    assert s.level == s0.level and s.moves == 0 and s.steps == 0


def test_words_and_lowercase_moves_are_accepted():
    s = act(state(CORRIDOR), ["right", "r"])
    assert s.last_valid and s.level.boxes == frozenset({(1, 4)})


def test_grid_field_is_invalid_for_sokoban():
    s = sk.SokobanEnv().apply(state(CORRIDOR), "planner", {"grid": [[1]], "ok": True})
    assert not s.last_valid and s.last_reward == -2.0


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
        # playing the solver's plan through the env solves it; the reward replayed by hand
        s = env.apply(env.reset(row), "planner", {"moves": plan, "ok": True})
        assert s.solved() and s.last_valid
        shaping, lv = 0.0, level
        for m in plan:
            nxt = sk.step(lv, m)
            shaping += 0.1 * (0.99 * sk.potential(nxt) - sk.potential(lv))
            lv = nxt
        assert s.last_reward == pytest.approx(boxes + 10 - 0.01 * len(plan) + shaping)


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
    assert v["board"] == "#######\n#_@$_.#\n#######" and v["moves"] == 1 and v["size"] == 7
    assert REGISTRY.functions["step_reward"].fn(s) == pytest.approx(push(3, 2))
    assert REGISTRY.functions["valid"].fn(s) is True
    assert REGISTRY.functions["solved"].fn(s) is False
    assert REGISTRY.functions["progress"].fn(s) == 0.0
    assert REGISTRY.functions["step_reward"].allowed_in("sokoban")


def test_tool_program_gets_the_board_on_stdin_and_its_plan_is_scored():
    env = sk.SokobanEnv()
    s0 = state(CORRIDOR)
    echo = env.apply(s0, "tool", {"code": "import sys\nprint(sys.stdin.read())", "ok": True})
    assert echo.tool_output.strip() == CORRIDOR
    assert not echo.last_valid and echo.last_reward == -2.0  # a board is not a list of moves
    plan = "import json, sys\nrow = sys.stdin.read().splitlines()[1]\nprint(json.dumps(['R'] * (row.index('.') - row.index('@') - 1)))"
    s1 = env.apply(s0, "tool", {"code": plan, "ok": True})
    assert s1.tool_output.strip() == '["R", "R", "R"]'
    assert s1.last_valid and s1.last_reward == pytest.approx(push(3, 2) + push(2, 1) + push(1, 0, 1, True))
    assert s1.level == s0.level and s1.moves == 0 and not s1.solved()  # the board did not move
    # the planner then plays the tool's advice
    s2 = act(s1, ["R", "R", "R"])
    assert s2.solved() and s2.tool_output == s1.tool_output


def test_failing_tool_program_is_penalised():
    s = sk.SokobanEnv().apply(state(CORRIDOR), "tool", {"code": "import os\nos._exit(3)", "ok": True})
    assert not s.last_valid and s.last_reward == -2.0 and "status 3" in s.tool_output
    assert REGISTRY.functions["tool_penalty"].fn(s) == -2.0
    none = sk.SokobanEnv().apply(state(CORRIDOR), "tool", {"code": "", "ok": False})  # no program: -2 in the move games, as a failed one
    assert none.last_reward == -2.0 and none.tool_output == ""
