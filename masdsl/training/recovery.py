"""What a run saves when an env or engine fails for good, so that `--resume` redoes exactly the lost work.

The trainer names each phase before it starts (`recovery.begin(...)`): the evaluation before
training, a step's rollout and update, its weight sync, an evaluation. A `StepFailed` inside a
phase saves a checkpoint whose RNG is the one from before that phase and, for the phases after a
step's update, marks the step unfinished: `--resume` then runs that step's evaluation and
checkpoint without redoing its update.
"""

from __future__ import annotations

from typing import Any, NoReturn

from masdsl.errors import StepFailed
from masdsl.training import checkpoint as ckpt

UNFINISHED = "unfinished"  # TrainState.extra key: the step's evaluation/checkpoint/on_step did not run


class Recovery:
    """The phase under way: its label, the RNG before it, and whether its step is already updated."""

    def __init__(self, label: str) -> None:
        self.begin(label)

    def begin(self, label: str, updated: bool = False) -> None:
        self.label, self.rng, self.updated = label, ckpt.rng_state(), updated

    def save_and_raise(self, exc: StepFailed, session: Any, state: ckpt.TrainState) -> NoReturn:
        """Checkpoint the state from before the failed phase and say how to continue."""
        ckpt.set_rng_state(self.rng)
        state.extra[UNFINISHED] = self.updated
        path = session.save_checkpoint(state)
        wf = session.workflow
        file = wf.path if wf.path is not None else f"{wf.name}.mas"
        raise StepFailed(f"{self.label} failed: {exc}. Saved checkpoint {path}; continue with: "
                         f"masdsl run {file} --resume {session.run_dir.path}" + _sync_from_here(session), role=exc.role, task_id=exc.task_id,
                         turn=exc.turn, error=exc.error, checkpoint=path) from None


def take_unfinished(state: ckpt.TrainState) -> bool:
    """Whether a failed run left this checkpoint's step without its evaluation/checkpoint (and forget it)."""
    return bool(state.extra.pop(UNFINISHED, False))


def _sync_from_here(session: Any) -> str:
    """An async run (`train.async_rollout=1`) resumes synchronously (`masdsl.learner.ahead.RESUME_REFUSED`)."""
    return " train.async_rollout=0" if session.plan.train.async_rollout else ""
