"""benchmarks/step_breakdown.py's arithmetic: the warm-up step is left out, the sync is taken out of
the trainer's `time/update_s` (which includes it), and what is left of the step is the rest."""

from __future__ import annotations

import pytest

from tests.support.benchmarks import benchmark_module


@pytest.fixture(scope="module")
def bench():
    yield from benchmark_module("step_breakdown")


def test_phases_add_up_to_the_step_without_the_warm_up(bench):
    ours = {"step_s": [99.0, 10.0, 12.0], "rollout_s": [50.0, 6.0, 6.0], "engine_s": [49.0, 5.0, 5.0],
            "env_s": [0.0, 0.5, 0.5], "update_s": [40.0, 3.5, 5.5], "sync_s": [1.0, 0.5, 0.5],
            "old_logprobs_s": [9.0, 1.0, 1.0], "completion_tokens": [1.0, 1000.0, 1000.0], "peak_rss_gb": 4.0}
    raw = {"tokens_per_s": 250.0}
    upd = {"masdsl": {"response_tokens": 900, "update_s": 3.0, "mfu": 0.1, "mm_peak_tflops": 1.0, "peak_gb": 2.0},
           "plain": {"response_tokens": 900, "update_s": 1.5, "mfu": 0.2, "mm_peak_tflops": 1.0, "peak_gb": 3.0}}
    b = bench.breakdown(ours, raw, upd)
    assert b["step_s"] == 11.0 and b["update_s"] == 4.0 and b["sync_s"] == 0.5
    assert b["other_s"] == pytest.approx(11.0 - 5.0 - 4.0 - 0.5)
    assert b["rollout_vs_raw"] == pytest.approx(1000 / 6.0 / 250.0)
    assert b["update_vs_plain"] == pytest.approx(0.5)  # masdsl's update twice as long as the plain loop's
    table = bench.markdown("m", b)
    assert "0.67x" in table and "0.50x" in table and "13.6 % of the step" in table


def test_child_arguments_drop_the_flags_the_parent_sets_again(bench):
    args = ["--model", "m", "--k", "4", "--json=out.json", "--parts", "ours", "--set", "a=1"]
    assert bench._without(args, ("--model", "--json", "--parts")) == ["--k", "4", "--set", "a=1"]
