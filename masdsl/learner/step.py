"""One AT-GRPO step: rollout -> groups -> advantages -> per-policy updates -> metrics.

    metrics = train_step(session, state, draw)     # the weights have changed; engines not yet synced

`session` is what `masdsl.learner.session.open_session` built once for the run; `state` the
checkpointable `TrainState`, advanced here (step, cursor, history); `draw(cursor)` gives the
next batch of tasks and the cursor after it (the trainer's data order). Syncing the new weights
into the engines is the trainer's next, separately recoverable, phase.

**Dynamic sampling** (`train.dynamic_sampling = N`, as in DAPO and verl): while the step's
rollouts hold fewer than N non-flat groups (groups whose rewards differ: the only ones with an
advantage), another batch of tasks is drawn and rolled out, up to `train.dynamic_sampling_rounds`
rollouts in all; the update then trains on every group collected. Tasks already in the step
are skipped, so a group key (task, role, turn) never spans two rollouts. The metrics
`dynamic/rounds` and `dynamic/tasks` count what it drew.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Sequence

from masdsl.lang.workflow import Workflow
from masdsl.learner.advantages import compute_advantages, select_groups
from masdsl.learner.checkpoint import TrainState
from masdsl.learner.grouping import Group, group_records, rollout_shape
from masdsl.learner.metrics import step_metrics
from masdsl.learner.learners import update_policies
from masdsl.learner.session import TrainSession
from masdsl.learner.update import UpdateBatch
from masdsl.runtime.backends.base import Engine
from masdsl.runtime.episodes import merge_rollouts
from masdsl.runtime.executor import Rollout, rollout
from masdsl.runtime.plan import RunPlan
from masdsl.runtime.records import write_records
from masdsl.runtime.rundir import RECORDS

Draw = Callable[[int], tuple[Sequence[dict], int]]  # cursor -> (tasks, cursor after them)


def train_step(session: TrainSession, state: TrainState, draw: Draw) -> dict[str, float]:
    """Roll out the next tasks, update every trainable policy on its own roles' samples, record the step."""
    tc, step, show = session.plan.train, state.step, session.show
    t0 = time.perf_counter()
    roll, groups, cursor, rounds = sample_batch(session, step, draw, state.cursor)
    t_roll = time.perf_counter() - t0
    records = roll.records
    write_records(session.run_dir / RECORDS, records)
    # score: advantages within each (task, role, turn) group
    adv, gstats = compute_advantages(groups, len(records))
    kept = select_groups(groups, drop_flat=tc.drop_flat_groups, drop_lowest=tc.drop_lowest_groups)
    # update each policy on its own roles' samples
    show.status(f"step {step + 1}/{tc.steps}: update")
    t0 = time.perf_counter()
    keep = kept_rows(kept, len(records))
    for r in records:  # one numbering (docs/concepts.md, "Step numbers"): the rollout of update N is step N
        r.step = step + 1  # the seeds stay derived from `step`, as before: same samples, same runs
    session.sleep_engines()  # runtime.vllm_sleep_mode: the learner gets the engines' GPU memory
    try:
        updates = update_policies(session.learners, session.policies, UpdateBatch(records, adv, keep), log=show.log)
    finally:
        session.wake_engines()
    metrics = step_metrics(records, roll.episodes, gstats, updates, kept_groups=len(kept),
                           tokens=roll.tokens_generated, rollout_s=t_roll, update_s=time.perf_counter() - t0,
                           kl_on=tc.kl_coef > 0)
    metrics["dynamic/rounds"] = float(rounds)
    metrics["dynamic/tasks"] = float(len({e.task_id for e in roll.episodes}))
    state.step, state.cursor = step + 1, cursor
    state.history.append({"step": state.step, **metrics})
    return metrics


def sample_batch(session: TrainSession, step: int, draw: Draw, cursor: int) -> tuple[Rollout, list[Group], int, int]:
    """The step's rollout and its groups: one batch, or more under dynamic sampling; also the
    cursor after the tasks drawn and the number of rollouts."""
    tc, show = session.plan.train, session.show
    parts: list[Rollout] = []
    seen: set[Any] = set()
    rounds, groups = 0, []
    while True:
        tasks, cursor = draw(cursor)
        tasks = [t for t in tasks if _task_key(t) not in seen]
        seen.update(_task_key(t) for t in tasks)
        rounds += 1
        label = f"step {step + 1}/{tc.steps}: rollout" + (f" ({rounds})" if rounds > 1 else "")
        n_episodes = len(tasks) * rollout_shape(tc.grouping, tc.samples)[1]
        parts.append(collect(session.workflow, session.env, tasks, session.engines, session.plan, step,
                             progress=show.counter(label, n_episodes), repeat=rounds - 1))
        roll = merge_rollouts(parts) if len(parts) > 1 else parts[0]
        groups = group_records(roll.records, tc.grouping)
        nonflat = sum(len(set(g.rewards)) > 1 for g in groups)
        if not tc.dynamic_sampling or nonflat >= tc.dynamic_sampling or rounds >= tc.dynamic_sampling_rounds:
            return roll, groups, cursor, rounds
        show.log(f"step {step + 1}: {nonflat} non-flat groups of {tc.dynamic_sampling} wanted; drawing "
                 f"{tc.batch} more tasks (dynamic sampling, rollout {rounds + 1} of at most "
                 f"{tc.dynamic_sampling_rounds})")


def _task_key(task: Mapping[str, Any]) -> Any:
    return task.get("id", id(task)) if isinstance(task, Mapping) else id(task)


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


def collect(workflow: Workflow, env: Any, tasks: Sequence[dict], engines: Mapping[str, Engine], plan: RunPlan,
            step: int, on_records: Callable[[list], None] | None = None,
            progress: Callable[[int], None] | None = None, repeat: int = 0) -> Rollout:
    """The training rollout, in the shape the grouping declares (`grouping.rollout_shape`): tree
    sampling of K candidates, or K independent episodes of every task for `trajectory`. `repeat`
    numbers a step's extra rollouts (dynamic sampling), so that each draws fresh seeds."""
    samples, repeats = rollout_shape(plan.train.grouping, plan.train.samples)
    return rollout(workflow, env, tasks, engines, mode="train", samples=samples, repeats=repeats, step=step,
                   seed=plan.train.seed + 7_919 * repeat, plan=plan, on_records=on_records, progress=progress)
