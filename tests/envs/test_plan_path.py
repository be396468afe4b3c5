"""plan_path: distances, generator connectivity, shaped rewards by hand, immutability, data source."""

from __future__ import annotations

import copy
import json

import pytest

from masdsl.envs import games_common as gc
from masdsl.envs import plan_path as pp
from masdsl.envs.registry import REGISTRY
from masdsl.errors import DataError, UserError

# goal (0,2); breadth-first distances to it: (0,0)=4, (1,0)=3, (1,1)=2, (1,2)=1, (0,2)=0;
# Manhattan distances (the reference's potential): (0,0)=2, (1,0)=3, (1,1)=2, (1,2)=1
HOOK = {"id": "hook", "grid": ".#.\n...", "start": [0, 0], "goal": [0, 2]}


def state(task=HOOK, **kw):
    return pp.PlanPathEnv(**kw).reset(task)


def act(s, moves, ok=True):
    return pp.PlanPathEnv().apply(s, "planner", {"moves": moves, "ok": ok})


def shaped(m_before, m_after, goal=False, optimal=False):
    """The reference's reward for one legal move between Manhattan distances, by hand."""
    return -0.01 + 0.99 * -m_after + m_before + (1.0 if goal else 0.0) + (0.5 if optimal else 0.0)


def blocked(m):
    """... for a blocked move at Manhattan distance m (the agent stays put)."""
    return -0.1 + 0.99 * -m + m


def test_hand_computed_rewards_on_the_hook():
    s = state()
    assert s.progress() == 0.0
    s1 = act(s, ["D"])  # Manhattan 2 -> 3: -0.01 + 0.99 * -3 + 2 = -0.98
    assert s1.last_reward == pytest.approx(-0.98) == pytest.approx(shaped(2, 3))
    assert s1.progress() == pytest.approx(0.25) and s1.last_valid  # breadth-first 4 -> 3
    s2 = act(s1, ["R", "R", "U"])  # 3 -> 2 -> 1 -> 0 (goal), 4 moves in all: a shortest path
    want = shaped(3, 2) + shaped(2, 1) + shaped(1, 0, goal=True, optimal=True)
    assert s2.last_reward == pytest.approx(want) == pytest.approx(1.01 + 1.0 + 0.99 + 1 + 0.5)
    assert s2.solved() and s2.progress() == 1.0 and s2.moves == 4 and s2.steps == 4
    assert pp.PlanPathEnv().view(s2)["position"] == [0, 2]
    assert REGISTRY.functions["optimal_bonus"].fn(s2) == 0.5
    assert REGISTRY.functions["win_bonus"].fn(s2) == 1.0


def test_moving_away_is_negative_and_moves_after_the_goal_are_ignored():
    s1 = act(state(), ["D", "R"])
    back = act(s1, ["L"])  # Manhattan 2 -> 3
    assert back.last_reward == pytest.approx(shaped(2, 3)) and back.last_reward < 0
    done = act(state(), ["D", "R", "R", "U", "D", "D"])
    assert done.solved() and done.moves == 4 and done.last_valid
    assert act(done, ["D"]).last_reward == 0.0  # the episode is over


@pytest.mark.parametrize("moves,executed,where,want", [
    (["U"], 0, (0, 0), blocked(2)),                                       # off the grid
    (["R"], 0, (0, 0), blocked(2)),                                       # into the blocked cell
    (["D", "R", "U"], 2, (1, 1), shaped(2, 3) + shaped(3, 2) + blocked(2)),  # third move blocked
    (["U", "D", "R"], 2, (1, 1), blocked(2) + shaped(2, 3) + shaped(3, 2)),  # the rest still runs
])
def test_blocked_moves_are_penalised_and_the_rest_still_runs(moves, executed, where, want):
    s = act(state(), moves)
    assert not s.last_valid and s.moves == executed and s.position == where
    assert s.steps == len(moves) and s.last_reward == pytest.approx(want)
    assert REGISTRY.functions["invalid_penalty"].fn(s) == pytest.approx(-0.1)


def test_a_detour_reaches_the_goal_without_the_optimal_bonus_and_the_limit_ends_it():
    s = act(state(), ["U", "D", "R", "R", "U"])  # one blocked move: 5 steps for a 4-step path
    assert s.solved() and REGISTRY.functions["optimal_bonus"].fn(s) == 0.0
    limited = act(state(max_steps=3), ["D", "L", "L", "L"])
    assert limited.steps == 3 and not limited.solved() and "step limit" in limited.feedback
    assert limited.last_reward == pytest.approx(shaped(2, 3) + blocked(3) + blocked(3) - 1)
    assert REGISTRY.functions["step_limit_penalty"].fn(limited) == -1.0
    assert act(limited, ["R"]).last_reward == 0.0
    for bad in ({"max_steps": 0}, {"max_steps": True}, {"gamma": -1}, {"gamma": "1"}):
        with pytest.raises(UserError):
            pp.PlanPathEnv(**bad)
    flat = act(state(gamma=1.0), ["U"])  # gamma = 1: a blocked move is exactly its penalty
    assert flat.last_reward == pytest.approx(-0.1)


