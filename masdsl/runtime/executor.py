"""The executor: walk a compiled `Workflow` for many tasks at once and record every step.

One `rollout` runs a batch of episodes in lockstep ticks (docs/concepts.md, "Execution
semantics"):

1. every active episode contributes its current node's role steps (a parallel group gives one
   per role), each rendered to prompt ids against the episode's pre-step state
   (`step_requests.py`);
2. the steps are grouped by engine and each engine gets ONE batch with all of them (K
   candidates per request in training, one in evaluation), every batch started before any is
   awaited (`batching.py`);
3. every candidate is parsed, the judges of its role's reward answer (one batch per judge
   engine for the tick: `judge.py`), then it is applied to its own copy of the state and scored
   `alpha * team + local` (in-process, in threads, or as Ray tasks) (`walk.score_steps`);
4. the argmax candidate of each role step continues (ties to the lowest index); a parallel
   group's winners are applied together in the group's role order (`walk.advance`);
5. the first edge leaving the node whose guard holds is followed (file order; no guard =
   fallback); `end` ends the episode, and so does a role about to act for the (N+1)-th time
   under `max_turns N` (truncated).

Records of an episode are released (through `on_records`) when it ends, with the episode's
success and final reward filled in. User expressions that raise (rewards, guards, success)
count as 0/False and are tallied in `Rollout.errors` with their `.mas` position.

An env call that still fails after `runtime.env_retries` retries (the env raised, or its Ray
worker died or timed out) is infrastructure, not the model: by default (`on_env_failure="fail"`,
what `masdsl run` and `masdsl eval` get) the rollout stops with `StepFailed`, naming the role,
task, turn and last error; with `"score"` the step scores 0 and is tallied like an expression
error. A malformed model output never fails a rollout: the parser's empty value is
stored, the role's `ok` is False, and the env applies it as a no-op or penalised move.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Literal, Mapping, Sequence

from masdsl.envs.base import Env, contract_problem
from masdsl.errors import UserError
from masdsl.lang.workflow import Workflow
from masdsl.plan.run_plan import DEFAULT_MAX_TOKENS, RunPlan
from masdsl.plan.shape import shape_of
from masdsl.runtime.actors import make_pool
from masdsl.runtime.backends.base import Engine, as_engines
from masdsl.runtime.batching import generate
from masdsl.runtime.episodes import MAX_STEPS, Episode, EpisodeResult, Rollout, RunState
from masdsl.runtime.judge import judge_policies
from masdsl.runtime.records import StepRecord
from masdsl.runtime.step_requests import REPEAT_SEED_STRIDE, role_steps
from masdsl.runtime.walk import advance, finish, new_episode, score_steps

__all__ = ["DEFAULT_MAX_TOKENS", "MAX_STEPS", "REPEAT_SEED_STRIDE", "EpisodeResult", "Hooks", "Rollout", "rollout"]


@dataclass(frozen=True)
class Hooks:
    """What the caller does with a rollout's output and with an env that keeps failing.

    `on_records` receives each finished episode's records (a list per tick); `progress`
    receives the number of episodes that finished in a tick. `keep_records=False` leaves
    `Rollout.records` empty (memory stays flat when `on_records` streams them to disk).
    `on_env_failure`: what an env call that still fails after `runtime.env_retries` retries
    does: `"fail"` raises `StepFailed`, `"score"` scores the step 0 (tallied in `Rollout.errors`).
    """

    on_records: Callable[[list[StepRecord]], None] | None = None
    progress: Callable[[int], None] | None = None
    keep_records: bool = True
    on_env_failure: Literal["score", "fail"] = "fail"


def rollout(
    plan: RunPlan,
    env: Env,
    tasks: Sequence[dict],
    engines: Mapping[str, Engine],
    *,
    mode: Literal["train", "eval"],
    step: int,
    draw: int = 0,
    hooks: Hooks = Hooks(),
) -> Rollout:
    """Run `plan.workflow` on every task, in the shape the plan decides (`masdsl.plan.shape`):
    training samples `train.samples` candidates per role step (a role whose `sample { }` sets its
    own `samples` gets that many), or, under `train.grouping=trajectory`, `train.samples`
    independent episodes of every task; evaluation samples one candidate per step and runs
    `train.eval_samples` episodes of every task.

    `engines`: {policy: `Engine`} (an object with only `generate` is taken too, see
    `backends.base.as_engine`). With N episodes per task, all run in the same lockstep batch
    (episode `j * len(tasks) + i` is repeat j of task i, `EpisodeResult.sample == j`).
    Seeds come from `train.seed` and one stride, `REPEAT_SEED_STRIDE`: repeat j of draw d (a
    step's d-th rollout, dynamic sampling draws more than one) samples with seeds derived from
    `train.seed + (d * N + j) * REPEAT_SEED_STRIDE`, so the draws of a step continue one repeat
    numbering and no two episodes of a step share their seeds; repeat 0 of draw 0 is exactly
    the episode a plain rollout gives. With temperature 0 the repeats are identical.
    `hooks`: what happens to records, progress and a failing env (`Hooks`).
    """
    workflow = plan.workflow
    _check_arguments(workflow, env, engines, mode=mode, on_env_failure=hooks.on_env_failure)
    t0 = time.perf_counter()
    k, repeats = shape_of(plan.train, mode)
    if repeats < 1:
        raise ValueError(f"episodes per task must be at least 1, got {repeats!r}")
    seed = plan.train.seed + REPEAT_SEED_STRIDE * repeats * int(draw)
    run = RunState(workflow, env, as_engines(engines), plan, mode, k, step, seed, None,
                   fail_on_env=hooks.on_env_failure == "fail", samples=dict(plan.samples),
                   chat_kwargs={name: dict(p.chat_template_kwargs or {}) for name, p in plan.policies.items()})
    run.pool = pool = make_pool(env, plan.runtime, plan.sandbox, max(run.k_of(name) for name in workflow.roles))
    n_tasks = len(tasks)
    results: list[EpisodeResult | None] = [None] * (n_tasks * repeats)
    records: list[StepRecord] = []
    try:
        active = [new_episode(j * n_tasks + i, task, run, repeat=j, position=i)
                  for j in range(repeats) for i, task in enumerate(tasks)]
        while active:
            _tick(active, run)
            batch = _release([ep for ep in active if ep.done], results, run, hooks.on_records, hooks.progress)
            if hooks.keep_records:
                records += batch
            active = [ep for ep in active if not ep.done]
    finally:
        pool.close()
    return Rollout(records, [r for r in results if r is not None], run.tokens, time.perf_counter() - t0,
                   run.gen_s, run.env_s, run.truncated_prompts, dict(run.errors), run.reward_errors, run.env_lost,
                   run.judge_calls, run.judge_tokens, run.judge_s, run.judge_unparsed)


def _check_arguments(workflow: Workflow, env: Env, engines: Mapping[str, Engine], *, mode: str,
                     on_env_failure: str) -> None:
    if mode not in ("train", "eval"):
        raise ValueError(f"mode must be 'train' or 'eval', got {mode!r}")
    if on_env_failure not in ("score", "fail"):
        raise ValueError(f"on_env_failure must be 'score' or 'fail', got {on_env_failure!r}")
    missing = sorted(({r.policy for r in workflow.roles.values()} | judge_policies(workflow)) - set(engines))
    if missing:
        raise UserError(f"no inference engine for polic{'ies' if len(missing) > 1 else 'y'} {', '.join(f'`{m}`' for m in missing)}")
    problem = contract_problem(env)
    if problem is not None:
        raise UserError(problem)


def _tick(active: list[Episode], run: RunState) -> None:
    """One lockstep tick: render every active episode's role steps, sample, score, advance."""
    steps = [s for ep in active if not ep.done for s in role_steps(ep, run)]
    if steps:
        generate(steps, run)
        score_steps(steps, run)
        advance(steps, run)


def _release(ended: list[Episode], results: list[EpisodeResult | None], run: RunState,
             on_records: Callable[[list[StepRecord]], None] | None,
             progress: Callable[[int], None] | None) -> list[StepRecord]:
    """Finish the episodes that ended this tick; hand their records on; return them."""
    batch: list[StepRecord] = []
    for ep in ended:
        results[ep.index] = finish(ep, run)
        batch += ep.records
    if batch and on_records is not None:
        on_records(batch)
    if ended and progress is not None:
        progress(len(ended))
    return batch
