"""The executor: walk a compiled `Workflow` for many tasks at once and record every step.

One `rollout` runs a batch of episodes in lockstep ticks (DESIGN.md §4):

1. every active episode contributes its current node's role steps (a parallel group gives one
   per role), each rendered to prompt ids against the episode's pre-step state;
2. the steps are grouped by engine and each engine gets ONE `generate` call with all of them
   (K candidates per request in training, one in evaluation);
3. every candidate is parsed, applied to its own copy of the state and scored
   `alpha * team + local` (in-process, in threads, or as Ray tasks);
4. the argmax candidate of each role step continues (ties to the lowest index); a parallel
   group's winners are applied together in the group's role order;
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

import dataclasses
import logging
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Mapping, Sequence

from masdsl.errors import StepFailed, UserError
from masdsl.lang.workflow import EvalContext, RoleSpec, Workflow
from masdsl.runtime import prompts
from masdsl.runtime.backends.base import Candidate, GenRequest
from masdsl.runtime.parsing import initial_fields, json_safe, parse_output
from masdsl.runtime.records import StepRecord
from masdsl.runtime.sampling import (
    EnvJob,
    Outcome,
    as_number,
    derive_seed,
    describe_error,
    evaluate_number,
    failed_outcomes,
    run_env_job,
    select,
)

log = logging.getLogger(__name__)

MAX_STEPS = 10_000  # per episode: a safety net for flows the checker let through without max_turns
DEFAULT_MAX_TOKENS = 256


@dataclass
class EpisodeResult:
    task_id: str
    success: float
    team_reward: float | None
    turns: dict[str, int]  # how many times each role acted
    truncated: bool  # ended by max_turns rather than by reaching `end`
    rewards_by_role_turn: dict[tuple[str, int], float]  # reward of the selected candidate
    sample: int = 0  # which of the `repeats` independent episodes of this task (0-based)


@dataclass
class Rollout:
    records: list[StepRecord]
    episodes: list[EpisodeResult]
    tokens_generated: int
    wall_s: float
    gen_s: float
    env_s: float
    truncated_prompts: int
    errors: dict[str, int] = field(default_factory=dict)  # failing expression / env step -> count


@dataclass
class _Episode:
    index: int
    task: Mapping[str, Any]
    task_id: str
    state: Any
    fields: dict[str, dict[str, Any]]
    node: str = "start"
    turns: dict[str, int] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    records: list[StepRecord] = field(default_factory=list)
    rewards: dict[tuple[str, int], float] = field(default_factory=dict)
    locals: list[float] = field(default_factory=list)
    last_turn: int = 0
    steps: int = 0
    done: bool = False
    truncated: bool = False
    repeat: int = 0  # which independent episode of this task (rollout's `repeats`)


@dataclass
class _RoleStep:
    episode: _Episode
    role: RoleSpec
    node: str
    turn: int
    request: GenRequest
    prompt_text: str
    truncated: bool
    candidates: list[Candidate] = field(default_factory=list)
    fields: list[dict[str, Any]] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    gen_s: float = 0.0
    winner: int = 0


@dataclass
class _Run:
    workflow: Workflow
    env: Any
    engines: Mapping[str, Any]
    cfg: Any
    mode: str
    k: int
    step: int
    seed: int
    pool: Any
    tokens: int = 0
    gen_s: float = 0.0
    env_s: float = 0.0
    truncated_prompts: int = 0
    errors: Counter = field(default_factory=Counter)
    fail_on_env: bool = False  # an env call failing after its retries raises StepFailed
    samples: dict[str, dict[str, Any]] = field(default_factory=dict)  # role -> effective `sample { }`
    chat_kwargs: dict[str, dict[str, Any]] = field(default_factory=dict)  # policy -> chat_template_kwargs

    def error(self, message: str) -> None:
        if message not in self.errors:
            log.warning("%s", message)
        self.errors[message] += 1


# -- the flow --------------------------------------------------------------------------------


def _roles_of(workflow: Workflow, node: str) -> tuple[str, ...]:
    return tuple(workflow.graph.nodes[node].get("roles") or (node,))


def _enter(ep: _Episode, node: str, run: _Run) -> None:
    """Move to `node`: `end` ends the episode, and so does a role past `max_turns` (truncated)."""
    if node == "end":
        ep.done = True
        return
    limit = run.workflow.max_turns
    if ep.steps >= MAX_STEPS or (limit is not None and any(ep.turns[r] >= limit for r in _roles_of(run.workflow, node))):
        ep.done = ep.truncated = True
        return
    ep.node = node


def _follow(ep: _Episode, run: _Run) -> None:
    """Take the first edge leaving the current node whose guard holds (no guard: fallback)."""
    wf = run.workflow
    ctx = None
    for target, guard in wf.successors(ep.node):
        if guard is not None:
            if ctx is None:
                view = run.env.view(ep.state)
                ctx = EvalContext(task=ep.task, state=ep.state, env_view=view, fields=ep.fields, turn=ep.last_turn)
            try:
                holds = bool(guard.evaluate(ctx))
            except Exception as exc:  # noqa: BLE001 - a failing guard is a guard that does not hold
                run.error(describe_error("guard", guard, exc))
                holds = False
            if not holds:
                continue
        return _enter(ep, target, run)
    ep.done = True  # no edge holds: the flow has nowhere to go


def _new_episode(index: int, task: Mapping[str, Any], run: _Run, repeat: int = 0, position: int | None = None) -> _Episode:
    wf = run.workflow
    task_id = str(task.get("id", index if position is None else position))
    ep = _Episode(index, task, task_id, run.env.reset(task), {name: initial_fields(r) for name, r in wf.roles.items()},
                  repeat=repeat)
    ep.turns = {name: 0 for name in wf.roles}
    _follow(ep, run)
    return ep


# -- one tick ----------------------------------------------------------------------------------


# -- sampling options and chat templates -----------------------------------------------------

REPEAT_SEED_STRIDE = 1_000_003  # repeat j of a task samples with run seed + j * stride (as the trainer's K rollouts)


def role_sample(workflow: Workflow, cfg: Any, role: str) -> dict[str, Any]:
    """The role's `sample { }` block with the config's `sample.<role>.*` overrides applied.

    >>> from types import SimpleNamespace
    >>> from masdsl.config import resolve_config
    >>> wf = SimpleNamespace(roles={"coder": RoleSpec("coder", "p", "", sample={"max_tokens": 64, "top_p": 0.9})})
    >>> role_sample(wf, resolve_config(overrides=["sample.coder.max_tokens=8"]), "coder")
    {'max_tokens': 8, 'top_p': 0.9}
    """
    out = dict(workflow.roles[role].sample or {})
    override = (getattr(cfg, "sample", None) or {}).get(role)
    if override is not None:
        items = dataclasses.asdict(override).items() if dataclasses.is_dataclass(override) else dict(override).items()
        out.update({k: v for k, v in items if v is not None})
    return out


def chat_template_kwargs(workflow: Workflow, cfg: Any, policy: str) -> dict[str, Any]:
    """The policy's `chat_template_kwargs`: the `.mas` block's, then `policy.<name>.chat_template_kwargs`.

    >>> from types import SimpleNamespace
    >>> from masdsl.config import resolve_config
    >>> from masdsl.lang.workflow import PolicySpec
    >>> wf = SimpleNamespace(policies={"p": PolicySpec("p", "m", chat_template_kwargs={"enable_thinking": True, "x": 1})})
    >>> chat_template_kwargs(wf, resolve_config(overrides=["policy.p.chat_template_kwargs.enable_thinking=false"]), "p")
    {'enable_thinking': False, 'x': 1}
    """
    spec = workflow.policies.get(policy)
    out = dict(getattr(spec, "chat_template_kwargs", None) or {})
    override = (getattr(cfg, "policy", None) or {}).get(policy)
    out.update(getattr(override, "chat_template_kwargs", None) or {})
    return out


def _request(ep: _Episode, role: RoleSpec, turn: int, ids: list[int], run: _Run) -> GenRequest:
    """One role step's request; every `sample { }` option (`masdsl.lang.check.SAMPLE_KEYS`) is used.

    In evaluation the temperature is `train.eval_temperature` (0: greedy). `seed` in a role's
    `sample { }` is folded into that role's request seeds (other roles keep theirs).
    """
    sample = run.samples.get(role.name)
    if sample is None:
        sample = dict(role.sample or {})
    temperature = sample.get("temperature", 1.0) if run.mode == "train" else run.cfg.train.eval_temperature
    base = run.seed + REPEAT_SEED_STRIDE * ep.repeat
    if sample.get("seed") is not None:
        base = derive_seed(base, int(sample["seed"]), "", "sample.seed", 0)
    return GenRequest(
        prompt_ids=ids,
        n=run.k,
        temperature=float(temperature),
        top_p=float(sample.get("top_p", 1.0)),
        max_tokens=int(sample.get("max_tokens", DEFAULT_MAX_TOKENS)),
        stop=list(sample.get("stop", ())),
        seed=derive_seed(base, run.step, ep.task_id, role.name, turn),
        key=(ep.task_id, role.name, turn),
        top_k=int(sample.get("top_k", 0)),
        min_p=float(sample.get("min_p", 0.0)),
        repetition_penalty=float(sample.get("repetition_penalty", 1.0)),
    )


def _role_steps(ep: _Episode, run: _Run) -> list[_RoleStep]:
    """The prompts of the current node's roles, all rendered against the pre-step state."""
    view = run.env.view(ep.state)
    steps = []
    for name in _roles_of(run.workflow, ep.node):
        role = run.workflow.roles[name]
        turn = ep.turns[name]
        where = f"{role.prompt_span or role.span or run.workflow.name}: prompt of role `{name}` (task `{ep.task_id}`, turn {turn})"
        variables = prompts.prompt_variables(ep.task, view, turn, name, ep.fields, ep.history)
        messages = prompts.messages_for(role.prompt, role.system, variables, where)
        tokenizer = getattr(run.engines[role.policy], "tokenizer", None)
        ids, text, cut = prompts.encode(
            tokenizer, messages, max_tokens=run.cfg.runtime.max_prompt_tokens,
            truncate=run.cfg.runtime.truncate_prompts, where=where, chat_kwargs=run.chat_kwargs.get(role.policy),
        )
        run.truncated_prompts += cut
        steps.append(_RoleStep(ep, role, ep.node, turn, _request(ep, role, turn, ids, run), text, cut))
    return steps


