"""The judges of a tick: every `judge(...)` of the acting roles' rewards, sampled in one batch.

After a tick's candidates are parsed (`walk.score_steps`) and before they are scored, each
candidate of a role whose `reward` calls `judge(POLICY, "template", ...)` gets one judge prompt:
the template rendered with the role prompt's variables against the pre-step state the role saw
(`task`, `env`, `turn`, `role`, `history`, every role's latest fields with this role's replaced
by the candidate's), plus `output` (the candidate's reply) and the role's own fields as bare
names. The prompts go to the judge policies' engines as one batch per engine (every batch
submitted before any is awaited, as `batching.generate` does), each request one greedy (by
default) reply of at most `max_tokens` tokens, with a seed derived per (task, role, turn,
candidate) and the replay key `(task, "judge:ROLE", turn)`. Each reply is read as a number
(`masdsl.lang.judge.score_of`); one that does not parse scores the judge's `default` and is
counted. The scores reach the reward through `EvalContext.judged` (call offset -> score).

The tallies (`RunState.judge_*`) become `Rollout.judge_tokens`, `judge_s`, `judge_calls`,
`judge_unparsed`, and the step metrics `judge/tokens`, `judge/calls`, `judge/unparsed`,
`time/judge_s`, with `judge/score` and `judge/restated` read from the records (`judge_metrics`). Judge tokens are not in `tokens/generated` (the policies').
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any, Callable, Sequence

from masdsl.errors import UserError
from masdsl.lang.exprs import resolve_function
from masdsl.lang.judge import SCORE_PARSES, JudgeSpec, restated, score_of
from masdsl.runtime import prompts
from masdsl.lang.workflow import Workflow
from masdsl.runtime.backends.base import Candidate, GenRequest
from masdsl.runtime.episodes import RoleStep, Rollout, RunState
from masdsl.runtime.sampling import derive_seed
from masdsl.runtime.step_requests import REPEAT_SEED_STRIDE


class _Ask:
    """One judge prompt: which candidate of which step, which judge, and its request."""

    def __init__(self, step: int, cand: int, spec: JudgeSpec, request: GenRequest, prompt: str):
        self.step, self.cand, self.spec, self.request, self.prompt = step, cand, spec, request, prompt


def judge_steps(steps: Sequence[RoleStep], run: RunState) -> list[list[dict[int, float]]]:
    """For each step, for each candidate: {judge call offset: score}. Also fills each step's
    `judge_replies` (per candidate, what the judges said) and the run's judge tallies."""
    scores: list[list[dict[int, float]]] = [[{} for _ in s.candidates] for s in steps]
    asks = [a for i, s in enumerate(steps) if s.role.judges for a in _asks(i, s, run)]
    if not asks:
        return scores
    t0 = time.perf_counter()
    by_engine: dict[int, list[_Ask]] = defaultdict(list)
    for a in asks:
        by_engine[id(run.engines[a.spec.policy])].append(a)
    calls = [(group, run.engines[group[0].spec.policy].submit([a.request for a in group])) for group in by_engine.values()]
    for group, call in calls:
        results = call.result()
        if len(results) != len(group) or any(len(r) != 1 for r in results):
            raise RuntimeError(f"the engine of judge policy `{group[0].spec.policy}` returned the wrong number of replies")
        for a, (reply,) in zip(group, results):
            _score(a, reply, steps, scores, run)
    run.judge_s += time.perf_counter() - t0
    return scores


def _score(a: _Ask, reply: Candidate, steps: Sequence[RoleStep], scores: list[list[dict[int, float]]], run: RunState) -> None:
    value = score_of(reply.text, a.spec.parse, parser_of(a.spec.parse, run.workflow))
    run.judge_calls += 1
    run.judge_tokens += len(reply.token_ids)
    run.judge_unparsed += value is None
    score = a.spec.default if value is None else value
    scores[a.step][a.cand][a.spec.key] = score
    entry = {"policy": a.spec.policy, "line": getattr(a.spec.span, "line", None), "prompt": a.prompt,
             "reply": reply.text, "parsed": value is not None, "score": score, "tokens": len(reply.token_ids)}
    equation = restated(reply.text, value, a.spec.parse)
    if equation is not None:  # the score came from (or, under `auto`, passed over) a restated equation
        entry["restated"], entry["parse"] = equation, a.spec.parse
    steps[a.step].judge_replies[a.cand].append(entry)