@pytest.mark.parametrize("moves", [[], ["D", "north"], "DR", [["D"]], None])
def test_malformed_moves_play_nothing(moves):
    s0 = state()
    s = act(s0, moves, ok=bool(moves))
    assert not s.last_valid and s.last_reward == gc.NO_ACTION_PENALTY == -2.0
    assert s.position == s0.position and s.moves == 0 and s.steps == 0


def test_apply_never_mutates_its_input():
    s0 = state()
    before = copy.deepcopy(s0)
    s1 = act(s0, ["D", "R"])
    assert s0 == before and s1.position == (1, 1)
    assert s1.maze is s0.maze  # the grid and distances are shared, not copied


def test_every_generated_grid_is_connected_and_sized():
    env = pp.PlanPathEnv()
    rows = pp.plan_path("train", n=200) + pp.plan_path("eval", n=200)
    assert len({r["id"] for r in rows}) == 400
    for row in rows:
        grid = row["grid"].splitlines()
        assert len(grid) == 10 and all(len(r) == 10 for r in grid)
        assert sum(r.count("#") for r in grid) == 22
        s = env.reset(row)
        plan = pp.shortest_path(s.maze, s.start)
        assert plan is not None and len(plan) >= pp.MIN_DISTANCE
        # the plan, played through the env, reaches the goal with the optimal bonus
        end = env.apply(s, "planner", {"moves": plan, "ok": True})
        assert end.solved() and end.last_valid and end.moves == len(plan)
        assert end.last_reward == pytest.approx(replayed(s.maze, s.start, plan))


def replayed(maze, start, plan):
    """The reference's reward of a shortest `plan` from `start`, move by move."""
    total, cell = 0.0, start
    for k, m in enumerate(plan):
        nxt = (cell[0] + pp.DIRS[m][0], cell[1] + pp.DIRS[m][1])
        total += -0.01 + 0.99 * pp.potential(maze, nxt) - pp.potential(maze, cell)
        cell = nxt
    return total + 1.0 + 0.5


@pytest.mark.parametrize("size", [3, 5, 7])
def test_small_grids(size):
    rows = pp.plan_path("train", n=30, size=size) + pp.plan_path("eval", n=30, size=size)
    assert len({r["id"] for r in rows}) == 60 and all(r["id"].startswith(f"plan_path{size}-") for r in rows)
    env = pp.PlanPathEnv()
    for row in rows:
        grid = row["grid"].splitlines()
        assert len(grid) == size and all(len(r) == size for r in grid)
        assert sum(r.count("#") for r in grid) == pp.blocked_cells(size)
        s = env.reset(row)
        plan = pp.shortest_path(s.maze, s.start)
        assert len(plan) >= pp.min_distance(size)
        assert env.view(s)["size"] == size
        assert env.apply(s, "planner", {"moves": plan, "ok": True}).solved()
    assert pp.plan_path("eval", n=3, size=10) == pp.plan_path("eval", n=3)
    for bad in (2, 31, 5.0, True):
        with pytest.raises(UserError):
            pp.plan_path("train", n=1, size=bad)


def test_distances_match_a_hand_maze():
    assert pp.distances(3, 3, frozenset({(1, 1)}), (0, 0)) == ((0, 1, 2), (1, -1, 3), (2, 3, 4))


@pytest.mark.parametrize("task,why", [
    ({"id": "r1", "start": [0, 0], "goal": [0, 2]}, "no field `grid`"),
    ({**HOOK, "id": "r1", "grid": ".#.\n.."}, "equal-length rows"),
    ({**HOOK, "id": "r1", "grid": ".x.\n..."}, "equal-length rows"),
    ({**HOOK, "id": "r1", "start": [0, 1]}, "blocked"),
    ({**HOOK, "id": "r1", "goal": [5, 5]}, "off the grid"),
    ({**HOOK, "id": "r1", "start": "0,0"}, "must be \\[row, column\\]"),
    ({"id": "r1", "grid": ".#.\n.#.", "start": [0, 0], "goal": [0, 2]}, "cannot be reached"),
])
def test_reset_rejects_bad_tasks(task, why):
    with pytest.raises(DataError, match=why) as info:
        pp.PlanPathEnv().reset(task)
    assert "r1" in str(info.value)


def test_data_source_is_deterministic_and_checked():
    assert pp.plan_path("train", n=15) == pp.plan_path("train", n=15)
    assert pp.plan_path("train", n=20)[:15] == pp.plan_path("train", n=15)
    row = pp.plan_path("eval", n=1)[0]
    rows, start, goal = pp.generate(row["seed"])
    assert ("\n".join(rows), list(start), list(goal)) == (row["grid"], row["start"], row["goal"])
    for args in [("validation",), ("eval", -1), ("eval", 2.5)]:
        with pytest.raises(UserError):
            pp.plan_path(*args)


