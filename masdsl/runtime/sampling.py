"""Tree sampling: score K candidates of one role step, pick the one that continues.

Each candidate of a role step is applied to its own copy of the pre-step state (`Env.apply`
returns a new state and shares what did not change) and scored
`alpha * team(state') + local(state')`. The argmax continues the episode; ties go to the
lowest index. In a parallel group each role's candidates see the other roles unchanged.

These are the pieces that run where the environment runs (in-process, in a thread, or in a
Ray task): `run_env_job` and `run_apply_chain` are plain functions of plain data.

>>> select([0.5, 1.0, 1.0, -2.0])
1
>>> combined_reward(team=0.5, local=1.0, alpha=2.0)
2.0
>>> derive_seed(0, 3, "t1", "coder", 1) == derive_seed(0, 3, "t1", "coder", 1)
True
>>> derive_seed(0, 3, "t1", "coder", 1) != derive_seed(0, 3, "t1", "coder", 2)
True
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from masdsl.envs.base import LOST_PENALTY, Env, lost
from masdsl.lang.workflow import EvalContext, Expr


def select(rewards: Sequence[float]) -> int:
    """Index of the best reward; ties to the lowest index (the first maximum).

    >>> select([1.0]), select([0.0, 0.0, 0.0]), select([-1.0, 3.0, 2.0, 3.0])
    (0, 0, 1)
    """
    best = 0
    for i, r in enumerate(rewards):
        if r > rewards[best]:
            best = i
    return best


def combined_reward(team: float | None, local: float, alpha: float) -> float:
    """`alpha * team + local`; a workflow without `team` uses the local reward only.

    >>> combined_reward(None, 0.25, 1.0), combined_reward(1.0, 0.0, 0.5)
    (0.25, 0.5)
    """
    return local if team is None else alpha * team + local


def derive_seed(seed: int, step: int, task_id: str, role: str, turn: int) -> int:
    """A per-request sampling seed from (run seed, step, task, role, turn); 31 bits.

    >>> 0 <= derive_seed(1, 0, "a", "b", 0) < 2**31
    True
    """
    key = f"{seed}\x1f{step}\x1f{task_id}\x1f{role}\x1f{turn}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:4], "big") & 0x7FFFFFFF


def as_number(value: Any) -> float:
    """A reward value as a float: bools count 1/0, None counts 0.

    >>> as_number(True), as_number(None), as_number(3)
    (1.0, 0.0, 3.0)
    >>> as_number("x")
    Traceback (most recent call last):
    ...
    TypeError: a reward must be a number or a bool, got str `x`
    """
    if value is None:
        return 0.0
    if isinstance(value, (bool, int, float)):
        return float(value)
    try:  # numpy scalars and the like
        return float(value.__float__())
    except (AttributeError, TypeError, ValueError):
        raise TypeError(f"a reward must be a number or a bool, got {type(value).__name__} `{value!s:.40}`") from None


def describe_error(what: str, expr: Expr | None, exc: BaseException) -> str:
    """One line naming the .mas position of a failing expression.

    >>> describe_error("reward", None, ZeroDivisionError("division by zero"))
    'reward raised ZeroDivisionError: division by zero'
    """
    where = ""
    if expr is not None:
        span = getattr(expr, "span", None)
        source = getattr(expr, "source", "")
        where = f"{span}: " if span is not None else ""
        what = f"{what} `{source}`" if source else what
    return f"{where}{what} raised {type(exc).__name__}: {exc}"


def evaluate_number(expr: Expr | None, ctx: EvalContext, what: str, errors: list[str]) -> float | None:
    """Evaluate a reward-like expression; a failure scores 0 and is appended to `errors`."""
    if expr is None:
        return None
    try:
        return as_number(expr.evaluate(ctx))
    except Exception as exc:  # noqa: BLE001 - a user's reward must never crash a run
        errors.append(describe_error(what, expr, exc))
        return 0.0


@dataclass
class EnvJob:
    """The K candidates of one role step, to apply and score against one pre-step state."""

    task: Mapping[str, Any]
    state: Any
    fields: Mapping[str, Mapping[str, Any]]  # every role's latest fields, before this step
    role: str
    turn: int
    candidates: list[dict[str, Any]]  # parsed fields of each candidate (with output, ok)
    reward: Expr | None = None
    team: Expr | None = None
    alpha: float = 1.0
    metrics: tuple[tuple[str, Expr], ...] = ()  # the role's `metric` lines: measured on the same view
    judged: list[dict[int, float]] = field(default_factory=list)  # per candidate: its judges' scores (runtime.judge)


@dataclass
class Outcome:
    """One scored candidate: its post-action state and reward parts."""

    state: Any
    reward: float
    team: float | None
    local: float
    errors: list[str] = field(default_factory=list)
    env_s: float = 0.0
    failed: bool = False  # the env step itself failed (after retries): scored 0
    lost: str | None = None  # the env lost the episode (`masdsl.envs.base.lost`): scored its penalty
    metrics: dict[str, float] = field(default_factory=dict)  # the role's `metric` values (never in the reward)


def run_env_job(env: Env, job: EnvJob) -> list[Outcome]:
    """Apply each candidate to its own copy of `job.state` and score it.

    Reward expressions that raise score 0 (reported in `Outcome.errors`); an exception from
    `env.apply` propagates so the caller can retry the job.
    """
    outcomes = []
    for k, cand in enumerate(job.candidates):
        t0 = time.perf_counter()
        state = env.apply(job.state, job.role, cand)
        reason = lost(state)
        if reason is not None:  # the env server failed: no view to score, the penalty instead
            penalty = float(getattr(env, "lost_penalty", LOST_PENALTY))
            outcomes.append(Outcome(state, penalty, None, penalty, [], time.perf_counter() - t0, lost=reason))
            continue
        fields = {**job.fields, job.role: cand}
        ctx = EvalContext(task=job.task, state=state, env_view=env.view(state), fields=fields, turn=job.turn, role=job.role,
                          limits=env.limits, judged=job.judged[k] if job.judged else {})
        errors: list[str] = []
        local = evaluate_number(job.reward, ctx, f"reward of `{job.role}`", errors) or 0.0
        team = evaluate_number(job.team, ctx, "team reward", errors)
        metrics = {name: evaluate_number(expr, ctx, f"metric `{name}` of `{job.role}`", errors) or 0.0 for name, expr in job.metrics}
        outcomes.append(Outcome(state, combined_reward(team, local, job.alpha), team, local, errors, time.perf_counter() - t0,
                                metrics=metrics))
    return outcomes


def failed_outcomes(job: EnvJob) -> list[Outcome]:
    """What a job that failed after all retries scores: reward 0, state unchanged."""
    return [Outcome(job.state, 0.0, None if job.team is None else 0.0, 0.0, [], 0.0, True) for _ in job.candidates]


def run_apply_chain(env: Env, state: Any, moves: Sequence[tuple[str, Mapping[str, Any]]]) -> Any:
    """Apply the winners of a parallel group one after another, in the group's role order."""
    for role, fields in moves:
        state = env.apply(state, role, fields)
    return state


def apply_chain_job(env: Env, item: tuple[Any, Sequence[tuple[str, Mapping[str, Any]]]]) -> Any:
    """`run_apply_chain` taking one (state, moves) item, the shape a worker pool maps over."""
    state, moves = item
    return run_apply_chain(env, state, moves)