def _generate(steps: Sequence[_RoleStep], run: _Run) -> None:
    """One generate call per engine with every pending request (engines in Ray run concurrently)."""
    t0 = time.perf_counter()
    by_engine: dict[int, list[_RoleStep]] = defaultdict(list)
    for s in steps:
        by_engine[id(run.engines[s.role.policy])].append(s)
    pending = []
    for group in by_engine.values():
        engine = run.engines[group[0].role.policy]
        requests = [s.request for s in group]
        if hasattr(engine, "submit"):  # a remote engine: start all, then collect
            pending.append((engine, group, engine.submit(requests), time.perf_counter()))
        else:
            start = time.perf_counter()
            _assign(group, engine.generate(requests), time.perf_counter() - start, run)
    for engine, group, handle, start in pending:
        _assign(group, engine.collect(handle), time.perf_counter() - start, run)
    run.gen_s += time.perf_counter() - t0


def _assign(group: Sequence[_RoleStep], results: list[list[Candidate]], call_s: float, run: _Run) -> None:
    if len(results) != len(group) or any(len(c) != s.request.n for s, c in zip(group, results)):
        raise RuntimeError(f"engine for policy `{group[0].role.policy}` returned the wrong number of candidates")
    share = call_s / max(1, sum(s.request.n for s in group))
    for s, cands in zip(group, results):
        s.candidates, s.gen_s = list(cands), share
        run.tokens += sum(len(c.token_ids) for c in cands)


