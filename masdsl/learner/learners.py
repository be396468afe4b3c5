"""Where each trainable policy's updates run: one interface, a local and a remote implementation.

    learners = open_learners(policies, plan, log)     # {policy: Learner}
    stats = update_policies(learners, policies, UpdateBatch(records, advantages, keep), log)
    learners["shared"].state_dict()                    # the optimizer state a checkpoint keeps
    close_learners(learners)

A `Learner` is a policy's optimizer and the place its update runs:

- `LocalLearner`: the driver runs `masdsl.learner.update.update_policy` on its own model with its
  own AdamW (and the KL reference, `train.kl_coef > 0`): `runtime.learner_workers=0`, LoRA policies;
- `masdsl.learner.workers.LearnerGroup`: N Ray actors in one torch.distributed group
  (`runtime.learner_workers=N`, data parallel or FSDP2), restarted when a rank dies.

Every update goes the same three steps: `start` (every policy's update is submitted before any
is awaited, so groups of different policies train at once), `finish` (wait; a group redoes a
failed update on fresh workers while it may), `commit` (only once every policy finished: the
driver's policies point at the new weights). A step that fails leaves every policy and every
optimizer state as before it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol

from masdsl.config import TrainConfig
from masdsl.learner.logprobs import KLReference
from masdsl.learner.policies import Policy, iter_trainable
from masdsl.learner.update import UpdateBatch, UpdateStats, update_policy
from masdsl.learner.workers import LearnerGroup, build_optimizer, references
from masdsl.plan.run_plan import RunPlan

Log = Callable[[str], None]


class Learner(Protocol):
    def start(self, batch: UpdateBatch) -> Any:
        """Begin this policy's update on `batch` (a remote learner returns at once)."""

    def finish(self, pending: Any, batch: UpdateBatch, policy: Policy, log: Log | None = None) -> Any:
        """Wait for the update `start` began; raises `StepFailed` when it cannot be done."""

    def commit(self, result: Any, policy: Policy) -> UpdateStats:
        """Keep the finished update: `policy` now holds (or points at) the new weights."""

    def state_dict(self) -> dict[str, Any]:
        """The optimizer state, as a checkpoint saves it."""

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def load_weights(self, policy: Policy) -> None:
        """Train on from `policy`'s current weights (a resumed checkpoint's)."""

    def close(self) -> None: ...


@dataclass
class LocalLearner:
    """The driver trains the policy's own model (what its hf engine samples from, or syncs)."""

    optimizer: Any  # torch AdamW over the policy's trainable parameters
    train: TrainConfig
    reference: KLReference | None = None  # the KL term's reference (`train.kl_coef > 0`)

    def start(self, batch: UpdateBatch) -> UpdateBatch:
        return batch  # the driver has one process: the update runs in `finish`

    def finish(self, pending: UpdateBatch, batch: UpdateBatch, policy: Policy, log: Log | None = None) -> UpdateStats:
        return update_policy(policy, self.optimizer, batch.records, batch.advantages, self.train, self.reference,
                             keep=batch.keep)

    def commit(self, result: UpdateStats, policy: Policy) -> UpdateStats:
        return result  # the driver's model is the one trained

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state)

    def load_weights(self, policy: Policy) -> None:
        pass  # the checkpoint's weights were loaded into the very model this learner trains

    def close(self) -> None:
        pass


def open_learners(policies: Mapping[str, Policy], plan: RunPlan, log: Log) -> dict[str, Learner]:
    """One learner per trainable policy, as the plan places it (`RunPlan.placement`)."""
    learners: dict[str, Learner] = {}
    try:
        for p in iter_trainable(policies):
            where = plan.placement.of(p.name).learner
            if where.where == "workers":
                group = LearnerGroup(p, plan, where.workers)
                log(group.describe())
                learners[p.name] = group
            else:
                reference = references({p.name: p}, plan)[p.name] if plan.train.kl_coef > 0 else None
                learners[p.name] = LocalLearner(build_optimizer(p.parameters(), plan.train, plan.lrs[p.name]), plan.train,
                                                reference)
    except BaseException:
        close_learners(learners)
        raise
    return learners


def update_policies(learners: Mapping[str, Learner], policies: Mapping[str, Policy], batch: UpdateBatch,
                    log: Log | None = None) -> dict[str, UpdateStats]:
    """Every policy's update: all started, then all finished, then all kept."""
    pending = {name: lr.start(batch) for name, lr in learners.items()}
    done = {name: learners[name].finish(p, batch, policies[name], log) for name, p in pending.items()}
    return {name: learners[name].commit(result, policies[name]) for name, result in done.items()}


def close_learners(learners: Mapping[str, Learner]) -> None:
    for lr in learners.values():
        lr.close()
