"""Per-role skill metrics (issue 28): a role's `metric NAME = expr` lines are evaluated for every
candidate, never enter its reward, and are reported as `skill/<split>/<role>/<name>[/turn<t>]` in
training steps, evaluations and the run's summary table."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
from rich.console import Console

import masdsl
from masdsl import api
from masdsl.lang.errors import MasError
from masdsl.runtime.inputs import load_split
from masdsl.runtime.records import StepRecord
from masdsl.training.display import print_summary
from tests.support.overrides import tiny_hf
from tests.support.toy import TOY, TOY_DIR


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/learner/conftest.py


def toy_with_metrics(tmp_path: Path, metric: str = "metric right = same(digit, task.target)"):
    """The toy with a metric on the copier that its reward does not pay for: whether it says the
    hidden digit (its reward is agreeing with the namer)."""
    shutil.copy(TOY_DIR / "toy_env.py", tmp_path / "toy_env.py")
    text = TOY.read_text()
    text = text.replace("reward same(digit, namer.digit)\n", f"reward same(digit, namer.digit)\n  {metric}\n")
    assert metric in text
    path = tmp_path / "toy_metrics.mas"
    path.write_text(text)
    return path


def test_metrics_are_measured_and_reported_but_never_rewarded(tiny_model_dir, tmp_path):
    path = toy_with_metrics(tmp_path)
    result = api.train(path, [*tiny_hf(tiny_model_dir),
                              "train.steps=1", "train.samples=2", "train.batch=3", "train.eval_tasks=4",
                              "train.eval_every=0"], run_dir=tmp_path / "run")
    records = [StepRecord.from_dict(r) for r in _jsonl(tmp_path / "run" / "records.jsonl")]
    copier = [r for r in records if r.role == "copier"]
    assert copier and all(set(r.metrics) == {"right"} for r in copier)
    assert all(not r.metrics for r in records if r.role == "namer")
    # the value is what the expression says, whatever the reward was
    targets = {t["id"]: t["target"] for t in load_split(masdsl.load(path), "train")}
    for r in copier:
        assert r.metrics["right"] == float(r.fields["digit"] == targets[r.task_id])
    step = result.history[0]
    assert step["skill/train/copier/right"] == pytest.approx(sum(r.metrics["right"] for r in copier) / len(copier))
    assert step["skill/train/copier/right/turn0"] == step["skill/train/copier/right"]
    for ev in (result.eval_before, result.eval_after):
        assert 0.0 <= ev["skill/eval/copier/right"] <= 1.0 and "skill/eval/namer/right" not in ev
    # the first and the last evaluation compared task by task (masdsl/training/significance.py):
    # read from the run folder's eval/, agreeing with the evaluations' own rates
    sig = result.significance
    assert sig is not None and sig["success"]["tasks"] == 4 and set(sig["skills"]) == {"copier/right"}
    assert sig["success"]["before"]["rate"] == pytest.approx(result.eval_before["success/eval"])
    assert sig["success"]["after"]["rate"] == pytest.approx(result.eval_after["success/eval"])
    assert sig["skills"]["copier/right"]["after"]["rate"] == pytest.approx(result.eval_after["skill/eval/copier/right"])
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["significance"] == json.loads(json.dumps(sig))
    out = io.StringIO()
    print_summary(Console(file=out, width=240), result)
    text = out.getvalue()
    assert "skill copier (eval, before -> after)" in text and "right " in text
    row = next(line for line in text.splitlines() if "eval success per task (before -> after)" in line)
    assert " over 4 tasks; McNemar " in row and " lost, " in row and " gained, p " in row
    assert "(4 tasks; McNemar " in next(line for line in text.splitlines() if "skill copier" in line)


def test_a_metric_that_is_text_is_refused_with_its_location(tmp_path):
    path = toy_with_metrics(tmp_path, 'metric said = digit')
    with pytest.raises(MasError) as err:
        masdsl.load(path)
    text = str(err.value)
    assert "metric `said`" in text and "toy_metrics.mas:" in text


def test_two_metrics_with_one_name_are_refused(tmp_path):
    path = toy_with_metrics(tmp_path, "metric right = same(digit, task.target)\n  metric right = 1")
    with pytest.raises(MasError) as err:
        masdsl.load(path)
    assert "metric `right` is declared twice in role `copier`" in str(err.value)


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_metric_lines_do_not_change_what_a_checkpoint_resumes(tmp_path):
    from masdsl.lang.fingerprint import changes, fingerprint

    plain = masdsl.load(TOY)
    measured = masdsl.load(toy_with_metrics(tmp_path))
    assert measured.roles["copier"].metrics and changes(fingerprint(plain), fingerprint(measured)) == []
