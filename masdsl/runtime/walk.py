"""Each task's walk through the flow: score the candidates, continue the winners, follow edges.

- `score`: every candidate is parsed, applied to its own copy of the state and scored
  `alpha * team + local` (through the run's worker pool: in-process, threads or Ray tasks);
- `advance`: the argmax candidate of each role step continues (ties to the lowest index); a
  parallel group's winners are applied together in the group's role order; then the first edge
  leaving the node whose guard holds is followed (file order; no guard = fallback);
- `enter`: `end` ends the episode, and so does a role about to act for the (N+1)-th time under
  `max_turns N` (truncated);
- `finish`: an ended episode's success and final reward, filled into its records.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any, Mapping, Sequence

from masdsl.envs.base import end_episode, lost
from masdsl.errors import StepFailed
from masdsl.lang.workflow import EvalContext
from masdsl.runtime.episodes import MAX_STEPS, Episode, EpisodeResult, RoleStep, RunState
from masdsl.runtime.judge import judge_steps
from masdsl.runtime.parsing import initial_fields, json_safe, parse_output
from masdsl.runtime.records import StepRecord
from masdsl.runtime.reference import reference_fields, reference_of
from masdsl.runtime.sampling import (
    EnvJob,
    apply_chain_job,
    as_number,
    describe_error,
    evaluate_number,
    failed_outcomes,
    run_env_job,
    select,
)
from masdsl.runtime.step_requests import roles_of


def enter(ep: Episode, node: str, run: RunState) -> None:
    """Move to `node`: `end` ends the episode, and so does a role past `max_turns` (truncated)."""
    if node == "end":
        ep.done = True
        return
    limit = run.workflow.max_turns
    if ep.steps >= MAX_STEPS or (limit is not None and any(ep.turns[r] >= limit for r in roles_of(run.workflow, node))):
        ep.done = ep.truncated = True
        return
    ep.node = node


def follow(ep: Episode, run: RunState) -> None:
    """Take the first edge leaving the current node whose guard holds (no guard: fallback)."""
    wf = run.workflow
    ctx = None
    for target, guard in wf.successors(ep.node):
        if guard is not None:
            if ctx is None:
                view = run.env.view(ep.state)
                ctx = EvalContext(task=ep.task, state=ep.state, env_view=view, fields=ep.fields, turn=ep.last_turn,
                                  limits=run.env.limits)
            try:
                holds = bool(guard.evaluate(ctx))
            except Exception as exc:  # noqa: BLE001 - a failing guard is a guard that does not hold
                run.error(describe_error("guard", guard, exc))
                holds = False
            if not holds:
                continue
        return enter(ep, target, run)
    ep.done = True  # no edge holds: the flow has nowhere to go


def new_episode(index: int, task: Mapping[str, Any], run: RunState, repeat: int = 0, position: int | None = None) -> Episode:
    """A task's episode, reset and moved along the edges leaving `start`."""
    wf = run.workflow
    task_id = str(task.get("id", index if position is None else position))
    ep = Episode(index, task, task_id, run.env.reset(task), {name: initial_fields(r) for name, r in wf.roles.items()},
                 repeat=repeat)
    ep.turns = {name: 0 for name in wf.roles}
    if not lose_if_lost(ep, run):
        follow(ep, run)
    return ep


def lose_if_lost(ep: Episode, run: RunState) -> bool:
    """End the episode when its env lost it (an env server failed: `masdsl.envs.base.lost`), with
    the reason tallied in `Rollout.errors` and counted in `Rollout.env_lost`; the run goes on."""
    reason = lost(ep.state)
    if reason is None:
        return False
    ep.lost, ep.done = reason, True
    run.env_lost += 1
    run.error(f"episode of task `{ep.task_id}` lost (its step scored the env's penalty): {reason}")
    return True


def score_steps(steps: Sequence[RoleStep], run: RunState) -> None:
    """Parse every candidate, then apply and score it against its own copy of the state."""
    jobs = []
    for s in steps:
        ep = s.episode
        errors: list[str] = []
        s.fields = [parse_output(s.role, c.text, ep.task, ep.fields, s.turn, errors) for c in s.candidates]
        for e in errors:
            run.error(e)
        jobs.append(EnvJob(ep.task, ep.state, ep.fields, s.role.name, s.turn, s.fields, s.role.reward,
                           run.workflow.team, run.workflow.alpha, s.role.metrics))
    for job, judged in zip(jobs, judge_steps(steps, run)):  # one batch per judge engine for the whole tick
        job.judged = judged
    t0 = time.perf_counter()
    results = run.pool.map(run_env_job, jobs)
    run.env_s += time.perf_counter() - t0
    for s, job, (ok, value) in zip(steps, jobs, results):
        if not ok and run.fail_on_env:
            raise StepFailed(
                f"env step of `{s.role.name}` on task `{s.episode.task_id}` (turn {s.turn}) failed after "
                f"{run.plan.runtime.env_retries} retries: {value}",
                role=s.role.name, task_id=s.episode.task_id, turn=s.turn, error=str(value))
        if not ok:
            run.error(f"env step of `{s.role.name}` failed after {run.plan.runtime.env_retries} retries (scored 0): {value}")
        s.outcomes = value if ok else failed_outcomes(job)
        for o in s.outcomes:
            for e in o.errors:
                run.error(e)
            reward_errors(s, o.errors, run)


def reward_errors(s: RoleStep, errors: Sequence[str], run: RunState) -> None:
    """Count a candidate's reward errors (its `Outcome.errors`: only rewards are evaluated there);
    under `train.fail_on_reward_error` the first one stops the rollout with `StepFailed`."""
    run.reward_errors += len(errors)
    if errors and run.plan.train.fail_on_reward_error:
        raise StepFailed(
            f"{errors[0]} (task `{s.episode.task_id}`, turn {s.turn}); `train.fail_on_reward_error` stops the run "
            "on a reward that raises (without it the reward scores 0 and is counted in `reward_errors`)",
            role=s.role.name, task_id=s.episode.task_id, turn=s.turn, error=errors[0])


