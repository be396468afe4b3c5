"""The run folder has one writer (`masdsl.runtime.rundir.RunDir`): the record of what ran
(`config.yaml`, the plan's record), the records, a training run's evaluations and
`summary.json` go in through it, and the trainer takes a `RunDir`, never a path."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import masdsl
from masdsl.config import resolve_config
from masdsl.plan.run_plan import resolve_rollout
from masdsl.runtime.records import StepRecord
from masdsl.runtime.rundir import RunDir
from tests.support.overrides import NO_TRACKING
from tests.support.paths import TOY_DIR

ROOT = Path(masdsl.__file__).parent


def _record(step: int, task: str) -> StepRecord:
    return StepRecord(step, 0, task, "a", 0, "a", 0, True, "p", [1], [2], [0.0], 1.0, 0.0, 1.0, "stop", True)


def test_a_run_folder_holds_the_plans_record_and_what_the_run_wrote_through_it(tmp_path):
    wf = masdsl.load(TOY_DIR / "toy_digits.mas")
    plan = resolve_rollout(wf, resolve_config(wf.train, overrides=["train.steps=3", NO_TRACKING]))
    run = RunDir.open(plan, tmp_path / "run")
    assert (run.path / "config.yaml").read_text() == plan.record().yaml
    run.write_records([_record(1, "t1"), _record(2, "t2")])
    run.write_evaluation(2, [_record(2, "e1")])
    summary = run.write_summary({"steps": 2})
    assert [r.task_id for r in run.records()] == ["t1", "t2"] and run.n_records == 2
    assert [(r.task_id, label) for r, label in run.evaluations()] == [("e1", "eval at step 2")]
    assert (run.path / "eval" / "step_000002.jsonl").is_file() and summary == run.path / "summary.json"
    run.truncate_records(1)
    assert [r.task_id for r in run.records()] == ["t1"]


def test_the_trainer_takes_a_run_dir_only():
    from masdsl.training.trainer import train

    param = inspect.signature(train).parameters["run_dir"]
    assert param.annotation == "RunDir" and param.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD


def test_only_the_run_dir_writes_records_evaluations_and_the_summary():
    """Outside `runtime/rundir.py` nothing calls `records.write_records` into a run folder, names
    `summary.json`, or joins the `eval` folder: they go through `RunDir`."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in ("runtime/rundir.py", "runtime/records.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "write_records":
                found.append(f"{rel}:{node.lineno} write_records")
            if isinstance(node, ast.Constant) and node.value == "summary.json":
                found.append(f"{rel}:{node.lineno} summary.json")
            if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.right, ast.Constant)
                    and node.right.value == "eval"):
                found.append(f"{rel}:{node.lineno} / 'eval'")
    assert found == [], f"write through RunDir: {found}"