def _score(steps: Sequence[_RoleStep], run: _Run) -> None:
    """Parse every candidate, then apply and score it against its own copy of the state."""
    jobs = []
    for s in steps:
        ep, errors = s.episode, []
        s.fields = [parse_output(s.role, c.text, ep.task, ep.fields, s.turn, errors) for c in s.candidates]
        for e in errors:
            run.error(e)
        jobs.append(EnvJob(ep.task, ep.state, ep.fields, s.role.name, s.turn, s.fields, s.role.reward,
                           run.workflow.team, run.workflow.alpha))
    t0 = time.perf_counter()
    results = run.pool.map(run_env_job, jobs)
    run.env_s += time.perf_counter() - t0
    for s, job, (ok, value) in zip(steps, jobs, results):
        if not ok and run.fail_on_env:
            raise StepFailed(
                f"env step of `{s.role.name}` on task `{s.episode.task_id}` (turn {s.turn}) failed after "
                f"{run.cfg.runtime.env_retries} retries: {value}",
                role=s.role.name, task_id=s.episode.task_id, turn=s.turn, error=str(value))
        if not ok:
            run.error(f"env step of `{s.role.name}` failed after {run.cfg.runtime.env_retries} retries (scored 0): {value}")
        s.outcomes = value if ok else failed_outcomes(job)
        for o in s.outcomes:
            for e in o.errors:
                run.error(e)


