"""One-step off-policy training (`train.async_rollout=1`): the next step's rollout samples while this step updates.

    step n:   take rollout n (sampled during update n-1) -> start rollout n+1 in a thread
              -> update n -> wait for rollout n+1 -> sync the engines to the weights of step n

So the rollout of step n+1 samples from the weights of step n-1, never older: a rollout starts
only after the previous one was taken and the engines synced (admission bounds staleness at
one update). Every record says which weights sampled it (`StepRecord.weights_step`). The PPO
ratio divides by the sampler's own log-probs (`old_logprob_source` resolves `auto` to `engine`;
the run plan refuses `trainer`), so the importance weight is that of the behaviour policy and
the correction is exact. Step 1's rollout samples before any update, as in the synchronous loop.

The update trains the learner's model in place while the thread samples, so each trainable
policy's hf engine gets its own copy of the weights (the engine factory makes it, one per shared
`PeftModel`), synced after each step as any non-shared engine is (`policies.sync`). The copy
costs one more model in memory. A resumed run cannot continue exactly (the checkpoint of step
N holds the weights of step N, the next rollout wants those of step N-1): the trainer refuses
`--resume` under async.

The sampler draws from torch's global RNG (`HFEngine` seeds it per call under `fork_rng`), which
the update beside it must leave alone: a model with dropout is refused here, and the run plan
refuses `train.gradient_checkpointing` (its backward restores a saved RNG state); the logit
chunks' own checkpoints do not save it (`logit_chunks.scoring`).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping

from masdsl.config import ConfigError
from masdsl.learner.policies import Policy, iter_trainable

if TYPE_CHECKING:
    from torch import nn

RESUME_REFUSED = ("`--resume` cannot continue a run with `train.async_rollout=1` exactly: its checkpoint of step N "
                  "holds the weights of step N, but the rollout of step N+1 samples from those of step N-1; resume "
                  "with `train.async_rollout=0` (synchronous from there on) or start the run again")


@dataclass
class Sampled:
    """A step's rollout with what `train_step` needs of it (`step.sample_batch`'s results)."""

    roll: Any  # Rollout
    groups: list
    cursor: int  # the data cursor after its tasks
    rounds: int  # rollouts drawn (dynamic sampling)
    seconds: float  # its own wall time (overlapped with an update under async)
    weights_step: int  # the updates the sampling weights had


Sample = Callable[[int, int], tuple[Any, list, int, int]]  # (step, cursor) -> step.sample_batch's tuple


def sample_now(sample: Sample, step: int, cursor: int) -> Sampled:
    """The synchronous rollout of update `step + 1`, from the weights of `step` updates."""
    t0 = time.perf_counter()
    roll, groups, cursor, rounds = sample(step, cursor)
    return Sampled(roll, groups, cursor, rounds, time.perf_counter() - t0, step)


class Ahead:
    """The rollout of the next step, sampled in a thread during this step's update."""

    def __init__(self, sample: Sample) -> None:
        self.sample = sample
        self._thread: threading.Thread | None = None
        self._step = -1  # the step index (`TrainState.step` before its update) the pending rollout is for
        self._result: Sampled | None = None
        self._error: BaseException | None = None

    def rollout(self, step: int, cursor: int) -> Sampled:
        """The rollout of update `step + 1`: the one sampled ahead, or (step 1) one sampled now.
        An error of the sampling thread surfaces here, in the step it belongs to."""
        if self._step != step:
            return sample_now(self.sample, step, cursor)
        self.wait()
        self._step = -1
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        result, self._result = self._result, None
        assert result is not None
        return result

    def start(self, step: int, cursor: int, weights_step: int) -> None:
        """Sample the rollout of update `step + 1` from the engines' current weights (`weights_step` updates)."""
        assert self._thread is None, "one rollout ahead at most"
        self._step = step

        def run() -> None:
            try:
                self._result = sample_now(self.sample, step, cursor)
                self._result.weights_step = weights_step
            except BaseException as exc:  # handed to the main thread by `rollout`
                self._error = exc

        self._thread = threading.Thread(target=run, name=f"rollout-ahead-{step + 1}", daemon=True)
        self._thread.start()

    def wait(self) -> float:
        """Block until the rollout ahead has finished (before the engines sync); the seconds waited."""
        t0 = time.perf_counter()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        return time.perf_counter() - t0


def refuse_random_updates(policies: Mapping[str, Policy]) -> None:
    """Under `train.async_rollout=1`, a trainable policy whose update draws random numbers (dropout)
    is refused: the rollout beside the update samples from the same global RNG, so its samples
    would depend on timing."""
    for p in iter_trainable(policies):
        if draws_random(p.model):
            raise ConfigError(f"policy `{p.name}`: its model has dropout, so its update draws from the global RNG "
                              "that the rollout beside it samples with (`train.async_rollout=1`); the samples would "
                              "depend on timing. Use a model (and `lora.dropout`) without dropout, or "
                              "`train.async_rollout=0`")


def draws_random(model: nn.Module) -> bool:
    """Whether training `model` draws random numbers: a dropout layer, or attention dropout, above 0.

    >>> import torch
    >>> draws_random(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.0)))
    False
    >>> draws_random(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.1)))
    True
    """
    import torch  # heavy: only a training session gets here

    config = getattr(model, "config", None)
    if float(getattr(config, "attention_dropout", 0.0) or 0.0) > 0:
        return True
    return any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in model.modules())
