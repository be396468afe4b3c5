"""The learner on Ray worker groups: each trainable full policy trains on N actors (`runtime.learner_workers`).

    group = LearnerGroup(policy, plan, workers)     # N actors, torch.distributed inside
    pending = group.start(batch)                    # submitted (every group before any is awaited)
    result = group.finish(pending, batch, policy, log)   # restarts and redoes a failed update
    stats = group.commit(result, policy)            # the driver's policy points at the new weights
    group.state_dict()                              # the optimizer state, for a checkpoint

A group is one of the two `masdsl.learner.learners.Learner`s (the other trains in the driver).

Each group is one `torch.distributed` process group (gloo on CPU, nccl on cuda) of N actors.
Every rank holds the policy's weights (loaded from the driver's, so a resumed run continues
exactly) and its own AdamW state, or with `runtime.learner_fsdp` its shard of both. An update
runs `masdsl.learner.update.update_policy` on every rank with a `masdsl.learner.parallel.Shard`:
each mini-batch's rows are split into N contiguous slices, each rank runs its slice, the loss is
divided by the token count of the *whole* mini-batch, and the gradients are summed over the
ranks before the grad-norm clip. So N ranks compute the gradient one process would on the whole
mini-batch (up to the order of float additions).

Rank 0 returns the new weights from its update call: they stay in Ray's object store, owned by
the driver. The driver's `Policy` only points at them (`Policy.trained_elsewhere`): engine actors
load the ref directly, the driver's model loads them when it needs them (a checkpoint, an engine
in the driver).

A group stands in for the policy's optimizer in a checkpoint: `state_dict()` fetches
the whole AdamW state (for a checkpoint), `load_state_dict()` sends one to every rank (resume).
Every rank keeps CPU copies of the whole AdamW state from before and after its last update,
numbered by the updates it finished; the driver counts the updates it kept (every group's
finished, so the policies point at the new weights) and asks a rank for the copy of that number,
never "the last" or "the one before": a rank whose update of a failed step has not started yet,
is blocked in a collective or has finished answers the same (pre-step) state, and one that holds
no copy of that number answers none. When a worker dies during an update the group is restarted
from the driver's (pre-step) weights and that AdamW state and the update redone
(`runtime.learner_restarts` times per run), after that the step fails (`StepFailed`) and the
checkpoint the trainer saves gets the pre-step state.
"""

from __future__ import annotations

import datetime
import os
import socket
import time
from functools import partial
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.distributed as dist

from masdsl.config import TrainConfig
from masdsl.errors import StepFailed
from masdsl.learner.logprobs import AdapterOff, FrozenModel, KLReference
from masdsl.learner.parallel import FsdpShard, Shard
from masdsl.learner.policies import Policy, compute_state, iter_trainable, master_dtype
from masdsl.learner.update import UpdateBatch, UpdateStats, update_policy
from masdsl.models.load import load_model
from masdsl.plan.run_plan import RunPlan
from masdsl.runtime.actors import ACTOR_CPUS, LEARN_SLOT, slot_resources
from masdsl.runtime.records import StepRecord
from masdsl.startup import start_owned_process

START_TIMEOUT_S = 900.0  # actors start, load the model, join the process group
UPDATE_TIMEOUT_S = 3600.0
COLLECTIVE_TIMEOUT = datetime.timedelta(minutes=10)  # a dead peer usually fails a collective at once


def build_optimizer(params: Sequence[Any], tc: TrainConfig, lr: float | None = None) -> Any:
    """AdamW (`lr`: the policy's own, else `train.lr`; `train.weight_decay`), fused where torch has
    the kernel: on CPU one step of SmolLM2-135M takes 0.14 s fused vs 0.70 s for the default loop."""
    params = list(params)
    fusable = all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)
    return torch.optim.AdamW(params, lr=tc.lr if lr is None else lr, weight_decay=tc.weight_decay, fused=fusable or None)


def references(policies: Mapping[str, Policy], plan: RunPlan) -> dict[str, KLReference]:
    """The KL term's reference of every trainable policy: its starting weights loaded apart
    (`FrozenModel`), or for LoRA the shared base with adapters off (`AdapterOff`)."""
    refs: dict[str, KLReference] = {}
    for p in iter_trainable(policies):
        if p.adapter is not None:
            refs[p.name] = AdapterOff()
            continue
        model, _ = load_model(p.model_path, dtype=plan.runtime.dtype, device=plan.runtime.device)
        refs[p.name] = FrozenModel(model.requires_grad_(False))
    return refs


