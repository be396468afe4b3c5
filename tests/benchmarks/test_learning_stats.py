"""benchmarks/learning.py's table: intervals over distinct eval tasks (not tasks x seeds) and
McNemar's exact test per seed (`masdsl.stats`, tested in tests/test_stats.py)."""

from __future__ import annotations

import pytest

from masdsl import stats
from tests.support.benchmarks import benchmark_module


@pytest.fixture(scope="module")
def learning():
    yield from benchmark_module("learning")


def test_the_learning_table_uses_distinct_tasks_and_pairs(learning):
    before = {f"t{i}": int(i < 4) for i in range(24)}
    after = {f"t{i}": 1 for i in range(24)}
    run = {"arm": "mas+at", "n_eval": 24, "before": 4 / 24, "after": 1.0, "reward_before": 3.2, "reward_after": 5.8,
           "tasks_before": before, "tasks_after": after}
    rows = learning.summarise([{**run, "seed": 0}, {**run, "seed": 1}])
    trained = next(r for r in rows if r["method"] == learning.LABELS["mas+at"])
    assert trained["n"] == 24 and trained["ci"] == stats.wilson(24, 24)  # [86.2, 100], not 48 episodes' [92.6, 100]
    assert trained["mcnemar_p"] == [2 / 2 ** 20] * 2 and trained["spread"] == 0.0
    assert "| 24 | 16.7 | 100.0 [86.2, 100.0] |" in learning.table(rows)
