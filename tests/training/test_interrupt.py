"""A Ctrl-C that a library swallows still stops the run (masdsl/training/interrupt.py): MLflow's
sqlite store retried a metrics write that the interrupt broke, and `masdsl run` trained on."""

from __future__ import annotations

import os
import signal

import pytest

from masdsl import api
from tests.support.overrides import tiny_hf
from tests.support.toy import TOY


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/learner/conftest.py


def test_a_swallowed_ctrl_c_stops_the_run_at_the_next_step(tiny_model_dir, tmp_path):
    seen: list[int] = []

    def swallow_a_ctrl_c(step: int, metrics: dict) -> None:
        seen.append(step)
        if step == 2:
            try:  # what a retrying library does with the KeyboardInterrupt the signal raises
                os.kill(os.getpid(), signal.SIGINT)
            except KeyboardInterrupt:
                pass

    overrides = [*tiny_hf(tiny_model_dir),
                 "train.steps=6", "train.samples=2", "train.batch=2", "train.eval_tasks=2", "train.eval_every=0"]
    before = signal.getsignal(signal.SIGINT)  # pytest-xdist's workers ignore SIGINT
    with pytest.raises(KeyboardInterrupt):
        api.train(TOY, overrides, run_dir=tmp_path / "run", on_step=swallow_a_ctrl_c)
    assert seen == [1, 2]  # stopped before step 3 ran
    assert signal.getsignal(signal.SIGINT) == before  # the handler is put back


def _collect_with_a_failing_finalizer(error: BaseException | None) -> None:
    import gc

    class Finalized:
        def __del__(self):
            if error is None:
                os.kill(os.getpid(), signal.SIGINT)  # the handler raises here, where Python cannot propagate
            else:
                raise error

    Finalized()
    gc.collect()


def test_a_ctrl_c_in_a_finalizer_is_not_reported_and_is_raised_at_the_check(monkeypatch):
    import sys

    from masdsl.training.interrupt import check, interruptible

    reported: list = []

    def record(unraisable):
        reported.append(unraisable.exc_value)

    monkeypatch.setattr(sys, "unraisablehook", record)
    with interruptible():
        _collect_with_a_failing_finalizer(None)
        with pytest.raises(KeyboardInterrupt):
            check()
        _collect_with_a_failing_finalizer(RuntimeError("a real bug in a finalizer"))
    assert [type(e) for e in reported] == [RuntimeError]  # other errors still reach the hook
    assert sys.unraisablehook is record  # put back


def test_a_ctrl_c_in_a_deferred_block_is_raised_when_the_block_ends_and_only_then():
    """`deferred()` (around the trainer's tracking calls): the block runs to its end, then the
    interrupt is raised; an interrupt recorded before the block is left to the trainer's `check()`."""
    from masdsl.training import interrupt

    done = []
    with interrupt.interruptible():
        with pytest.raises(KeyboardInterrupt):
            with interrupt.deferred():
                os.kill(os.getpid(), signal.SIGINT)
                done.append("after the signal")
        assert done == ["after the signal"]
        with interrupt.deferred():  # still pending from above: not this block's to raise
            done.append("second block")
        with pytest.raises(KeyboardInterrupt):
            interrupt.check()
    interrupt._PENDING.clear()
    assert done == ["after the signal", "second block"]
