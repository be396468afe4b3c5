"""Evaluation as papers report it: N independent episodes per task, mean@N and unbiased pass@k.

`eval_metrics` is the one function `masdsl eval` and the trainer's evaluation use; the
rollouts here run the toy on a tiny random model (hf engine, CPU).
"""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from types import SimpleNamespace

import pytest

import masdsl
from masdsl.config import ConfigError, resolve_config
from masdsl.training.metrics import eval_metrics, pass_at_k, pass_ks
from tests.support.overrides import tiny_hf
from tests.support.toy import TOY, TOY_DIR


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/learner/conftest.py


def toy_text() -> str:
    """The toy with a success a random model reaches now and then (a long first token)."""
    text = TOY.read_text()
    return text.replace("success same(namer.digit, task.target) and same(copier.digit, task.target)",
                        "success len(namer.output) >= 3")


@pytest.mark.parametrize("n", range(1, 7))
def test_pass_at_k_is_the_chance_that_a_random_k_subset_holds_a_correct_sample(n):
    for c in range(n + 1):
        samples = [True] * c + [False] * (n - c)
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(samples, k))
            exact = sum(any(s) for s in subsets) / len(subsets)
            assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-6), (n, c, k)


def test_pass_ks_and_keys():
    assert pass_ks(1) == [1] and pass_ks(3) == [1, 2, 3] and pass_ks(16) == [1, 2, 4, 8, 16] and pass_ks(6) == [1, 2, 4, 6]
    eps = [SimpleNamespace(task_id=t, success=s, team_reward=None, rewards_by_role_turn={("r", 0): 0.5})
           for t, s in [("a", True), ("a", False), ("b", False), ("b", False)]]
    m = eval_metrics([], eps)
    assert m == {"success/eval": 0.25, "reward/eval": 0.5, "eval_reward/r/turn0": 0.5, "mean@2/eval": 0.25,
                 "pass@1/eval": 0.25, "pass@2/eval": 0.5}
    single = eval_metrics([], eps[::2])  # greedy, one episode per task: pass@1 is the success rate
    assert single["pass@1/eval"] == single["success/eval"] == single["mean@1/eval"] == 0.5


def test_eval_samples_is_validated():
    assert resolve_config().train.eval_samples == 1
    assert resolve_config(overrides=["train.eval_samples=8"]).train.eval_samples == 8
    with pytest.raises(ConfigError, match="`train.eval_samples` must be at least 1"):
        resolve_config(overrides=["train.eval_samples=0"])


def _rollout(tiny_model_dir, hf_engine, *extra, repeats=1, n_tasks=3):
    from masdsl.runtime.executor import rollout
    from tests.support.rollout_plans import plan_of
    from masdsl.runtime.inputs import prepare

    wf = masdsl.loads(toy_text(), "toy_digits.mas", base_dir=TOY_DIR)
    cfg = resolve_config(wf.train, overrides=[*tiny_hf(tiny_model_dir), *extra])
    env, data = prepare(wf, cfg.sandbox)
    plan = plan_of(wf, cfg, seed=cfg.train.seed, repeats=repeats)
    return rollout(plan, env, data["eval"][:n_tasks], {"shared": hf_engine},
                   mode="eval", step=-1)


def test_repeats_are_independent_episodes_with_distinct_seeds(tiny_model_dir, hf_engine):
    ro = _rollout(tiny_model_dir, hf_engine, "train.eval_temperature=1.0", repeats=8)
    assert len(ro.episodes) == 24 and [e.sample for e in ro.episodes] == [j for j in range(8) for _ in range(3)]
    assert len({r.episode for r in ro.records}) == 24
    outputs = defaultdict(list)
    for r in ro.records:
        if r.role == "namer":
            outputs[r.task_id].append(r.response_text)
    assert all(len(v) == 8 for v in outputs.values())
    assert any(len(set(v)) > 1 for v in outputs.values())  # different seeds, different samples
    again = _rollout(tiny_model_dir, hf_engine, "train.eval_temperature=1.0", repeats=8)
    assert [r.response_ids for r in again.records] == [r.response_ids for r in ro.records]  # seeded: reproducible
    seeds = defaultdict(set)
    for r in ro.records:
        seeds[(r.task_id, r.role)].add(r.episode)
    assert all(len(v) == 8 for v in seeds.values())
    m = eval_metrics(ro.records, ro.episodes)
    assert {"mean@8/eval", "pass@1/eval", "pass@2/eval", "pass@4/eval", "pass@8/eval"} <= set(m)
    assert m["pass@1/eval"] == pytest.approx(m["mean@8/eval"], abs=1e-6)
    assert m["mean@8/eval"] == pytest.approx(m["success/eval"], abs=1e-6)
    assert m["pass@1/eval"] <= m["pass@2/eval"] <= m["pass@4/eval"] <= m["pass@8/eval"]


def test_greedy_repeats_are_identical(tiny_model_dir, hf_engine):
    ro = _rollout(tiny_model_dir, hf_engine, repeats=3, n_tasks=2)
    texts = defaultdict(set)
    for r in ro.records:
        texts[(r.task_id, r.role)].add(r.response_text)
    assert all(len(v) == 1 for v in texts.values())


def _eval_cli(tiny_model_dir, tmp_path, *extra):
    from masdsl.cli import main

    path = tmp_path / "toy_digits.mas"
    path.write_text(toy_text().replace('import "toy_env.py"', f'import "{TOY_DIR / "toy_env.py"}"'))
    runs = tmp_path / "runs"
    code = main(["eval", str(path), *tiny_hf(tiny_model_dir), f"runtime.runs_dir={runs}", *extra])
    summaries = sorted((runs / "toy_digits").glob("*/summary.json"))
    return code, json.loads(summaries[-1].read_text()) if summaries else None


def test_masdsl_eval_samples_reports_mean_and_pass_at_k(tiny_model_dir, tmp_path, capsys):
    code, summary = _eval_cli(tiny_model_dir, tmp_path, "--tasks", "3", "--samples", "4", "--temperature", "1.0")
    assert code == 0
    m = summary["metrics"]
    assert summary["samples_per_task"] == 4 and summary["temperature"] == 1.0
    assert m["episodes"] == 12 and {"mean@4/eval", "pass@1/eval", "pass@2/eval", "pass@4/eval"} <= set(m)
    assert m["pass@1/eval"] == pytest.approx(m["mean@4/eval"], abs=1e-6)
    captured = capsys.readouterr()
    assert "pass@4" in captured.out and "mean@4" in captured.out and "identical" not in captured.err


def test_masdsl_eval_defaults_to_greedy_single_sample_and_warns_on_greedy_repeats(tiny_model_dir, tmp_path, capsys):
    code, summary = _eval_cli(tiny_model_dir, tmp_path, "--tasks", "2")
    assert code == 0 and summary["samples_per_task"] == 1 and summary["temperature"] == 0.0
    assert summary["metrics"]["episodes"] == 2 and "pass@2/eval" not in summary["metrics"]
    assert summary["metrics"]["pass@1/eval"] == summary["metrics"]["success/eval"]
    capsys.readouterr()
    code, summary = _eval_cli(tiny_model_dir, tmp_path, "--all", "train.eval_samples=2")
    assert code == 0 and summary["metrics"]["episodes"] == 20  # the whole eval split (10 tasks), twice
    assert "2 identical episodes" in " ".join(capsys.readouterr().err.split())
    assert _eval_cli(tiny_model_dir, tmp_path, "--all", "--tasks", "2")[0] == 2
    assert _eval_cli(tiny_model_dir, tmp_path, "--samples", "0")[0] == 2