class LearnerWorker:
    """The actor body: one rank of one policy's group."""

    def __init__(self, rank: int, world: int, threads: int):
        start_owned_process()  # this actor's process is masdsl's: before the policy imports transformers
        if threads:  # Ray starts an actor of under one CPU with one torch thread
            torch.set_num_threads(threads)
        self.rank, self.world = rank, world
        self.policy: Policy | None = None
        self.optimizer: Any = None
        self.reference: KLReference | None = None
        self.plan: RunPlan | None = None
        self.shard: Shard = Shard(rank, world)
        # (updates finished since the last load, the whole AdamW state on the CPU after them, the
        # same after one fewer): replaced in one assignment, so a concurrent `optimizer_state` sees
        # either the triple from before an update or the one from after it
        self._states: tuple[int, Any, Any] = (0, None, None)

    def where(self) -> dict[str, Any]:
        import ray  # heavy: ray is optional (the train extra); only learner workers need it

        return {"rank": self.rank, "pid": os.getpid(), "node": ray.get_runtime_context().get_node_id(),
                "ip": ray.util.get_node_ip_address(), "threads": torch.get_num_threads()}

    def address(self) -> tuple[str, int]:
        """Rank 0's address and a free port for the group's rendezvous."""
        import ray  # heavy: ray is optional (the train extra); only learner workers need it

        with socket.socket() as s:
            s.bind(("", 0))
            return ray.util.get_node_ip_address(), s.getsockname()[1]

    def setup(self, addr: str, port: int, shell: dict[str, Any], plan: RunPlan, weights: Mapping[str, Any]) -> None:
        """Join the process group; load the model, the driver's weights (then shard them under
        FSDP), an optimizer (and a reference)."""
        cuda = plan.runtime.device.startswith("cuda")
        if cuda:
            torch.cuda.set_device(0)  # Ray gives each actor its own GPU as cuda:0
        dist.init_process_group("nccl" if cuda else "gloo", init_method=f"tcp://{addr}:{port}", rank=self.rank,
                                world_size=self.world, timeout=COLLECTIVE_TIMEOUT)
        model, tok = load_model(shell["model_path"], dtype=master_dtype(plan), device=plan.runtime.device)
        model.load_state_dict(weights)
        if plan.train.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.shard = (FsdpShard if plan.placement.of(shell["name"]).learner.fsdp else Shard)(self.rank, self.world)
        model = self.shard.wrap(model)
        self.policy = Policy(shell["name"], shell["spec"], shell["roles"], model, tok, shell["model_path"],
                             compute_dtype=plan.runtime.dtype)
        self.optimizer = build_optimizer(self.policy.parameters(), plan.train, plan.lrs[self.policy.name])
        self._states = (0, self.shard.full_optimizer_state(self.optimizer), None)  # empty: no collective
        self.plan = plan
        if plan.train.kl_coef > 0:
            self.reference = references({self.policy.name: self.policy}, plan)[self.policy.name]

    def update(self, records: list[StepRecord], advantages: list[float], keep: list[bool] | None
               ) -> tuple[tuple[UpdateStats, float, float], dict[str, Any] | None, dict[str, Any] | None]:
        """This rank's part of the update (three return values, `num_returns=3`): (stats, start and
        end wall time); from rank 0 the new weights in the master dtype, and cast to the compute
        dtype when the engines hold another one (else None)."""
        start = time.time()
        policy, plan = self.policy, self.plan
        assert policy is not None and plan is not None, "setup runs first"
        self.shard.stand_ins.clear()
        stats = update_policy(policy, self.optimizer, records, advantages, plan.train, self.reference,
                              keep=keep, shard=self.shard)
        # gathered now, while every rank is alive (FSDP), for the checkpoint or a restart
        done, after, _ = self._states
        self._states = (done + 1, self.shard.full_optimizer_state(self.optimizer), after)
        weights = (self.shard.full_weights(policy.model) if self.rank == 0 or isinstance(self.shard, FsdpShard)
                   else None)
        if weights is None or self.rank != 0:
            return (stats, start, time.time()), None, None
        cast = None if master_dtype(plan) == plan.runtime.dtype else compute_state(weights, plan.runtime.dtype)
        return (stats, start, time.time()), weights, cast

    def optimizer_state(self, updates: int) -> dict[str, Any] | None:
        """The whole AdamW state after `updates` updates (since the last load), or None when this
        rank holds no copy of it. CPU copies every rank keeps, so any surviving rank can answer,
        also while its update of a failed step is still running (`max_concurrency=2`)."""
        done, after, before = self._states
        return after if done == updates else before if done == updates + 1 else None

    def load_optimizer_state(self, state: dict[str, Any]) -> None:
        self.shard.load_optimizer_state(self.optimizer, state)
        self._states = (0, self.shard.full_optimizer_state(self.optimizer), None)  # a copy: AdamW steps in place

    def load_weights(self, weights: Mapping[str, Any]) -> None:
        assert self.policy is not None, "setup runs first"
        self.shard.load_weights(self.policy.model, weights)

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


