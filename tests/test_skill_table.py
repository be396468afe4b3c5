"""benchmarks/skill_table.py: per role, a metric's rate at turn 0 and over all turns, before vs
after, on the same tasks, with Wilson intervals over tasks and McNemar's test; records without
stored metric values get the workflow's metric lines evaluated again."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"


@pytest.fixture(scope="module")
def skill_table():
    sys.path.insert(0, str(BENCH))  # it imports its neighbour `stats`
    try:
        spec = importlib.util.spec_from_file_location("skill_table", BENCH / "skill_table.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(BENCH))


def record(task: str, role: str, turn: int, success: float, metrics: dict | None = None, fields: dict | None = None) -> str:
    return json.dumps({"task_id": task, "role": role, "turn": turn, "episode_success": success, "response_ids": [1, 2, 3],
                       "response_text": "", "fields": fields or {}, "metrics": metrics or {}})


def test_a_run_before_and_after_per_role(skill_table, tmp_path):
    run = tmp_path / "run"
    (run / "eval").mkdir(parents=True)
    shutil.copy(ROOT / "workflows" / "math_arith.mas", run / "workflow.mas")
    tasks = [f"arith/eval/{i}" for i in range(4)]
    before = [record(t, "tool", 0, 0.0, {"answers": 1.0, "correct": float(i == 0)}) for i, t in enumerate(tasks)]
    after = [record(t, "tool", 0, float(i < 3), {"answers": 1.0, "correct": float(i < 3)}) for i, t in enumerate(tasks)]
    after += [record(tasks[3], "tool", 1, 0.0, {"answers": 0.0, "correct": 0.0})]
    (run / "eval" / "step_000000.jsonl").write_text("\n".join(before) + "\n")
    (run / "eval" / "step_000008.jsonl").write_text("\n".join(after) + "\n")
    row = skill_table.compare(run, None)
    assert row["tasks"] == 4 and row["success"]["before"]["rate"] == 0.0 and row["success"]["after"]["rate"] == 0.75
    assert (row["success"]["mcnemar"]["b"], row["success"]["mcnemar"]["c"]) == (0, 3)
    correct = row["skills"]["tool/correct"]
    assert correct["turn0"]["before"]["rate"] == 0.25 and correct["turn0"]["after"]["rate"] == 0.75
    assert correct["all_turns"]["after"]["n"] == 5 and correct["all_turns"]["after"]["rate"] == 0.6
    assert "| run | 4 |" in skill_table.markdown([row])


def test_records_without_metrics_get_the_workflows_metric_lines_again(skill_table):
    import masdsl
    from masdsl.runtime.inputs import load_split

    wf = masdsl.load(ROOT / "workflows" / "math_arith.mas")
    tasks = {t["id"]: t for t in load_split(wf, "eval")}
    task = next(iter(tasks.values()))
    metrics = skill_table.Metrics(wf, tasks)
    right = f"print({task['answer']})"
    rec = {"task_id": task["id"], "role": "tool", "turn": 0, "metrics": {}}
    assert metrics.of(rec, {"tool": {"code": right}}) == {"answers": 1.0, "correct": 1.0}
    assert metrics.of(rec, {"tool": {"code": "print('n/a')"}}) == {"answers": 0.0, "correct": 0.0}
