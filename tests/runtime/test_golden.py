"""Golden traces of the shipped `workflows/coder_tester.mas` with the replay engine and the real
code env (sandboxed tests): the rewards, selections and episode ends docs/concepts.md ("Execution semantics") prescribes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import masdsl
from masdsl.config import resolve_config
from masdsl.envs.datasets import humaneval
from masdsl.runtime.inputs import make_env
from masdsl.runtime.backends.replay import ReplayEngine
from masdsl.runtime.executor import rollout
from tests.support.rollout_plans import plan_of
from tests.support.overrides import NO_TRACKING

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def setup():
    wf = masdsl.load(str(ROOT / "workflows" / "coder_tester.mas"))
    cfg = resolve_config(wf.train, overrides=[NO_TRACKING])
    # HumanEval/1 (a 15-line solution) is outside the shipped short-solution splits: take it from all of HumanEval
    task = next(t for t in humaneval("all") if t["id"] == "HumanEval/1")
    return wf, cfg, make_env(wf, cfg.sandbox), task


def _block(code: str) -> str:
    return f"```python\n{code}\n```"


def _replay(tmp_path, task, rows):
    path = tmp_path / "replay.jsonl"
    with open(path, "w") as f:
        for (role, turn), outputs in rows.items():
            f.write(json.dumps({"task_id": task["id"], "role": role, "turn": turn, "outputs": outputs}) + "\n")
    return ReplayEngine(path)


def test_tree_sampling_on_coder_tester(setup, tmp_path):
    wf, cfg, env, task = setup
    wrong = "def separate_paren_groups(paren_string):\n    return []"
    good_tests = "\n".join(task["tests"][:2])
    rows = {("coder", 0): [_block(wrong), _block(task["solution"])],
            ("tester", 0): [_block(good_tests), _block("assert separate_paren_groups('()') == []")]}
    ro = rollout(plan_of(wf, cfg, samples=2), env, [task], {"shared": _replay(tmp_path, task, rows)},
                 mode="train", step=0)
    got = [(r.role, r.turn, r.candidate, r.selected, r.reward_team, r.reward_local, r.reward) for r in ro.records]
    assert got == [
        ("coder", 0, 0, False, 0.0, 0.0, 0.0),
        ("coder", 0, 1, True, 1.0, 1.0, 2.0),  # alpha 1.0: team + local
        # the tester is scored with the coder unchanged (pre-step: no code yet), so team = 0
        ("tester", 0, 0, True, 0.0, 1.0, 1.0),
        ("tester", 0, 1, False, 0.0, 0.0, 0.0),  # the reference solution fails this assert
    ]
    assert ro.records[2].fields["tests"] == task["tests"][:2]
    (ep,) = ro.episodes  # the winners pass each other: `passes(coder.code, tester.tests)` -> end
    assert (ep.success, ep.truncated, ep.turns, ep.team_reward) == (1.0, False, {"coder": 1, "tester": 1}, 1.0)


def test_failed_round_feeds_back_then_max_turns(setup, tmp_path):
    wf, cfg, env, task = setup
    wrong = "def separate_paren_groups(paren_string):\n    return []"
    tests = _block("\n".join(task["tests"]))
    rows = {("coder", t): ["no code block at all" if t == 0 else _block(wrong)] for t in range(3)}
    rows |= {("tester", t): [tests] for t in range(3)}
    ro = rollout(plan_of(wf, cfg), env, [task], {"shared": _replay(tmp_path, task, rows)}, mode="eval", step=-1)
    assert [(r.role, r.turn) for r in ro.records] == [(r, t) for t in range(3) for r in ("coder", "tester")]
    coder0, coder1 = ro.records[0], ro.records[2]
    assert not coder0.parse_ok and coder0.fields["code"] == "" and coder0.reward == 0.0
    assert "Your previous version:" not in coder0.prompt_text and "Your previous version:" in coder1.prompt_text
    assert coder1.parse_ok and "return []" in ro.records[4].prompt_text  # turn 2 prompt shows turn 1 code
    (ep,) = ro.episodes  # never passes: max_turns 3 ends it, truncated
    assert (ep.success, ep.truncated, ep.turns) == (0.0, True, {"coder": 3, "tester": 3})
    assert not ro.errors