def _records(s: _RoleStep, run: _Run) -> list[StepRecord]:
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
            source_line=getattr(span, "line", None), gen_s=s.gen_s, env_s=o.env_s,
        )
        for i, (c, f, o) in enumerate(zip(s.candidates, s.fields, s.outcomes))
    ]


def _advance(steps: Sequence[_RoleStep], run: _Run) -> None:
    """Pick each role step's winner, apply a group's winners together, then follow an edge."""
    by_ep: dict[int, list[_RoleStep]] = defaultdict(list)
    for s in steps:
        s.winner = select([o.reward for o in s.outcomes])
        s.episode.records += _records(s, run)
        by_ep[s.episode.index].append(s)
    chains, chained = [], []
    for group in by_ep.values():
        first = group[0]
        group[0].episode.state = first.outcomes[first.winner].state
        if len(group) > 1:  # winners of a parallel group: the first's state is already computed
            chains.append((first.episode.state, [(s.role.name, s.fields[s.winner]) for s in group[1:]]))
            chained.append(group)
    if chains:
        t0 = time.perf_counter()
        from masdsl.runtime.sampling import apply_chain_job

        for group, (ok, value) in zip(chained, run.pool.map(apply_chain_job, chains)):
            if ok:
                group[0].episode.state = value
            elif run.fail_on_env:
                first = group[0]
                raise StepFailed(
                    f"applying the winners of `{first.node}` on task `{first.episode.task_id}` (turn {first.turn}) "
                    f"failed after {run.cfg.runtime.env_retries} retries: {value}",
                    role=first.role.name, task_id=first.episode.task_id, turn=first.turn, error=str(value))
            else:
                run.error(f"applying the winners of `{group[0].node}` failed (state kept after `{group[0].role.name}`): {value}")
        run.env_s += time.perf_counter() - t0
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
        _follow(ep, run)


def _finish(ep: _Episode, run: _Run) -> EpisodeResult:
    """Score the ended episode (success, final reward) and fill its records."""
    wf, errors = run.workflow, []
    ctx = EvalContext(task=ep.task, state=ep.state, env_view=run.env.view(ep.state), fields=ep.fields, turn=ep.last_turn)
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
    for r in ep.records:
        r.episode_success, r.episode_reward = success, final
    return EpisodeResult(ep.task_id, success, team, dict(ep.turns), ep.truncated, dict(ep.rewards), ep.repeat)


# -- the public entry point ------------------------------------------------------------------------


