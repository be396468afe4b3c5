"""Rewards that cannot be farmed: with `gamma=1.0` (what the shipped game workflows use) a closed
walk never scores above staying put, in plan_path and in sokoban; the reference's discount 0.99,
still available, pays for loops (its replay numbers stay exact in test_paper_rewards.py)."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from masdsl.envs import plan_path as pp
from masdsl.envs import sokoban as sk

ROOT = Path(__file__).resolve().parents[2]
OPEN = {"id": "open", "grid": "\n".join(["....."] * 5), "start": [0, 0], "goal": [2, 3]}
MOVES = "UDLR"


def play_plan(moves, gamma, task=OPEN):
    env = pp.PlanPathEnv(gamma=gamma)
    s0 = env.reset(task)
    return s0, env.apply(s0, "planner", {"moves": moves, "ok": True})


def test_back_and_forth_on_an_open_board_pays_only_with_the_reference_discount():
    """20 moves D,U,D,U from the corner opposite the goal (distance 8), the goal never reached."""
    walk = ["D", "U"] * 10
    corner = {**OPEN, "goal": [4, 4]}
    _, farmed = play_plan(walk, 0.99, corner)
    _, fair = play_plan(walk, 1.0, corner)
    assert farmed.last_reward == pytest.approx(1.3, abs=0.01)  # more than one correct move (+1.03)
    assert fair.last_reward == pytest.approx(-0.2)  # 20 step penalties, no shaping
    assert pp.potential(farmed.maze, farmed.position) == pp.potential(farmed.maze, farmed.start)


def closed_walks(rng, maze, start, n):
    """Random move lists that end where they start and never touch the goal."""
    found = 0
    while found < n:
        moves = [rng.choice(MOVES) for _ in range(rng.randrange(2, 24))]
        # append the reverse of the net displacement, so many lists close
        played = pp.play(maze, start, moves, gamma=1.0)
        back = pp.shortest_path(pp.make_maze(["".join("#" if (r, c) in maze.blocked else "." for c in range(maze.width))
                                              for r in range(maze.height)], start), played.after)
        if back is None:
            continue
        walk = moves + back
        end = pp.play(maze, start, walk, gamma=1.0)
        if end.after == start and "win_bonus" not in end.terms:
            found += 1
            yield walk


@pytest.mark.parametrize("seed", range(12))
def test_no_closed_walk_scores_above_staying_put_with_gamma_1(seed):
    rng = random.Random(seed)
    rows, start, goal = pp.generate(seed, size=5 + seed % 6)
    maze = pp.make_maze(rows, goal)
    for walk in closed_walks(rng, maze, start, 5):
        fair = pp.play(maze, start, walk, gamma=1.0)
        assert fair.terms.get("distance_shaping", 0.0) == pytest.approx(0.0, abs=1e-9)
        assert fair.reward <= 0.0  # staying put scores 0
        assert fair.reward < pp.play(maze, start, walk, gamma=0.99).reward  # the discount pays for it


def test_gamma_1_shaping_is_the_distance_covered():
    """The potential telescopes: the shaping of any walk is phi(end) - phi(start)."""
    rng = random.Random(7)
    rows, start, goal = pp.generate(3, size=8)
    maze = pp.make_maze(rows, goal)
    for _ in range(200):
        moves = [rng.choice(MOVES) for _ in range(rng.randrange(1, 30))]
        w = pp.play(maze, start, moves, gamma=1.0)
        if "win_bonus" in w.terms:
            continue
        assert w.terms["distance_shaping"] == pytest.approx(pp.potential(maze, w.after) - pp.potential(maze, start))


# a 7x6 room: box (2,2) two cells above its goal (4,2); the player at (4,5)
ROOM = "#######\n#_____#\n#_$___#\n#_____#\n#_.__@#\n#######"


def sokoban_play(moves, gamma, text=ROOM):
    env = sk.SokobanEnv(gamma=gamma)
    s0 = env.reset({"id": "room", "level": text})
    return s0, env.apply(s0, "planner", {"moves": moves, "ok": True})


def test_sokoban_walking_in_circles_pays_only_with_the_reference_discount():
    walk = ["U", "D"] * 20  # the player walks up and down, the box stays
    s0, farmed = sokoban_play(walk, 0.99)
    _, fair = sokoban_play(walk, 1.0)
    assert farmed.level == s0.level and fair.level == s0.level
    shaping = dict(farmed.last_terms)["push_shaping"]
    assert shaping == pytest.approx(40 * 0.002)  # 0.001 x distance 2 per move, never earned back
    assert dict(fair.last_terms).get("push_shaping", 0.0) == pytest.approx(0.0, abs=1e-12)
    assert fair.last_reward == pytest.approx(-0.4)


def test_sokoban_pushing_a_box_away_and_back_scores_below_staying_put_with_gamma_1():
    """Random move lists that leave the player and the box where they were (some push the box
    away and back): none scores above 0, and their shaping is exactly 0."""
    text = "#######\n#__@__#\n#__$__#\n#_____#\n#__.__#\n#######"
    s0, _ = sokoban_play([], 1.0, text)
    player = s0.level.player
    rng = random.Random(0)
    env = sk.SokobanEnv(gamma=1.0)
    # push the box down, walk round below it, push it back up, walk back: a closed loop of pushes
    loop = list("DRDDLURUUL")
    _, fair = sokoban_play(loop * 3, 1.0, text)
    _, farmed = sokoban_play(loop * 3, 0.99, text)
    assert fair.level == s0.level == farmed.level
    assert dict(fair.last_terms)["push_shaping"] == pytest.approx(0.0, abs=1e-9)
    assert fair.last_reward == pytest.approx(-0.3) and farmed.last_reward > fair.last_reward
    tried = 0
    for _ in range(4000):
        moves = [rng.choice(MOVES) for _ in range(rng.randrange(2, 16))]
        s1 = env.apply(s0, "planner", {"moves": moves, "ok": True})
        if s1.level == s0.level and not s1.solved():
            tried += 1
            assert s1.last_reward <= 0.0, moves
            assert dict(s1.last_terms).get("push_shaping", 0.0) == pytest.approx(0.0, abs=1e-9)
    assert tried >= 20 and player == s0.level.player


@pytest.mark.parametrize("name", ["plan_path", "plan_path_single", "plan_path_per_role", "plan_path_helper",
                                  "sokoban", "sokoban_single"])
def test_shipped_game_workflows_use_the_undiscounted_potential(name):
    text = (ROOT / "workflows" / f"{name}.mas").read_text()
    env_line = re.search(r"^env (\w+)(\(.*?\))?", text, re.M)
    assert env_line and "gamma=1.0" in (env_line.group(2) or ""), env_line.group(0)
