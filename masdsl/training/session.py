"""What a training run builds once and every step uses: data, env, weights, engines, optimizers.

    session = open_session(plan, run_dir, show)            # loads models, starts Ray (if placed there), engines, learners
    state = start_state(session, resume)                   # fresh, or the newest complete checkpoint
    ...
    session.close()                                        # engines down (always, also on failure)
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

from masdsl.envs.base import Env
from masdsl.lang.fingerprint import fingerprint
from masdsl.lang.workflow import Workflow
from masdsl.learner.ahead import refuse_random_updates
from masdsl.learner.learners import Learner, close_learners, open_learners
from masdsl.learner.policies import Policy, iter_trainable, load_policies, sync
from masdsl.plan.run_plan import RunPlan
from masdsl.runtime.actors import start_ray
from masdsl.runtime.backends.base import Engine
from masdsl.runtime.engine_factory import build_engines, close_engines, sleep_engines, wake_engines
from masdsl.runtime.inputs import prepare
from masdsl.runtime.records import StepRecord
from masdsl.runtime.rundir import RunDir
from masdsl.training import checkpoint as ckpt
from masdsl.training.display import Progress, role_budgets


@dataclass
class TrainSession:
    workflow: Workflow
    plan: RunPlan
    run_dir: RunDir
    show: Progress
    env: Env
    train_rows: list[dict]
    eval_rows: list[dict]
    policies: dict[str, Policy]
    engines: dict[str, Engine] = field(default_factory=dict)
    learners: dict[str, Learner] = field(default_factory=dict)  # trainable policy -> its optimizer, where it trains

    def sync_all(self) -> None:
        """Every trainable policy's engine samples from its current weights."""
        for p in iter_trainable(self.policies):
            sync(p, self.engines[p.name])

    def keep_records(self, records: Sequence[StepRecord]) -> None:
        """Append a step's records to the run folder's records.jsonl (before its update, so a step
        that fails keeps what it sampled)."""
        self.run_dir.write_records(records)

    @contextlib.contextmanager
    def engines_asleep(self) -> Iterator[None]:
        """The update's span: with `runtime.vllm_sleep_mode` the engines free their GPU memory for
        the learner, and take it back after, whatever the update raised."""
        self.sleep_engines()
        try:
            yield
        finally:
            self.wake_engines()

    def sleep_engines(self) -> None:
        """With `runtime.vllm_sleep_mode`, the engines free their GPU memory for the update."""
        if self.plan.runtime.vllm_sleep_mode:
            sleep_engines(self.engines, level=1)

    def wake_engines(self) -> None:
        """After the update: the engines take their memory back (`sync_all` then loads the weights)."""
        if self.plan.runtime.vllm_sleep_mode:
            wake_engines(self.engines)

    def save_checkpoint(self, state: ckpt.TrainState) -> Path:
        """A checkpoint of `state` with every policy's weights, optimizer and RNG, and the plan's
        configuration (what `--resume` continues with): the trainer's every M steps and what a
        failed step saves (`masdsl.training.recovery.Recovery`)."""
        return ckpt.save(self.run_dir.path, state, policies=self.policies, optimizers=self.learners,
                         config_yaml=self.plan.record().yaml)

    def close(self) -> None:
        try:
            close_learners(self.learners)
        finally:
            close_engines(self.engines)


def open_session(plan: RunPlan, run_dir: RunDir, show: Progress) -> TrainSession:
    """Data and env, models, engines, and a learner per trainable policy (`open_learners`)."""
    tc, workflow = plan.train, plan.workflow
    show.budgets = role_budgets(plan)  # named in the warning when a role's replies are cut
    show.micro_batch_tokens = plan.train.micro_batch_tokens  # named when a prompt group does not fit it
    env, data = prepare(workflow, plan.sandbox)
    train_rows, eval_rows = data["train"], data["eval"][: tc.eval_tasks or None]
    plan.check_train_split(len(train_rows))  # fail before any model loads
    policies = load_policies(plan)
    if tc.async_rollout:
        refuse_random_updates(policies)
    session = TrainSession(workflow, plan, run_dir, show, env, train_rows, eval_rows, policies)
    start_ray(plan)
    session.engines = build_engines(plan, policies)
    try:
        session.learners = open_learners(policies, plan, show.log)
    except BaseException:
        session.close()
        raise
    if tc.gradient_checkpointing:  # workers set it on their own copies
        for p in (q for q in iter_trainable(policies) if plan.placement.of(q.name).learner.where == "driver"):
            p.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return session


def start_state(session: TrainSession, resume: str | Path | None) -> ckpt.TrainState:
    """A fresh `TrainState`, or the newest complete checkpoint of `resume` loaded into the session."""
    wf = session.workflow
    if resume is None:
        return ckpt.TrainState.fresh(wf)
    path = ckpt.find(resume)
    state = ckpt.read_state(path, wf)
    # the file may differ in comments and layout (or the checkpoint predate fingerprints): the
    # checkpoints from here on describe the file this run continues with
    state.workflow_hash, state.workflow_fingerprint = wf.file_hash, fingerprint(wf)
    ckpt.restore(path, policies=session.policies, optimizers=session.learners)
    for name, learner in session.learners.items():  # learner workers continue from the checkpoint's weights
        learner.load_weights(session.policies[name])
    for p in session.policies.values():
        sync(p, session.engines[p.name])
    session.show.log(f"resumed from {path} at step {state.step}")
    return state
