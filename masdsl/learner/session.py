"""What a training run builds once and every step uses: data, env, weights, engines, optimizers.

    session = open_session(workflow, cfg, run_dir, show)   # loads models, starts engines
    state = start_state(session, resume)                   # fresh, or the newest complete checkpoint
    ...
    session.close()                                        # engines down (always, also on failure)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from masdsl.config import Config, ConfigError
from masdsl.lang.fingerprint import fingerprint
from masdsl.lang.workflow import Workflow
from masdsl.learner import checkpoint as ckpt
from masdsl.learner.display import Progress, role_budgets
from masdsl.learner.logprobs import KLReference
from masdsl.learner.policies import Policy, iter_trainable, load_policies, sync
from masdsl.learner.workers import LearnerGroup, build_optimizer, close_groups, open_groups, references
from masdsl.runtime.backends.base import Engine
from masdsl.runtime.engine_factory import build_engines, close_engines, sleep_engines, wake_engines
from masdsl.runtime.inputs import prepare


@dataclass
class TrainSession:
    workflow: Workflow
    cfg: Config
    run_dir: Path
    show: Progress
    env: Any
    train_rows: list[dict]
    eval_rows: list[dict]
    policies: dict[str, Policy]
    engines: dict[str, Engine] = field(default_factory=dict)
    optimizers: dict[str, Any] = field(default_factory=dict)  # policy -> torch optimizer
    references: dict[str, KLReference] = field(default_factory=dict)  # policy -> its KL reference (`train.kl_coef > 0`)
    groups: dict[str, LearnerGroup] = field(default_factory=dict)  # policy -> its learner workers (learner_workers > 0)

    def sync_all(self) -> None:
        """Every trainable policy's engine samples from its current weights."""
        for p in iter_trainable(self.policies):
            sync(p, self.engines[p.name])

    def sleep_engines(self) -> None:
        """With `runtime.vllm_sleep_mode`, the engines free their GPU memory for the update."""
        if self.cfg.runtime.vllm_sleep_mode:
            sleep_engines(self.engines, level=1)

    def wake_engines(self) -> None:
        """After the update: the engines take their memory back (`sync_all` then loads the weights)."""
        if self.cfg.runtime.vllm_sleep_mode:
            wake_engines(self.engines)

    def close(self) -> None:
        try:
            close_groups(self.groups)
        finally:
            close_engines(self.engines)


def open_session(workflow: Workflow, cfg: Config, run_dir: Path, show: Progress) -> TrainSession:
    """Data and env, models, engines, optimizers (and KL references when `train.kl_coef > 0`)."""
    tc = cfg.train
    show.budgets = role_budgets(workflow, cfg)  # named in the warning when a role's replies are cut
    env, data = prepare(workflow, cfg)
    train_rows, eval_rows = data["train"], data["eval"][: tc.eval_tasks or None]
    if tc.batch > len(train_rows):  # fail before any model loads
        raise ConfigError(f"`train.batch` ({tc.batch}) is larger than the train split ({len(train_rows)} tasks)")
    policies = load_policies(workflow, cfg)
    session = TrainSession(workflow, cfg, run_dir, show, env, train_rows, eval_rows, policies)
    session.engines = build_engines(workflow, cfg, policies)
    if cfg.runtime.learner_workers > 0:  # the policies train on Ray actors; each group is its optimizer
        try:
            session.groups = open_groups(policies, cfg, show.log)
        except BaseException:
            session.close()
            raise
        session.optimizers = dict(session.groups)
        return session
    session.optimizers = {p.name: build_optimizer(p.parameters(), tc) for p in iter_trainable(policies)}
    session.references = references(policies, cfg) if tc.kl_coef > 0 else {}
    if tc.gradient_checkpointing:
        for p in iter_trainable(policies):
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
    ckpt.restore(path, policies=session.policies, optimizers=session.optimizers)
    for name, group in session.groups.items():  # the workers continue from the checkpoint's weights
        group.load_weights(session.policies[name])
    for p in session.policies.values():
        sync(p, session.engines[p.name])
    session.show.log(f"resumed from {path} at step {state.step}")
    return state