def records_of(s: RoleStep, run: RunState) -> list[StepRecord]:
    """One record per candidate of a scored role step."""
    ep, wf = s.episode, run.workflow
    span = wf.graph.nodes[s.node].get("span")
    return [
        StepRecord(
            step=run.step, episode=ep.index, task_id=ep.task_id, role=s.role.name, turn=s.turn, node=s.node,
            candidate=i, selected=i == s.winner, policy=s.role.policy, prompt_ids=s.request.prompt_ids,
            response_ids=list(c.token_ids), logprobs=list(c.logprobs), reward=o.reward,
            reward_team=0.0 if o.team is None else o.team, reward_local=o.local, finish_reason=c.finish_reason,
            parse_ok=bool(f["ok"]), fields=json_safe({k: v for k, v in f.items() if k != "output"}),
            prompt_text=s.prompt_text, response_text=c.text, truncated_prompt=s.truncated,
            judge=s.judge_replies[i] if s.judge_replies else [],
            source_line=getattr(span, "line", None), gen_s=s.gen_s, env_s=o.env_s, metrics=o.metrics,
        )
        for i, (c, f, o) in enumerate(zip(s.candidates, s.fields, s.outcomes))
    ]


def advance(steps: Sequence[RoleStep], run: RunState) -> None:
    """Pick each role step's winner, apply a group's winners together, then follow an edge."""
    by_ep: dict[int, list[RoleStep]] = defaultdict(list)
    for s in steps:
        s.winner = select([o.reward for o in s.outcomes])
        s.episode.records += records_of(s, run)
        by_ep[s.episode.index].append(s)
    for group in by_ep.values():
        first = group[0]
        first.episode.state = first.outcomes[first.winner].state
    apply_group_winners([g for g in by_ep.values() if len(g) > 1], run)
    for group in by_ep.values():
        ep = group[0].episode
        for s in group:
            o = s.outcomes[s.winner]
            ep.fields[s.role.name] = s.fields[s.winner]
            ep.turns[s.role.name] += 1
            ep.history.append({"role": s.role.name, "turn": s.turn, "output": s.candidates[s.winner].text,
                               "fields": s.fields[s.winner]})
            ep.rewards[(s.role.name, s.turn)] = o.reward
            ep.locals.append(o.local)
        ep.last_turn, ep.steps = max(s.turn for s in group), ep.steps + 1
        if not lose_if_lost(ep, run):
            follow(ep, run)


def apply_group_winners(groups: Sequence[Sequence[RoleStep]], run: RunState) -> None:
    """Apply the other winners of each parallel group after its first's (whose state is computed)."""
    if not groups:
        return
    chains = [(g[0].episode.state, [(s.role.name, s.fields[s.winner]) for s in g[1:]]) for g in groups]
    t0 = time.perf_counter()
    for group, (ok, value) in zip(groups, run.pool.map(apply_chain_job, chains)):
        first = group[0]
        if ok:
            first.episode.state = value
        elif run.fail_on_env:
            raise StepFailed(
                f"applying the winners of `{first.node}` on task `{first.episode.task_id}` (turn {first.turn}) "
                f"failed after {run.plan.runtime.env_retries} retries: {value}",
                role=first.role.name, task_id=first.episode.task_id, turn=first.turn, error=str(value))
        else:
            run.error(f"applying the winners of `{first.node}` failed (state kept after `{first.role.name}`): {value}")
    run.env_s += time.perf_counter() - t0


def finish(ep: Episode, run: RunState) -> EpisodeResult:
    """Score the ended episode (success, final reward) and fill its records."""
    wf = run.workflow
    errors: list[str] = []
    if ep.lost:
        return _lost_result(ep, run)
    ctx = EvalContext(task=ep.task, state=ep.state, env_view=run.env.view(ep.state), fields=ep.fields, turn=ep.last_turn,
                      limits=run.env.limits)
    if wf.success is not None:
        success = evaluate_number(wf.success, ctx, "success", errors) or 0.0
    else:
        try:
            success = as_number(run.env.success(ep.state))
        except Exception as exc:  # noqa: BLE001
            errors.append(describe_error(f"env `{wf.env}` success", None, exc))
            success = 0.0
    team = evaluate_number(wf.team, ctx, "team reward", errors)
    final = team if team is not None else (sum(ep.locals) / len(ep.locals) if ep.locals else 0.0)
    for e in errors:
        run.error(e)
    reference = reference_of(reference_fields(wf), ep.task)  # for the reader: `masdsl view`, `masdsl trace`
    for r in ep.records:
        r.episode_success, r.episode_reward, r.reference = success, final, reference
    end_episode(run.env, ep.state)
    return EpisodeResult(ep.task_id, success, team, dict(ep.turns), ep.truncated, dict(ep.rewards), ep.repeat)


def _lost_result(ep: Episode, run: RunState) -> EpisodeResult:
    """A lost episode failed: success 0, and its final reward the mean of its steps' (the last one
    the env's penalty), with no team reward (the env's view it would read is gone)."""
    final = sum(ep.locals) / len(ep.locals) if ep.locals else 0.0
    reference = reference_of(reference_fields(run.workflow), ep.task)
    for r in ep.records:
        r.episode_success, r.episode_reward, r.reference = 0.0, final, reference
    end_episode(run.env, ep.state)
    return EpisodeResult(ep.task_id, 0.0, None, dict(ep.turns), ep.truncated, dict(ep.rewards), ep.repeat, ep.lost)
