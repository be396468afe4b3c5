"""benchmarks/stats.py: intervals over distinct eval tasks (not tasks x seeds) and McNemar's exact
test; benchmarks/learning.py's table uses them."""

from __future__ import annotations

import doctest
import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


stats = _load("stats")


def test_the_doctests_hold():
    assert doctest.testmod(stats).failed == 0


def test_the_interval_counts_tasks_not_tasks_times_seeds():
    seed = {f"t{i}": int(i < 18) for i in range(24)}  # 18 of 24 tasks solved
    one, two = stats.over_tasks([seed]), stats.over_tasks([seed, dict(seed)])
    assert one["ci"] == two["ci"] == stats.wilson(18, 24)
    assert (one["tasks"], two["tasks"], two["seeds"], two["spread"]) == (24, 24, 2, 0.0)
    pooled = stats.wilson(36, 48)  # what counting 48 "episodes" of two seeds gave: too narrow
    assert pooled[1] - pooled[0] < two["ci"][1] - two["ci"][0]
    # two seeds that disagree: the per-task mean, still n = 24, and their spread beside it
    other = {**seed, "t0": 0, "t1": 0, "t20": 1}
    r = stats.over_tasks([seed, other])
    assert r["rate"] == pytest.approx((18 + 17) / 48) and r["ci"] == stats.wilson(17.5, 24)
    assert r["spread"] == pytest.approx(1 / 24)
    assert stats.rate_over_tasks(r["per_seed"], 24)["ci"] == pytest.approx(r["ci"])
    with pytest.raises(ValueError, match="different tasks"):
        stats.over_tasks([seed, {"t0": 1}])


def test_mcnemar_matches_a_hand_computation():
    # 2 tasks lost, 8 gained, 54 unchanged: P(X <= 2), X ~ Binomial(10, 1/2), is (1 + 10 + 45) / 1024
    before = {f"t{i}": int(i < 2 or i >= 10) for i in range(64)}
    after = {f"t{i}": int(i >= 2) for i in range(64)}
    assert stats.mcnemar(before, after) == {"b": 2, "c": 8, "p": 2 * 56 / 1024}
    assert stats.mcnemar_p(0, 10) == 2 / 1024 and stats.mcnemar_p(5, 5) == 1.0
    with pytest.raises(ValueError, match="different tasks"):
        stats.mcnemar(before, {"t0": 1})


def test_the_learning_table_uses_distinct_tasks_and_pairs(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    for name in ("stats", "perf_doc"):  # learning.py imports them by these names; undone after the test
        monkeypatch.setitem(sys.modules, name, _load(name))
    learning = _load("learning")
    before = {f"t{i}": int(i < 4) for i in range(24)}
    after = {f"t{i}": 1 for i in range(24)}
    run = {"arm": "mas+at", "n_eval": 24, "before": 4 / 24, "after": 1.0, "reward_before": 3.2, "reward_after": 5.8,
           "tasks_before": before, "tasks_after": after}
    rows = learning.summarise([{**run, "seed": 0}, {**run, "seed": 1}])
    trained = next(r for r in rows if r["method"] == learning.LABELS["mas+at"])
    assert trained["n"] == 24 and trained["ci"] == stats.wilson(24, 24)  # [86.2, 100], not 48 episodes' [92.6, 100]
    assert trained["mcnemar_p"] == [2 / 2 ** 20] * 2 and trained["spread"] == 0.0
    assert "| 24 | 16.7 | 100.0 [86.2, 100.0] |" in learning.table(rows)