def rollout(
    workflow: Workflow,
    env: Any,
    tasks: list[dict],
    engines: Mapping[str, Any],
    *,
    mode: Literal["train", "eval"],
    samples: int,
    step: int,
    seed: int,
    cfg: Any,
    on_records: Callable[[list[StepRecord]], None] | None = None,
    progress: Callable[[int], None] | None = None,
    keep_records: bool = True,
    on_env_failure: Literal["score", "fail"] = "fail",
    repeats: int = 1,
) -> Rollout:
    """Run one episode per task; `samples` candidates per role step in training, one in eval.

    `repeats` N > 1 runs N independent episodes of every task, all in the same lockstep batch
    (episode `j * len(tasks) + i` is repeat j of task i, `EpisodeResult.sample == j`); repeat j
    samples with seeds derived from `seed + j * REPEAT_SEED_STRIDE`, so repeat 0 is exactly
    the episode a plain rollout gives. With temperature 0 the repeats are identical.

    `on_records` receives each finished episode's records (a list per tick); `progress`
    receives the number of episodes that finished in a tick. `keep_records=False` leaves
    `Rollout.records` empty (memory stays flat when `on_records` streams them to disk).
    `on_env_failure`: what an env call that still fails after `runtime.env_retries` retries
    does: `"fail"` raises `StepFailed`, `"score"` scores the step 0 (tallied in `Rollout.errors`).
    """
    if mode not in ("train", "eval"):
        raise ValueError(f"mode must be 'train' or 'eval', got {mode!r}")
    if on_env_failure not in ("score", "fail"):
        raise ValueError(f"on_env_failure must be 'score' or 'fail', got {on_env_failure!r}")
    missing = sorted({r.policy for r in workflow.roles.values()} - set(engines))
    if missing:
        raise UserError(f"no inference engine for polic{'ies' if len(missing) > 1 else 'y'} {', '.join(f'`{m}`' for m in missing)}")
    from masdsl.config import check_names
    from masdsl.runtime.actors import make_pool

    check_names(cfg, workflow)  # `sample.<role>` / `policy.<name>` naming nothing would be ignored
    t0 = time.perf_counter()
    if int(repeats) < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats!r}")
    k = max(1, int(samples)) if mode == "train" else 1
    run = _Run(workflow, env, engines, cfg, mode, k, step, seed, None, fail_on_env=on_env_failure == "fail",
               samples={name: role_sample(workflow, cfg, name) for name in workflow.roles},
               chat_kwargs={name: chat_template_kwargs(workflow, cfg, name) for name in workflow.policies})
    run.pool = pool = make_pool(env, cfg, k)
    n_tasks = len(tasks)
    results: list[EpisodeResult | None] = [None] * (n_tasks * int(repeats))
    records: list[StepRecord] = []
    try:
        active = [_new_episode(j * n_tasks + i, task, run, repeat=j, position=i)
                  for j in range(int(repeats)) for i, task in enumerate(tasks)]
        while active:
            steps = [s for ep in active if not ep.done for s in _role_steps(ep, run)]
            if steps:
                _generate(steps, run)
                _score(steps, run)
                _advance(steps, run)
            ended = [ep for ep in active if ep.done]
            batch = []
            for ep in ended:
                results[ep.index] = _finish(ep, run)
                batch += ep.records
            if keep_records:
                records += batch
            if batch and on_records is not None:
                on_records(batch)
            if ended and progress is not None:
                progress(len(ended))
            active = [ep for ep in active if not ep.done]
    finally:
        pool.close()
    return Rollout(records, [r for r in results if r is not None], run.tokens, time.perf_counter() - t0,
                   run.gen_s, run.env_s, run.truncated_prompts, dict(run.errors))


def metrics(ro: Rollout, split: str = "eval") -> dict[str, float]:
    """Flat metrics of a rollout, named as the tracker and `masdsl eval` use them.

    `success/<split>`, `reward/<role>/turn<t>` (mean reward of the selected candidates),
    `episodes`, `tokens_generated`, `tokens_per_s` (over wall time), `wall_s`, `gen_s`, `env_s`,
    `truncated_episodes`, `truncated_prompts`, `expression_errors`.
    """
    n = len(ro.episodes)
    by_key: dict[tuple[str, int], list[float]] = defaultdict(list)
    for e in ro.episodes:
        for key, value in e.rewards_by_role_turn.items():
            by_key[key].append(value)
    out = {f"success/{split}": sum(e.success for e in ro.episodes) / n if n else 0.0}
    for (role, turn), values in sorted(by_key.items()):
        out[f"reward/{role}/turn{turn}"] = sum(values) / len(values)
    out.update(
        episodes=float(n), tokens_generated=float(ro.tokens_generated),
        tokens_per_s=ro.tokens_generated / ro.wall_s if ro.wall_s > 0 else 0.0,
        wall_s=ro.wall_s, gen_s=ro.gen_s, env_s=ro.env_s,
        truncated_episodes=float(sum(e.truncated for e in ro.episodes)),
        truncated_prompts=float(ro.truncated_prompts), expression_errors=float(sum(ro.errors.values())),
    )
    return out