class LearnerGroup:
    """One policy's N ranks; stands in for its optimizer (`state_dict`, `load_state_dict`)."""

    def __init__(self, policy: Policy, plan: RunPlan, workers: int):
        import ray  # heavy: ray is optional (the train extra); only learner workers need it

        assert ray.is_initialized(), "the session starts Ray first (masdsl.runtime.actors.start_ray)"
        self._ray, self.name, self.world, self.plan = ray, policy.name, workers, plan
        self.fsdp = plan.placement.of(policy.name).learner.fsdp
        self.restarts_left = int(plan.runtime.learner_restarts)
        self.cast = master_dtype(plan) != plan.runtime.dtype  # rank 0 also returns the weights in the compute dtype
        self.updates = 0  # updates the driver kept since the actors started or loaded an optimizer state
        self._held: dict[str, Any] | None = None  # during a restart: the AdamW state the new actors get
        self.interval = (0.0, 0.0)  # wall-clock start and end of the last update (rank 0)
        self.return_s = 0.0  # last update: from rank 0's end to its new weights in the object store
        self._start(policy)

    def _start(self, policy: Policy) -> None:
        """N fresh actors in a new process group, loaded with the driver's weights of `policy`."""
        ray, plan, workers = self._ray, self.plan, self.world
        cuda = plan.runtime.device.startswith("cuda")
        host = ray.remote(num_cpus=ACTOR_CPUS, num_gpus=1 if cuda else 0, max_restarts=0, max_concurrency=2,
                          resources=slot_resources(LEARN_SLOT, 1.0))(LearnerWorker)
        threads = max(1, torch.get_num_threads() // workers)
        self.actors = [host.remote(rank, workers, threads) for rank in range(workers)]
        self.updates = 0
        try:
            (addr, port), = self._get([self.actors[0].address.remote()], START_TIMEOUT_S, "start")
            weights = ray.put(policy.state_dict())
            shell = {"name": policy.name, "spec": policy.spec, "roles": policy.roles, "model_path": policy.model_path}
            self._get([a.setup.remote(addr, port, shell, plan, weights) for a in self.actors], START_TIMEOUT_S, "start")
            self.placement = self._get([a.where.remote() for a in self.actors], START_TIMEOUT_S, "start")
        except BaseException:
            self.close()
            raise

    def restart(self, policy: Policy, log: Callable[[str], None] | None = None) -> None:
        """After a failed update: fresh actors from the driver's weights (those from before the
        step) and the AdamW state from before it (a surviving rank's copy); `runtime.learner_restarts`
        times per run, then the step fails as without restarts."""
        optimizer_state = self.state_dict()  # raises StepFailed when every rank died
        self._held = optimizer_state  # what a checkpoint saves should the restart itself fail
        self.close()
        self.restarts_left -= 1
        self._start(policy)
        self.load_state_dict(optimizer_state)
        self._held = None
        if log is not None:
            log(f"restarted {self.describe()}")

    def _get(self, refs: list[Any], timeout: float, what: str) -> list[Any]:
        try:
            return self._ray.get(refs, timeout=timeout)
        except Exception as exc:  # noqa: BLE001 - RayActorError, RayTaskError, GetTimeoutError
            reason = f"{type(exc).__name__}: {exc}".strip().splitlines()[0]
            raise StepFailed(f"learner worker of policy `{self.name}` failed ({what}): {reason}",
                             error=reason) from None

    def describe(self) -> str:
        ranks = ", ".join(f"rank {w['rank']} pid {w['pid']} on {w['ip']} (node {w['node'][:8]}, "
                          f"{w['threads']} thread{'s' if w['threads'] != 1 else ''})" for w in self.placement)
        kind = " (FSDP)" if self.fsdp else ""
        return f"learner {self.name}: {self.world} worker{'s' if self.world != 1 else ''}{kind}: {ranks}"

    def start(self, batch: UpdateBatch) -> list[Any]:
        """Submit the update to every rank (returns at once)."""
        return self.submit(batch.object_ref(), batch.advantages, batch.keep)

    def finish(self, pending: list[Any], batch: UpdateBatch, policy: Policy,
               log: Callable[[str], None] | None = None) -> tuple[UpdateStats, Any, Any]:
        """Wait for the update; one that fails is redone on a restarted group while the group has
        `restarts_left` (the driver's weights and AdamW state from before the step), then raises."""
        while True:
            try:
                return self.collect(pending)
            except StepFailed as exc:
                if self.restarts_left < 1:
                    raise
                if log is not None:
                    log(f"{exc}; restarting the group and redoing its update")
                self.restart(policy, log)
                pending = self.start(batch)

    def commit(self, result: tuple[UpdateStats, Any, Any], policy: Policy) -> UpdateStats:
        """Keep a finished update: the driver's `policy` points at the new weights (loaded into its
        model only when it needs them) and the group counts the update as kept (`updates`)."""
        stats, master, engine_ref = result
        self.updates += 1
        policy.trained_elsewhere(partial(self.fetch, master), engine_ref)
        self.return_s = time.time() - self.interval[1]
        return stats

    def submit(self, records_ref: Any, advantages: Sequence[float], keep: Sequence[bool] | None) -> list[Any]:
        adv, kp = list(advantages), None if keep is None else list(keep)
        return [a.update.options(num_returns=3).remote(records_ref, adv, kp) for a in self.actors]

    def collect(self, refs: list[Any]) -> tuple[UpdateStats, Any, Any]:
        """Wait for one submitted update: rank 0's stats, and the object-store refs of its new
        weights (master dtype) and of those the engines load (the same ref unless cast)."""
        ((stats, start, end), *_) = self._get([r[0] for r in refs], UPDATE_TIMEOUT_S, "update")
        self.interval = (start, end)
        _, master, cast = refs[0]
        return stats, master, cast if self.cast else master

    def fetch(self, ref: Any) -> dict[str, Any]:
        """Weights an update left in the object store (owned by the driver: they outlive the workers)."""
        (weights,) = self._get([ref], START_TIMEOUT_S, "fetch weights")
        return weights

    def state_dict(self) -> dict[str, Any]:
        """The optimizer state of a checkpoint or a restart: the whole AdamW state every rank copies
        to the CPU after each update (under FSDP gathered from the shards) as of the updates the
        driver kept (`updates`: not one of a failed step, whether or not a rank finished it);
        rank 0's, or any surviving rank's."""
        if self._held is not None:  # a restart that did not finish: the actors may not have it
            return self._held
        for actor in self.actors:
            try:
                state = self._ray.get(actor.optimizer_state.remote(self.updates), timeout=START_TIMEOUT_S)
            except Exception:  # noqa: BLE001 - this rank died; any other holds the same state
                continue
            if state is not None:
                return state
        raise StepFailed(f"no learner worker of policy `{self.name}` holds its optimizer state after "
                         f"{self.updates} update(s) (every one died): it is lost")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        ref = self._ray.put(state)
        self._get([a.load_optimizer_state.remote(ref) for a in self.actors], START_TIMEOUT_S, "load optimizer")
        self.updates = 0

    def load_weights(self, policy: Policy) -> None:
        ref = self._ray.put(policy.state_dict())
        self._get([a.load_weights.remote(ref) for a in self.actors], START_TIMEOUT_S, "load weights")

    def close(self) -> None:
        for actor in self.actors:
            try:
                self._ray.get(actor.close.remote(), timeout=30)
            except Exception:  # noqa: BLE001 - already dead: nothing to close
                pass
            self._ray.kill(actor, no_restart=True)

