"""A role's turn as an engine request: its prompt rendered and tokenised, its sampling options.

Every `sample { }` option (`masdsl.lang.check_roles.SAMPLE_KEYS`) reaches the request, with the config's
`sample."*".*` and `sample.<role>.*` overrides applied (the run plan's `samples`); the policy's
`chat_template_kwargs` reach its chat template. Seeds are derived per
(run seed, step, task, role, turn), so a request samples the same whatever else is in its batch.
"""

from __future__ import annotations

from masdsl.lang.workflow import RoleSpec, SampleSpec, Workflow
from masdsl.plan.old_logprobs import asks_engine_logprobs
from masdsl.runtime import prompts
from masdsl.runtime.backends.base import GenRequest
from masdsl.runtime.episodes import Episode, RoleStep, RunState
from masdsl.runtime.probes import probed_view
from masdsl.runtime.sampling import derive_seed

REPEAT_SEED_STRIDE = 1_000_003  # repeat j of a task samples with run seed + j * stride (eval@N, trajectory's K episodes)


def roles_of(workflow: Workflow, node: str) -> tuple[str, ...]:
    """The roles a node activates: a parallel group's members, or the node's own role."""
    return tuple(workflow.graph.nodes[node].get("roles") or (node,))


def request_for(ep: Episode, role: RoleSpec, turn: int, ids: list[int], run: RunState) -> GenRequest:
    """One role step's request; every `sample { }` option is used.

    In evaluation the temperature is `train.eval_temperature` (0: greedy). `seed` in a role's
    `sample { }` is folded into that role's request seeds (other roles keep theirs). The engine
    returns the sampled tokens' log-probs in every evaluation, and in training where the update
    reads them (`asks_engine_logprobs`).
    """
    sample = run.samples.get(role.name) or SampleSpec.of(role.sample or {})
    temperature = sample.temperature if run.mode == "train" else run.plan.train.eval_temperature
    base = run.seed + REPEAT_SEED_STRIDE * ep.repeat
    if sample.seed is not None:
        base = derive_seed(base, sample.seed, "", "sample.seed", 0)
    return GenRequest(
        prompt_ids=ids,
        n=run.k_of(role.name),
        temperature=float(temperature),
        top_p=sample.top_p,
        max_tokens=sample.max_tokens,
        stop=list(sample.stop),
        seed=derive_seed(base, run.step, ep.task_id, role.name, turn),
        key=(ep.task_id, role.name, turn),
        top_k=sample.top_k,
        min_p=sample.min_p,
        repetition_penalty=sample.repetition_penalty,
        logprobs=run.mode == "eval" or asks_engine_logprobs(run.plan.train, run.plan.runtime),
    )


def role_steps(ep: Episode, run: RunState) -> list[RoleStep]:
    """The prompts of the current node's roles, all rendered against the pre-step state."""
    view = run.env.view(ep.state)
    if run.mode == "eval":  # `train.eval_probe`: what an evaluation prompt sees, changed on purpose
        view = probed_view(run.plan.train.eval_probe, run.env, ep.state, view)
    steps = []
    for name in roles_of(run.workflow, ep.node):
        role = run.workflow.roles[name]
        turn = ep.turns[name]
        where = f"{role.prompt_span or role.span or run.workflow.name}: prompt of role `{name}` (task `{ep.task_id}`, turn {turn})"
        variables = prompts.prompt_variables(ep.task, view, turn, name, ep.fields, ep.history)
        messages = prompts.messages_for(role.prompt, role.system, variables, where)
        tokenizer = run.engines[role.policy].tokenizer
        ids, text, cut = prompts.encode(
            tokenizer, messages, max_tokens=run.plan.runtime.max_prompt_tokens,
            truncate=run.plan.runtime.truncate_prompts, where=where, chat_kwargs=run.chat_kwargs.get(role.policy),
        )
        run.truncated_prompts += cut
        steps.append(RoleStep(ep, role, ep.node, turn, request_for(ep, role, turn, ids, run), text, cut))
    return steps
