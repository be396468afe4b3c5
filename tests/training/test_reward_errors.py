"""A reward function that raises (issue 31, item 9): by default it scores 0 and is counted
(`reward_errors` in the step metrics, the evaluations and the run's summary table); with
`train.fail_on_reward_error` the run stops with an error naming the function, the role and the
exception."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest
from rich.console import Console

import masdsl
from masdsl.config import resolve_config
from masdsl.errors import StepFailed
from masdsl.plan.run_plan import resolve_run

from tests.support.overrides import tiny_hf
from tests.support.toy import TOY, TOY_DIR, train_into


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/learner/conftest.py

BOOM = '''
from masdsl.envs.registry import function


@function("raises_31", returns="number")
def raises_31(digit: str) -> float:
    raise ValueError(f"cannot score {digit!r}")
'''


def boom_workflow(tmp_path: Path):
    """The toy with the copier rewarded by a function that always raises."""
    shutil.copy(TOY_DIR / "toy_env.py", tmp_path / "toy_env.py")
    (tmp_path / "boom_31.py").write_text(BOOM)
    text = TOY.read_text().replace('import "toy_env.py"', 'import "toy_env.py"\nimport "boom_31.py"')
    text = text.replace("reward same(digit, namer.digit)", "reward raises_31(digit)")
    assert "raises_31(digit)" in text
    return masdsl.loads(text, name="boom", base_dir=tmp_path)


def run(wf, model_dir, run_dir, *extra, console=None):
    overrides = [*tiny_hf(model_dir), "train.steps=2",
                 "train.samples=2", "train.batch=3", "train.eval_tasks=2", "train.eval_every=0", *extra]
    return train_into(resolve_run(wf, resolve_config(wf.train, overrides=overrides)), run_dir, console=console)


def test_a_raising_reward_scores_0_and_is_counted(tiny_model_dir, tmp_path):
    wf = boom_workflow(tmp_path)
    out = io.StringIO()
    result = run(wf, tiny_model_dir, tmp_path / "run", console=Console(file=out, width=200))
    # the copier acts once per episode: batch x samples candidates per step, one per eval task
    assert [h["reward_errors"] for h in result.history] == [6.0, 6.0]
    assert [e["reward_errors/eval"] for e in result.evals] == [2.0, 2.0]
    assert all(h["reward/copier/turn0/mean"] == 0.0 for h in result.history)
    assert "reward errors (scored 0)" in out.getvalue() and "12 in training, 4 in evaluations" in out.getvalue()


def test_fail_on_reward_error_stops_the_run_naming_function_role_and_exception(tiny_model_dir, tmp_path):
    wf = boom_workflow(tmp_path)
    with pytest.raises(StepFailed) as err:
        run(wf, tiny_model_dir, tmp_path / "run", "train.fail_on_reward_error=true")
    message = str(err.value)
    assert err.value.role == "copier"
    for part in ("reward of `copier`", "raises_31", "ValueError: cannot score", "train.fail_on_reward_error"):
        assert part in message, message


def test_the_flag_is_off_by_default_and_typed():
    assert resolve_config().train.fail_on_reward_error is False
    assert resolve_config(overrides=["train.fail_on_reward_error=true"]).train.fail_on_reward_error is True