def test_view_and_env_functions():
    env = pp.PlanPathEnv()
    s = act(state(), ["D"])
    v = env.view(s)
    assert v["board"] == ".#G\nA.." and v["position"] == [1, 0] and v["moves"] == 1 and v["size"] == 3
    assert REGISTRY.functions["progress"].fn(s) == pytest.approx(0.25)
    assert REGISTRY.functions["step_reward"].fn(s) == pytest.approx(-0.98)
    assert REGISTRY.functions["distance_shaping"].fn(s) == pytest.approx(-0.97)
    assert REGISTRY.functions["solved"].fn(s) is False and REGISTRY.functions["valid"].fn(s) is True
    assert not env.success(s)


BFS_TOOL = '''
import json, sys
from collections import deque
rows = [line for line in sys.stdin.read().splitlines() if line]
find = lambda ch: next((r, row.index(ch)) for r, row in enumerate(rows) if ch in row)
start, goal = find("A"), find("G")
prev = {start: None}
queue = deque([start])
while queue:
    r, c = queue.popleft()
    for m, (dr, dc) in {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}.items():
        n = (r + dr, c + dc)
        if 0 <= n[0] < len(rows) and 0 <= n[1] < len(rows[0]) and rows[n[0]][n[1]] != "#" and n not in prev:
            prev[n] = ((r, c), m)
            queue.append(n)
path, cell = [], goal
while prev[cell]:
    cell, m = prev[cell]
    path.append(m)
print(json.dumps(path[::-1]))
'''


def test_tool_program_plans_from_the_board_and_is_scored_without_moving():
    env = pp.PlanPathEnv()
    row = pp.plan_path("eval", n=1)[0]
    s0 = env.reset(row)
    s1 = env.apply(s0, "tool", {"code": BFS_TOOL, "ok": True})
    plan = pp.shortest_path(s0.maze, s0.start)
    assert s1.tool_output.strip() == json.dumps(plan)
    assert s1.last_valid and s1.last_reward == pytest.approx(replayed(s0.maze, s0.start, plan))
    assert s1.position == s0.position and s1.moves == 0 and s1.steps == 0
    # a program printing a plan that runs into a wall earns the invalid-move penalty
    s2 = env.apply(state(), "tool", {"code": "print('[\"R\"]')", "ok": True})
    assert not s2.last_valid and s2.last_reward == pytest.approx(blocked(2))
    # no program: -1; a failing program: -2; output that is no plan: -2
    assert env.apply(state(), "tool", {"code": "", "ok": False}).last_reward == -2.0  # as a failed program
    assert env.apply(state(), "tool", {"code": "1/0", "ok": True}).last_reward == -2.0
    assert env.apply(state(), "tool", {"code": "print('no idea')", "ok": True}).last_reward == -2.0


def test_the_planning_helper_is_importable_only_when_the_env_offers_it():
    """`env plan_path(helper=true)`: a tool program may `import grid` and print its shortest
    path, which then scores as the planner's optimal solve; without it the import fails (-2)."""
    from masdsl.envs import grid_helper

    task = {"id": "h", "grid": ".#...\n.#.#.\n...#.\n.##..\n.....", "start": [0, 0], "goal": [0, 2]}
    code = "import sys, json, grid\nprint(json.dumps(grid.shortest_path(sys.stdin.read())))"
    helped = pp.PlanPathEnv(helper=True, gamma=1.0)
    s0 = helped.reset(task)
    s1 = helped.apply(s0, "tool", {"code": code, "ok": True})
    plan = pp.shortest_path(s0.maze, s0.start)
    assert json.loads(s1.tool_output) == grid_helper.shortest_path(helped.board(s0)) and len(plan) == 6
    assert s1.last_valid and dict(s1.last_terms)["win_bonus"] == 1.0 and dict(s1.last_terms)["optimal_bonus"] == 0.5
    alone = pp.PlanPathEnv(gamma=1.0)
    s2 = alone.apply(alone.reset(task), "tool", {"code": code, "ok": True})
    assert s2.last_reward == -2.0 and "ModuleNotFoundError" in s2.tool_output
    with pytest.raises(UserError, match="helper"):
        pp.PlanPathEnv(helper="yes")


def test_the_helper_agrees_with_the_env_on_generated_boards():
    from masdsl.envs import grid_helper

    for seed in range(30):
        rows, start, goal = pp.generate(seed, size=5 + seed % 6)
        maze = pp.make_maze(rows, goal)
        path = grid_helper.shortest_path(pp.render(maze, start))
        assert len(path) == maze.dist[start[0]][start[1]]
        assert pp.play(maze, start, path, shortest=len(path), gamma=1.0).after == goal
