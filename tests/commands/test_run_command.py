"""`masdsl run` through the CLI entry point (in-process), on the toy with a tiny model."""

from __future__ import annotations

import json

import pytest

from masdsl.cli import main
from tests.support.overrides import tiny_hf
from tests.support.toy import TOY


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/learner/conftest.py


def args(tiny_model_dir, tmp_path, *extra):
    return ["run", str(TOY), *tiny_hf(tiny_model_dir),
            f"runtime.runs_dir={tmp_path / 'runs'}", "train.samples=2", "train.batch=4", "train.eval_tasks=2", *extra]


def test_run_then_resume_for_more_steps(tiny_model_dir, tmp_path, capsys):
    assert main(args(tiny_model_dir, tmp_path, "train.steps=2")) == 0
    (run_dir,) = (tmp_path / "runs" / "toy_digits").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["eval_before"]["success/eval"] is not None
    assert {"records.jsonl", "config.yaml", "workflow.mas", "checkpoints", "eval"} <= {p.name for p in run_dir.iterdir()}
    err = capsys.readouterr().err
    assert "policy shared <- roles namer, copier (full weights" in err
    # continue the same run to 3 steps (the checkpoint's config plus the override)
    assert main(["run", str(TOY), "--resume", str(run_dir), "train.steps=3"]) == 0
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 3
    assert "resumed from" in capsys.readouterr().err


@pytest.mark.parametrize("extra, message", [
    (["train.grouping=tree"], "`train.grouping` must be one of"),
    (["train.sampels=3"], "did you mean `train.samples`"),
    (["train.batch=50"], "larger than the train split"),
    (["--resume", "/nonexistent/run"], "no such run folder or checkpoint"),
])
def test_user_errors_exit_2_without_traceback(tiny_model_dir, tmp_path, capsys, extra, message):
    assert main(args(tiny_model_dir, tmp_path, *extra)) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
