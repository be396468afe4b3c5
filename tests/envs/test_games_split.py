"""Train and eval puzzles of every game are disjoint: by seed, by id and by content."""

from __future__ import annotations

import json

import pytest

from masdsl.envs import games_common as gc
from masdsl.envs import plan_path as pp
from masdsl.envs import sokoban as sk
from masdsl.envs import sudoku as sd
from masdsl.envs import sudoku_solver as solver
from masdsl.envs.registry import REGISTRY, load_builtins


def content(row: dict) -> str:
    """A row's puzzle, without its id or seed."""
    return json.dumps({k: v for k, v in row.items() if k not in ("id", "seed")}, sort_keys=True)


SOURCES = {
    "sudoku4": lambda split, n: sd.sudoku(split, n, size=4),
    "sudoku9": lambda split, n: sd.sudoku(split, n, size=9),
    "sokoban1": lambda split, n: sk.sokoban(split, n=n, boxes=1),
    "sokoban2": lambda split, n: sk.sokoban(split, n=n, boxes=2),
    "plan_path": lambda split, n: pp.plan_path(split, n=n),
    "plan_path5": lambda split, n: pp.plan_path(split, n, size=5),
}


@pytest.mark.parametrize("name", SOURCES)
def test_no_eval_puzzle_appears_in_train(name):
    # a larger train set than eval: disjointness must not depend on the two sizes matching
    n_train, n_eval = (100, 50) if name == "sudoku9" else (400, 200)
    train = SOURCES[name]("train", n_train)
    evals = SOURCES[name]("eval", n_eval)
    assert len(train) == n_train and len(evals) == n_eval
    train_contents = {content(r) for r in train}
    eval_contents = {content(r) for r in evals}
    assert len(train_contents) == n_train and len(eval_contents) == n_eval  # no repeats
    assert not train_contents & eval_contents
    assert not {r["seed"] for r in train} & {r["seed"] for r in evals}
    assert not {r["id"] for r in train} & {r["id"] for r in evals}
    assert all(r["seed"] % 2 == 0 for r in train) and all(r["seed"] % 2 == 1 for r in evals)


def test_content_filter_is_what_keeps_small_spaces_apart():
    # 4x4 sudoku has few puzzles: different seeds do produce the same puzzle, so seed parity
    # alone would not be enough; the content hash puts each puzzle in exactly one split.
    by_seed = {s: sd.render(solver.generate(s, 4)) for s in range(3000)}
    repeats = len(by_seed) - len(set(by_seed.values()))
    assert repeats > 0
    for text in by_seed.values():
        assert gc.content_split(text) in gc.SPLITS


def test_split_helpers_reject_bad_arguments():
    from masdsl.errors import UserError

    for split, n in [("test", 3), ("train", -1), ("train", True)]:
        with pytest.raises(UserError):
            gc.check_split(split, n, "sudoku")


def test_games_are_registered_under_the_shared_names():
    reg = load_builtins()
    assert reg is REGISTRY
    assert reg.envs["sudoku"].fields == ("board", "tool_output", "moves", "feedback", "legend", "size")
    assert reg.envs["sokoban"].fields == ("board", "tool_output", "moves", "feedback", "legend", "size")
    assert reg.envs["plan_path"].fields == ("board", "tool_output", "moves", "position", "goal", "feedback", "legend",
                                            "size")
    assert reg.data_sources["sudoku"].fields == ("id", "seed", "size", "puzzle")
    assert reg.data_sources["sokoban"].fields == ("id", "seed", "level")
    assert reg.data_sources["plan_path"].fields == ("id", "seed", "grid", "start", "goal")
    for name in ("step_reward", "solved", "progress", "valid"):
        spec = reg.functions[name]
        assert all(spec.allowed_in(g) for g in gc.GAMES) and not spec.allowed_in("math")


# ---- the action protocol: any parsed value is applied or penalised, never raised ----------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

JUNK = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 12) | st.text(max_size=6)
    | st.sampled_from(["U", "D", "L", "R", "up", "left"]),
    lambda inner: st.lists(inner, max_size=10),
    max_leaves=40,
)
ENVS = {
    "sudoku": (sd.SudokuEnv, {"id": "f", "puzzle": [[1, 2, 3, 4], [3, 0, 1, 0], [0, 1, 0, 3], [4, 0, 2, 0]]}),
    "sokoban": (sk.SokobanEnv, {"id": "f", "level": "######\n#@$_.#\n#____#\n######"}),
    "plan_path": (pp.PlanPathEnv, {"id": "f", "grid": "...\n.#.\n...", "start": [0, 0], "goal": [2, 2]}),
}


@pytest.mark.parametrize("game", ENVS)
@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(["grid", "moves", "other"]), value=JUNK, ok=st.booleans())
def test_any_parsed_value_is_applied_or_penalised(game, name, value, ok):
    cls, task = ENVS[game]
    env = cls()
    s0 = env.reset(task)
    s1 = env.apply(s0, "planner", {name: value, "ok": ok, "output": ""})
    assert s0 == env.reset(task)  # the input state is untouched
    assert isinstance(s1.last_reward, float) and isinstance(s1.last_valid, bool)
    assert s1.last_reward == pytest.approx(sum(v for _, v in s1.last_terms))  # the terms add up
    if "no_action_penalty" in dict(s1.last_terms):  # nothing playable: nothing played
        assert s1.last_reward == gc.NO_ACTION_PENALTY and s1.moves == 0 and not s1.last_valid
    if s1.last_valid and name != "other":
        assert s1.last_reward == pytest.approx(gc.term(s1, "step_penalty") + gc.term(s1, "win_bonus")
                                               + gc.term(s1, "optimal_bonus") + gc.term(s1, "push_shaping")
                                               + gc.term(s1, "distance_shaping") + gc.term(s1, "box_on_goal")
                                               + gc.term(s1, "fill_shaping") + gc.term(s1, "constraint_shaping")
                                               + gc.term(s1, "step_limit_penalty"))
    if name == "other":
        assert s1.last_valid and s1.last_reward == 0.0
    view = env.view(s1)
    assert isinstance(view["board"], str) and view["moves"] == s1.moves
    json.dumps(dict(view))  # prompts and records can carry it
