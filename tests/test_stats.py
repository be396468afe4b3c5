"""masdsl/stats.py: intervals over distinct eval tasks (not tasks x seeds) and McNemar's exact
test (its doctests run with the suite: `--doctest-modules` over `masdsl/`)."""

from __future__ import annotations

import pytest

from masdsl import stats


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


def test_stats_stays_plain_python():
    """Any script (and the ground floor of masdsl's layers) can import it: no torch, no numpy."""
    imported = {line.split()[1].split(".")[0] for line in open(stats.__file__).read().splitlines()
                if line.startswith(("import ", "from "))}
    assert imported <= {"__future__", "math", "typing"}, imported
