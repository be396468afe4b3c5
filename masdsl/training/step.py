"""One AT-GRPO step: rollout -> groups -> advantages -> per-policy updates -> metrics.

    metrics = train_step(session, state, draw)     # the weights have changed; engines not yet synced

`session` is what `masdsl.training.session.open_session` built once for the run; `state` the
checkpointable `TrainState`, advanced here (step, cursor, history); `draw(cursor)` gives the
next batch of tasks and the cursor after it (the trainer's data order). Syncing the new weights
into the engines is the trainer's next, separately recoverable, phase. The step touches no file
and no engine's memory itself: the session keeps its records (`keep_records`) and puts the
engines to sleep around the update (`engines_asleep`).

**Dynamic sampling** (`train.dynamic_sampling = N`, as in DAPO and verl): while the step's
rollouts hold fewer than N non-flat groups (groups whose rewards differ: the only ones with an
advantage), another batch of tasks is drawn and rolled out, up to `train.dynamic_sampling_rounds`
rollouts in all; the update then trains on every group collected. Tasks already in the step
are skipped, so a group key (task, role, turn) never spans two rollouts. The metrics
`dynamic/rounds` and `dynamic/tasks` count what it drew.

`train.dynamic_sampling_roles = {role: share}` asks the same per role: the step also draws until
each named role holds its quota of non-flat groups, `ceil(share x that role's groups in the
step's first rollout)` (a batch's worth). Counted over all roles, a tool whose groups are all
flat is hidden by a planner whose groups differ; named, it draws (`dynamic/<role>/nonflat`
counts the role's non-flat groups at the end).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from typing import Any, Callable, Mapping, Sequence

from masdsl.envs.base import Env
from masdsl.learner.advantages import compute_advantages, select_groups
from masdsl.learner.ahead import Ahead, sample_now
from masdsl.learner.grouping import Group, group_records
from masdsl.learner.learners import update_policies
from masdsl.learner.update import UpdateBatch
from masdsl.plan.run_plan import RunPlan
from masdsl.plan.shape import rollout_shape
from masdsl.runtime.backends.base import Engine
from masdsl.runtime.episodes import merge_rollouts
from masdsl.runtime.executor import Hooks, Rollout, rollout
from masdsl.runtime.judge import judge_metrics
from masdsl.runtime.records import StepRecord
from masdsl.training.checkpoint import TrainState
from masdsl.training.metrics import role_metrics, step_metrics
from masdsl.training.session import TrainSession

Draw = Callable[[int], tuple[Sequence[dict], int]]  # cursor -> (tasks, cursor after them)


def train_step(session: TrainSession, state: TrainState, draw: Draw, ahead: Ahead | None = None) -> dict[str, float]:
    """Roll out the next tasks, update every trainable policy on its own roles' samples, record the step.
    With `ahead` (`train.async_rollout=1`) the rollout is the one sampled during the last update,
    and the next one samples during this update (`masdsl.learner.ahead`)."""
    tc, step, show = session.plan.train, state.step, session.show
    got = (ahead.rollout(step, state.cursor) if ahead is not None
           else sample_now(lambda s, c: sample_batch(session, s, draw, c), step, state.cursor))
    roll, groups, cursor, rounds, t_roll = got.roll, got.groups, got.cursor, got.rounds, got.seconds
    records = roll.records
    for r in records:  # one numbering (docs/concepts.md, "Step numbers"): the rollout of update N is step N
        r.step, r.weights_step = step + 1, got.weights_step  # the seeds stay derived from `step`: same samples, same runs
    session.keep_records(records)
    # score: advantages within each (task, role, turn) group
    adv, gstats = compute_advantages(groups, len(records), estimators=session.plan.advantages,
                                     roles=[r.role for r in records])
    kept = select_groups(groups, drop_flat=tc.drop_flat_groups, drop_lowest=tc.drop_lowest_groups)
    # update each policy on its own roles' samples
    show.status(f"step {step + 1}/{tc.steps}: update")
    t0 = time.perf_counter()
    keep = kept_rows(kept, len(records), records, frozen_roles=tc.frozen_roles)
    if ahead is not None and step + 1 < tc.steps:  # the next step's rollout samples during this update
        ahead.start(step + 1, cursor, weights_step=step)
    with session.engines_asleep():  # runtime.vllm_sleep_mode: the learner gets the engines' GPU memory
        due = {n: lr for n, lr in session.learners.items() if session.plan.trains_at(n, step + 1)}  # the schedule
        updates = update_policies(due, session.policies, UpdateBatch(records, adv, keep), log=show.log)
    t_update = time.perf_counter() - t0
    waited = ahead.wait() if ahead is not None else 0.0  # the engines sync only after the rollout ahead
    metrics = step_metrics(records, roll.episodes, gstats, updates, kept_groups=len(kept),
                           tokens=roll.tokens_generated, rollout_s=t_roll, update_s=t_update, kl_on=tc.kl_coef > 0)
    metrics["staleness"] = float(step - got.weights_step)  # updates between the sampling weights and this update's
    metrics["time/rollout_wait_s"] = waited  # the update waiting for the rollout ahead (async)
    # the rollout's engine calls and env steps, apart from its own work (records, scheduling)
    metrics["time/engine_s"], metrics["time/env_s"] = roll.gen_s, roll.env_s
    metrics.update(role_metrics(records, roll.episodes, groups, adv))
    metrics["dynamic/rounds"] = float(rounds)
    metrics["reward_errors"] = float(roll.reward_errors)  # rewards that raised, each scored 0
    metrics["env_lost"] = float(roll.env_lost)  # episodes ended by a failed env server (env http)
    metrics.update(judge_metrics(roll))  # judge(...) rewards: judge/tokens, judge/unparsed, time/judge_s
    metrics["dynamic/tasks"] = float(len({e.task_id for e in roll.episodes}))
    per_role = nonflat_by_role(groups, records)
    for role in tc.dynamic_sampling_roles or {}:
        metrics[f"dynamic/{role}/nonflat"] = float(per_role[role])
    state.step, state.cursor = step + 1, cursor
    state.history.append({"step": state.step, **metrics})
    return metrics


def sample_batch(session: TrainSession, step: int, draw: Draw, cursor: int) -> tuple[Rollout, list[Group], int, int]:
    """The step's rollout and its groups: one batch, or more under dynamic sampling; also the
    cursor after the tasks drawn and the number of rollouts."""
    tc, show = session.plan.train, session.show
    roll: Rollout | None = None
    seen: set[Any] = set()
    rounds, groups, quotas = 0, [], {}
    while True:
        tasks, cursor = draw(cursor)
        tasks = [t for t in tasks if _task_key(t) not in seen]
        seen.update(_task_key(t) for t in tasks)
        rounds += 1
        label = f"step {step + 1}/{tc.steps}: rollout" + (f" ({rounds})" if rounds > 1 else "")
        n_episodes = len(tasks) * rollout_shape(tc.grouping, tc.samples)[1]
        part = collect(session.env, tasks, session.engines, session.plan, step,
                       progress=show.counter(label, n_episodes), repeat=rounds - 1)
        # merged once each: merge_rollouts renumbers the later part's episodes in place
        roll = part if roll is None else merge_rollouts([roll, part])
        groups = group_records(roll.records, tc.grouping)
        if rounds == 1:
            quotas = role_quotas(groups, roll.records, tc.dynamic_sampling_roles or {})
        missing = shortfall(groups, roll.records, tc.dynamic_sampling, quotas)
        if not missing or rounds >= tc.dynamic_sampling_rounds:
            return roll, groups, cursor, rounds
        show.log(f"step {step + 1}: {'; '.join(missing)}; drawing {tc.batch} more tasks (dynamic sampling, "
                 f"rollout {rounds + 1} of at most {tc.dynamic_sampling_rounds})")


def nonflat_by_role(groups: Sequence[Group], records: Sequence[Any]) -> Counter:
    """Non-flat groups (rewards differ) per role; a group's role is its first record's."""
    return Counter(records[g.indices[0]].role for g in groups if len(set(g.rewards)) > 1)


def role_quotas(groups: Sequence[Group], records: Sequence[Any], shares: Mapping[str, float]) -> dict[str, int]:
    """Each named role's quota of non-flat groups: `ceil(share x its groups in this rollout)`.

    >>> from types import SimpleNamespace as R
    >>> recs = [R(role="tool"), R(role="tool"), R(role="planner")]
    >>> gs = [Group(("t", "tool", 0), ((0,),), (0.0,)), Group(("u", "tool", 0), ((1,),), (0.0,)),
    ...       Group(("t", "planner", 0), ((2,),), (0.0,))]
    >>> role_quotas(gs, recs, {"tool": 0.25, "planner": 1.0})
    {'tool': 1, 'planner': 1}
    """
    counts = Counter(records[g.indices[0]].role for g in groups)
    return {role: math.ceil(share * counts[role] - 1e-9) for role, share in shares.items()}


def shortfall(groups: Sequence[Group], records: Sequence[Any], wanted: int, quotas: Mapping[str, int]) -> list[str]:
    """What the step still lacks for dynamic sampling (empty: enough): `wanted` non-flat groups
    of all roles, and each role's quota of its own.

    >>> from types import SimpleNamespace as R
    >>> recs = [R(role="tool"), R(role="tool"), R(role="planner"), R(role="planner")]
    >>> gs = [Group(("t", "tool", 0), ((0,), (1,)), (1.0, 1.0)), Group(("t", "planner", 0), ((2,), (3,)), (0.0, 1.0))]
    >>> shortfall(gs, recs, 1, {"tool": 1})
    ['0 non-flat `tool` groups of 1 wanted']
    >>> shortfall(gs, recs, 2, {"planner": 1})
    ['1 non-flat groups of 2 wanted']
    """
    per_role = nonflat_by_role(groups, records)
    out = [f"{sum(per_role.values())} non-flat groups of {wanted} wanted"] if sum(per_role.values()) < wanted else []
    return out + [f"{per_role[role]} non-flat `{role}` groups of {quota} wanted"
                  for role, quota in quotas.items() if per_role[role] < quota]


def _task_key(task: Mapping[str, Any]) -> Any:
    return task.get("id", id(task)) if isinstance(task, Mapping) else id(task)


def kept_rows(kept: Sequence[Group], n: int, records: Sequence[StepRecord] = (),
              frozen_roles: Sequence[str] = ()) -> list[bool]:
    """Which of `n` records belong to a kept group, less those of `frozen_roles`
    (`train.frozen_roles`: they act and are scored, and never reach an update).

    >>> kept_rows([Group(("t",), ((0, 2),), (1.0,))], 4)
    [True, False, True, False]
    >>> from types import SimpleNamespace as R
    >>> kept_rows([Group(("t",), ((0, 1),), (1.0,))], 2, [R(role="a"), R(role="b")], frozen_roles=["b"])
    [True, False]
    """
    keep = [False] * n
    for g in kept:
        for i in g.indices:
            keep[i] = records[i].role not in frozen_roles if frozen_roles else True
    return keep


def collect(env: Env, tasks: Sequence[dict], engines: Mapping[str, Engine], plan: RunPlan, step: int,
            on_records: Callable[[list], None] | None = None, progress: Callable[[int], None] | None = None,
            repeat: int = 0) -> Rollout:
    """The training rollout, in the shape the grouping declares (`masdsl.plan.shape`): tree
    sampling of K candidates, or K independent episodes of every task for `trajectory`. `repeat`
    numbers a step's extra rollouts (dynamic sampling), so that each draws fresh seeds (the
    executor's `draw`: one seed stride, there)."""
    return rollout(plan, env, tasks, engines, mode="train", step=step, draw=repeat,
                   hooks=Hooks(on_records=on_records, progress=progress))