def _asks(index: int, s: RoleStep, run: RunState) -> list[_Ask]:
    """The judge prompts of one role step: one per (judge call, candidate)."""
    ep, role = s.episode, s.role
    view = run.env.view(ep.state)
    s.judge_replies = [[] for _ in s.candidates]
    out = []
    for spec in role.judges:
        engine = run.engines[spec.policy]
        where = f"{spec.span}: judge template of role `{role.name}` (task `{ep.task_id}`, turn {s.turn})"
        for i, (cand, fields) in enumerate(zip(s.candidates, s.fields)):
            variables = {**fields, **prompts.prompt_variables(ep.task, view, s.turn, role.name,
                                                              {**ep.fields, role.name: fields}, ep.history)}
            text = prompts.render(spec.template, variables, where)
            ids, prompt, cut = prompts.encode(engine.tokenizer, [{"role": "user", "content": text}],
                                              max_tokens=run.plan.runtime.max_prompt_tokens,
                                              truncate=run.plan.runtime.truncate_prompts, where=where,
                                              chat_kwargs=run.chat_kwargs.get(spec.policy))
            run.truncated_prompts += cut
            out.append(_Ask(index, i, spec, _request(spec, ids, s, i, run), prompt))
    return out


def _request(spec: JudgeSpec, ids: list[int], s: RoleStep, cand: int, run: RunState) -> GenRequest:
    ep = s.episode
    base = run.seed + REPEAT_SEED_STRIDE * ep.repeat
    who = f"judge:{s.role.name}"
    return GenRequest(prompt_ids=ids, n=1, temperature=spec.temperature, max_tokens=spec.max_tokens,
                      seed=derive_seed(base, run.step, ep.task_id, f"{who}:{cand}:{spec.key}", s.turn),
                      key=(ep.task_id, who, s.turn), logprobs=False)


def judge_metrics(rollout: Rollout, suffix: str = "") -> dict[str, float]:
    """The judges' share of a rollout, for the step metrics (`suffix` "/eval" for an evaluation);
    empty when the workflow has no judge. From its records' judge replies: `judge/score`, the mean
    score of those that parsed, and `judge/restated`, those whose score came from (or passed
    over) a restated equation (`masdsl.lang.judge.restated`).

    >>> from types import SimpleNamespace
    >>> records = [SimpleNamespace(judge=[{"parsed": True, "score": 7.0, "restated": "1 + 6 = 7"}]),
    ...            SimpleNamespace(judge=[{"parsed": False, "score": 0.0}])]
    >>> judge_metrics(SimpleNamespace(judge_calls=2, judge_tokens=40, judge_unparsed=1, judge_s=0.5, records=records))
    {'judge/calls': 2.0, 'judge/tokens': 40.0, 'judge/unparsed': 1.0, 'time/judge_s': 0.5, 'judge/score': 7.0, 'judge/restated': 1.0}
    """
    if not getattr(rollout, "judge_calls", 0):
        return {}
    replies = [j for r in getattr(rollout, "records", ()) for j in r.judge]
    parsed = [float(j["score"]) for j in replies if j.get("parsed")]
    out = {f"judge/calls{suffix}": float(rollout.judge_calls), f"judge/tokens{suffix}": float(rollout.judge_tokens),
           f"judge/unparsed{suffix}": float(rollout.judge_unparsed), f"time/judge_s{suffix}": float(rollout.judge_s)}
    if parsed:
        out[f"judge/score{suffix}"] = sum(parsed) / len(parsed)
    out[f"judge/restated{suffix}"] = float(sum(1 for j in replies if j.get("restated")))
    return out


def judge_policies(workflow: Workflow) -> set[str]:
    """The policies the workflow's judges sample from."""
    return {j.policy for r in workflow.roles.values() for j in getattr(r, "judges", ())}


def parser_of(name: str, workflow: Workflow) -> Callable[[str], Any] | None:
    """The registered parser a judge's `parse="NAME"` names (None for the built-in `auto` and
    `number`): from the workflow's registry, else the built-ins and its imports."""
    if name in SCORE_PARSES:
        return None
    reg = getattr(workflow, "registry", None)
    spec = reg.functions.get(name) if reg is not None else None
    if spec is None:
        spec = resolve_function(name, tuple(str(p) for p in getattr(workflow, "imports", ())))
    if spec is None:
        raise UserError(f"the judge's parser `{name}` is not registered")
    return spec.fn
