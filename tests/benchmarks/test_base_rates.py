"""benchmarks/base_rates.py on held-out problems: `--split eval` samples the eval tasks and
`--records` keeps each candidate's skill metrics (how issue 42's base rates on unseen templates
are measured), here with a scripted policy."""

from __future__ import annotations

import json

import pytest

from masdsl.envs.rg_data import reasoning_gym
from tests.support.benchmarks import benchmark_module
from tests.support.paths import ROOT


@pytest.fixture(scope="module")
def base_rates():
    yield from benchmark_module("base_rates")


def test_eval_split_and_per_candidate_metrics(base_rates, tmp_path):
    task = reasoning_gym("gsm_symbolic", "eval", n=1)[0]
    right, wrong = f"```python\nprint({task['answer']})\n```", "```python\nprint(-1)\n```"
    replay = tmp_path / "replay.jsonl"
    replay.write_text(json.dumps({"task_id": task["id"], "role": "solver", "turn": 0, "outputs": [right, wrong]}) + "\n"
                      + json.dumps({"task_id": task["id"], "role": "solver", "turn": 1, "output": f"\\boxed{{{task['answer']}}}"}) + "\n")
    records = tmp_path / "records.jsonl"
    table, episodes = base_rates.measure(str(ROOT / "workflows" / "math_gsm_single.mas"),
                                         ["runtime.engine=replay", f"runtime.replay_file={replay}"], tasks=1, samples=2,
                                         split="eval", records=str(records))
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    turn0 = sorted((r["candidate"], r["metrics"]["program_correct"], r["reward"]) for r in rows if r["turn"] == 0)
    assert {r["task_id"] for r in rows} == {task["id"]}  # an eval task: a held-out template
    assert turn0 == [(0, 1.0, 1.0), (1, 0.0, 0.0)]
    assert episodes["success"] == 1.0 and [(r["role"], r["turn"], r["n"]) for r in table] == [("solver", 0, 2), ("solver", 1, 2)]


def test_metric_rates_count_candidates_tasks_and_split_groups(base_rates):
    from types import SimpleNamespace as R

    recs = [R(role="tool", turn=0, task_id=t, metrics={"correct": float(v)}) for t, vs in
            (("a", (1, 0, 0, 0)), ("b", (0, 0, 0, 0)), ("c", (1, 1, 1, 1))) for v in vs]
    assert base_rates.metric_rates(recs) == [{"role": "tool", "turn": 0, "metric": "correct", "k": 5, "n": 12,
                                              "tasks_any": 2, "tasks": 3, "split": 1}]
    text = base_rates.render([], {"episodes": 3, "success": 0.5, "tokens": 1, "wall_s": 1.0,
                                  "metrics": base_rates.metric_rates(recs)})
    assert "| tool correct | 0 | 5/12 = 41.7 % [19.3, 68.0] | 2/3 [20.8, 93.9] | 1/3 |" in text
