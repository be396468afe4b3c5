"""One AT-GRPO step: rollout -> groups -> advantages -> per-policy updates -> metrics.

    metrics = train_step(session, state, step)     # the weights have changed; engines not yet synced

`session` is what `masdsl.learner.session.open_session` built once for the run; `state` the
checkpointable `TrainState`, advanced here (step, cursor, history). Syncing the new weights into
the engines is the trainer's next, separately recoverable, phase.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Sequence

from masdsl.config import Config
from masdsl.lang.workflow import Workflow
from masdsl.learner.advantages import compute_advantages, select_groups
from masdsl.learner.checkpoint import TrainState
from masdsl.learner.grouping import Group, group_records
from masdsl.learner.metrics import step_metrics
from masdsl.learner.policies import iter_trainable
from masdsl.learner.session import TrainSession
from masdsl.learner.update import UpdateStats, update_policy
from masdsl.learner.workers import update_all
from masdsl.runtime.backends.base import Engine
from masdsl.runtime.executor import Rollout, rollout
from masdsl.runtime.records import write_records
from masdsl.runtime.rundir import RECORDS


def train_step(session: TrainSession, state: TrainState, tasks: Sequence[dict], cursor: int) -> dict[str, float]:
    """Roll out `tasks`, update every trainable policy on its own roles' samples, record the step."""
    tc, step, show = session.cfg.train, state.step, session.show
    t0 = time.perf_counter()
    n_episodes = len(tasks) * (tc.samples if tc.grouping == "trajectory" else 1)
    roll = collect(session.workflow, session.env, tasks, session.engines, session.cfg, step,
                   progress=show.counter(f"step {step + 1}/{tc.steps}: rollout", n_episodes))
    t_roll = time.perf_counter() - t0
    records = roll.records
    write_records(session.run_dir / RECORDS, records)
    # group and score: (task, role, turn) groups, advantages within each group
    groups = group_records(records, tc.grouping)
    adv, gstats = compute_advantages(groups, len(records))
    kept = select_groups(groups, drop_flat=tc.drop_flat_groups, drop_lowest=tc.drop_lowest_groups)
    # update each policy on its own roles' samples
    show.status(f"step {step + 1}/{tc.steps}: update")
    t0 = time.perf_counter()
    keep = kept_rows(kept, len(records))
    updates: dict[str, UpdateStats] = {}
    session.sleep_engines()  # runtime.vllm_sleep_mode: the learner gets the engines' GPU memory
    try:
        if session.groups:  # learner workers: every policy's group at once; the driver gets the new weights
            updates = update_all(session.groups, session.policies, records, adv, keep, log=show.log)
        else:
            for p in iter_trainable(session.policies):
                updates[p.name] = update_policy(p, session.optimizers[p.name], records, adv, tc,
                                                session.references.get(p.name), keep=keep)
    finally:
        session.wake_engines()
    metrics = step_metrics(records, roll.episodes, gstats, updates, kept_groups=len(kept),
                           tokens=roll.tokens_generated, rollout_s=t_roll, update_s=time.perf_counter() - t0,
                           kl_on=tc.kl_coef > 0)
    state.step, state.cursor = step + 1, cursor
    state.history.append({"step": state.step, **metrics})
    return metrics


def kept_rows(kept: Sequence[Group], n: int) -> list[bool]:
    """Which of `n` records belong to a kept group.

    >>> kept_rows([Group(("t",), ((0, 2),), (1.0,))], 4)
    [True, False, True, False]
    """
    keep = [False] * n
    for g in kept:
        for i in g.indices:
            keep[i] = True
    return keep


def collect(workflow: Workflow, env: Any, tasks: Sequence[dict], engines: Mapping[str, Engine], cfg: Config,
            step: int, on_records: Callable[[list], None] | None = None,
            progress: Callable[[int], None] | None = None) -> Rollout:
    """The training rollout. `trajectory` grouping (vanilla GRPO) needs K independent episodes
    per task instead of tree sampling: K rollouts of one sample, with different seeds."""
    tc = cfg.train
    if tc.grouping != "trajectory":
        return rollout(workflow, env, tasks, engines, mode="train", samples=tc.samples, step=step,
                       seed=tc.seed, cfg=cfg, on_records=on_records, progress=progress)
    parts = []
    for k in range(tc.samples):
        part = rollout(workflow, env, tasks, engines, mode="train", samples=1, step=step,
                       seed=tc.seed + 1_000_003 * k, cfg=cfg, progress=progress)
        for r in part.records:
            r.episode += k * len(tasks)  # distinct episodes of the same task
        if on_records is not None:
            on_records(part.records)
        parts.append(part)
    merged = parts[0]
    for p in parts[1:]:
        merged.records += p.records
        merged.episodes += p.episodes
        merged.tokens_generated += p.tokens_generated
        merged.wall_s += p.wall_s
    return merged
