"""A run resolved once: `resolve_run(workflow, cfg) -> RunPlan`, or one `RunPlanError`.

The one arrow from the configuration to the runtime and the learner. A `RunPlan` holds what a
run will run: the policies after `policy.<name>.*`, each role's sampling after `sample.*`, the
engines' context length, where each policy acts and learns, and its own copies of the sections
it accepted (`train`, `runtime`, `sandbox`, `tracking`); `record()` is what the run folder,
each checkpoint and MLflow keep of it. Only this module (and the config layer) reads `policy.*`
and `sample.*` overrides; `with_policies` derives a plan for a checkpoint's models or policies.

`resolve_run` is the pre-flight of `masdsl run`: `masdsl run` (also with `--dry-run`),
`masdsl check FILE [overrides]`, `masdsl graph`, `masdsl sweep` (per trial) and `masdsl.train`
call it, once each, so each refuses exactly what a run refuses, with the same message, and
hands the plan down. `resolve_rollout` plans a rollout or an evaluation (`masdsl eval`,
`masdsl export`, `masdsl.rollout`): the same names, ranges and engine options, none of the
training checks. Neither reads data, loads a model or starts an engine, Ray or MLflow: model
names are only looked up (`masdsl.models.names.model_problem`). `train.batch` larger than the
train split the plan checks when the session hands it the split's size (`check_train_split`).

>>> import masdsl
>>> from masdsl.config import resolve_config
>>> wf = masdsl.load("workflows/coder_tester.mas")
>>> plan = resolve_run(wf, resolve_config(wf.train, overrides=["runtime.engine=hf", "sample.coder.max_tokens=64"]))
>>> plan.samples["coder"].max_tokens, plan.max_model_len, plan.placement.lines()[0]
(64, 2240, 'policy shared <- roles coder, tester (full weights, qwen2.5-coder-0.5b-instruct)')
>>> resolve_run(wf, resolve_config(wf.train, overrides=["train.clip_eps=5", "runtime.engine=replay"]))
Traceback (most recent call last):
...
masdsl.plan.run_plan.RunPlanError: invalid configuration:
  - `train.clip_eps` must be in (0, 1); got 5.0
  - `runtime.engine=replay` replays fixed outputs and cannot train; use hf or vllm
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from masdsl.config import (ALL_POLICIES, ALL_ROLES, Config, ConfigError, PolicyOverride, RunRecord, RuntimeConfig,
                           SampleOverride, SandboxConfig, TrackingConfig, TrainConfig, check_names, policy_override,
                           train_problems)
from masdsl.config_schema import ADVANTAGE_MIN_K
from masdsl.errors import UserError, did_you_mean
from masdsl.lang.judge import judge_problems
from masdsl.lang.workflow import PolicySpec, SampleSpec, Workflow
from masdsl.models.names import model_problem
from masdsl.plan.old_logprobs import old_logprobs_line
from masdsl.plan.placement import REPLAY_CANNOT_TRAIN, Placement, engine_problems, is_trainable, plan_placement
from masdsl.plan.probes import probe_problem
from masdsl.plan.schedule import describe, schedule_problems, trains_at
from masdsl.tracking import validate as check_tracking

DEFAULT_MAX_TOKENS = SampleSpec.max_tokens  # a role's reply budget when neither its `sample { }` nor an override sets one
LORA_KEYS = ("r", "alpha", "dropout", "target_modules")


class RunPlanError(ConfigError):
    """Everything wrong with a run's configuration, as one message; `problems`: one line each."""

    def __init__(self, problems: Sequence[str]):
        self.problems = tuple(problems)
        one = len(self.problems) == 1
        super().__init__(self.problems[0] if one else "invalid configuration:\n  - " + "\n  - ".join(self.problems))


@dataclass(frozen=True)
class RunPlan:
    """What a run will run, decided before anything starts; also the run's record (`record`)."""

    policies: Mapping[str, PolicySpec]  # the file's policies with `policy.<name>.*` applied
    samples: Mapping[str, SampleSpec]  # role -> its `sample { }` settings after `sample.*` overrides
    max_model_len: int  # an evaluation engine's context: runtime.max_prompt_tokens + the longest max_tokens
    placement: Placement  # per policy: its engine and its learner
    train: TrainConfig  # the configuration's sections the plan accepted, its own copies
    runtime: RuntimeConfig
    sandbox: SandboxConfig
    tracking: TrackingConfig
    # what it was resolved for, so that nothing below the commands takes a workflow beside its plan
    workflow: Workflow = dataclasses.field(repr=False, compare=False)
    advantages: Mapping[str, str] = dataclasses.field(default_factory=dict)  # role -> its `advantage` estimator
    lrs: Mapping[str, float] = dataclasses.field(default_factory=dict)  # policy -> its AdamW lr: its own, else train.lr
    # the `policy.*` and `sample.*` overrides as given, for `record` (what runs reads `policies`, `samples`)
    policy_overrides: Mapping[str, PolicyOverride] = dataclasses.field(default_factory=dict)
    sample_overrides: Mapping[str, SampleOverride] = dataclasses.field(default_factory=dict)

    def __getstate__(self) -> dict[str, Any]:
        # a plan sent to a Ray actor (learner workers, engine actors, a sweep's trial) leaves its
        # workflow behind: the functions a workflow imports from its own .py files load only in the
        # process that loaded the file (a trial loads it again: `masdsl.sweep.runner.run_trial`)
        return {**self.__dict__, "workflow": None}

    def record(self) -> RunRecord:
        """What the run folder's `config.yaml`, each checkpoint's and MLflow keep of this plan: the
        configuration it was resolved from, which `resolve_config(None, PATH)` loads back."""
        return RunRecord.of(Config(train=self.train, runtime=self.runtime, tracking=self.tracking, sandbox=self.sandbox,
                                   policy=dict(self.policy_overrides), sample=dict(self.sample_overrides)))

    def trains_at(self, policy: str, step: int) -> bool:
        """Whether `policy` updates at `step` (from 1) by its schedule (`masdsl.plan.schedule`)."""
        return trains_at(self.policies[policy], step, self.train.alternate, self.train.alternate_every)

    def max_tokens(self, role: str) -> int:
        """The reply budget of `role`."""
        return self.samples[role].max_tokens

    def check_train_split(self, n_tasks: int) -> None:
        """The one check that needs the data, asked once it loads (before any model does): the
        batch fits in the train split, so every batch holds distinct tasks (`trainer.next_batch`)."""
        if self.train.batch > n_tasks:
            raise ConfigError(f"`train.batch` ({self.train.batch}) is larger than the train split ({n_tasks} tasks)")

    def with_policies(self, keep: Sequence[str] | None = None, *, models: Mapping[str, str | os.PathLike] | None = None,
                      device: str | None = None) -> "RunPlan":
        """This plan for the policies `keep` only (default: all; its workflow narrowed to them: a
        checkpoint's frozen judge is not loaded for nothing), with `policy.NAME.model=FOLDER` for
        each of `models` (`eval --checkpoint`'s exported policies), on `device` (`runtime.device`);
        nothing is checked again (a model's name is never checked by a rollout's plan).

        >>> import masdsl
        >>> from masdsl.config import resolve_config
        >>> wf = masdsl.load("workflows/coder_tester.mas")
        >>> plan = resolve_rollout(wf, resolve_config(wf.train)).with_policies(models={"shared": "/tmp/trained"})
        >>> plan.policies["shared"].model, plan.policy_overrides["shared"].model, plan.placement.lines()[0][-13:]
        ('/tmp/trained', '/tmp/trained', '/tmp/trained)')
        """
        names = list(self.policies) if keep is None else [n for n in self.policies if n in keep]
        folders = {name: str(folder) for name, folder in (models or {}).items()}
        overrides = {k: v for k, v in self.policy_overrides.items() if k in names or k == ALL_POLICIES}
        for name, folder in folders.items():
            overrides[name] = dataclasses.replace(overrides.get(name) or PolicyOverride(), model=folder)
        specs = {name: dataclasses.replace(self.policies[name], model=folders[name]) if name in folders
                 else self.policies[name] for name in names}
        workflow = self.workflow if len(names) == len(self.policies) else \
            dataclasses.replace(self.workflow, policies={n: self.workflow.policies[n] for n in names})
        runtime = self.runtime if device is None else dataclasses.replace(self.runtime, device=device)
        return dataclasses.replace(self, policies=specs, policy_overrides=overrides, workflow=workflow, runtime=runtime,
                                   placement=plan_placement(workflow, specs, runtime),
                                   lrs={name: self.lrs[name] for name in names})

    def lines(self) -> list[str]:
        """The plan as `masdsl run --dry-run` prints it: placement, sampling per role, context."""
        out = ["placement (engines and learners per policy):", *("  " + line for line in self.placement.lines()),
               "sampling per role (the file's sample { } with the overrides):"]
        out += [f"  {role}: {json.dumps(s.given(), sort_keys=True)}" for role, s in self.samples.items()]
        out.append("advantage estimator per role (its `advantage` line; grpo when it has none):")
        out += [f"  {role}: {name}" for role, name in self.advantages.items()]
        budget = (f", or until the training rollouts have generated {self.train.token_budget:,} tokens"
                  if self.train.token_budget else "")
        out.append(f"training schedule per policy (steps 1..{self.train.steps}{budget}):")
        out += [f"  {name}: {describe(spec, self.train.steps, self.train.lr, self.train.alternate, self.train.alternate_every)}"
                for name, spec in self.policies.items()]
        out.append(f"engine context: max_model_len {self.max_model_len} (runtime.max_prompt_tokens + the longest max_tokens)")
        out.append(old_logprobs_line(self.train, self.runtime))
        return out


def resolve_run(workflow: Workflow, cfg: Config) -> RunPlan:
    """The plan of `masdsl run` for `workflow` under `cfg`; raises one `RunPlanError` listing every
    problem (a `ConfigError` for an unknown `policy.<name>` / `sample.<role>` name first)."""
    specs = effective_policies(workflow, cfg)  # raises on unknown role/policy names and lora keys
    found = run_problems(workflow, cfg, specs)
    if found:
        raise RunPlanError(found)
    return _plan(workflow, cfg, specs)


def resolve_rollout(workflow: Workflow, cfg: Config) -> RunPlan:
    """The plan of a rollout or an evaluation: names, lora keys and engine options checked, none
    of the training checks (a frozen policy, one split, `runtime.engine=replay` are fine).

    >>> import masdsl
    >>> from masdsl.config import resolve_config
    >>> wf = masdsl.load("workflows/coder_tester.mas")
    >>> plan = resolve_rollout(wf, resolve_config(overrides=["runtime.engine=replay", "runtime.replay_file=r.jsonl",
    ...                                                      "sample.*.max_tokens=8"]))
    >>> plan.samples["tester"].max_tokens, plan.placement.lines()[1]
    (8, '  engine: replay in the driver, replays r.jsonl')
    >>> resolve_rollout(wf, resolve_config(overrides=["runtime.engine=replay"]))
    Traceback (most recent call last):
    ...
    masdsl.plan.run_plan.RunPlanError: `runtime.engine=replay` needs `runtime.replay_file=PATH`
    """
    specs = effective_policies(workflow, cfg)
    found = engine_problems(cfg.runtime) + [p for p in (probe_problem(workflow, cfg.train.eval_probe),) if p]
    if cfg.runtime.engine == "replay" and not cfg.runtime.replay_file:
        found.append("`runtime.engine=replay` needs `runtime.replay_file=PATH`")
    if found:
        raise RunPlanError(found)
    return _plan(workflow, cfg, specs)


def _plan(workflow: Workflow, cfg: Config, specs: dict[str, PolicySpec]) -> RunPlan:
    samples = {role: SampleSpec.of(role_sample(workflow, cfg, role)) for role in workflow.roles}
    longest = max((s.max_tokens for s in samples.values()), default=DEFAULT_MAX_TOKENS)
    # the plan's own copies of the sections: a caller changing its `Config` later changes no plan
    train, runtime, sandbox, tracking = copy.deepcopy((cfg.train, cfg.runtime, cfg.sandbox, cfg.tracking))
    return RunPlan(policies=specs, samples=samples, max_model_len=int(runtime.max_prompt_tokens) + longest,
                   placement=plan_placement(workflow, specs, runtime), train=train, runtime=runtime, sandbox=sandbox,
                   tracking=tracking, advantages={role: spec.advantage for role, spec in workflow.roles.items()},
                   workflow=workflow, lrs={n: float(s.lr if s.lr is not None else train.lr) for n, s in specs.items()},
                   policy_overrides=copy.deepcopy(dict(cfg.policy or {})),
                   sample_overrides=copy.deepcopy(dict(cfg.sample or {})))


def run_problems(workflow: Workflow, cfg: Config, specs: Mapping[str, PolicySpec]) -> list[str]:
    """Every reason `masdsl run` would refuse to start (empty when there is none)."""
    rt = cfg.runtime
    errors = train_problems(cfg.train) + engine_problems(rt) + role_problems(workflow, cfg)
    errors += [p for p in (probe_problem(workflow, cfg.train.eval_probe),) if p]
    errors += advantage_problems(workflow, cfg) + async_problems(cfg)
    errors += judge_problems(workflow.roles, specs)  # a judge that `policy.P.frozen=false` would train
    trained = [n for n, s in specs.items() if is_trainable(s, workflow.roles_of_policy(n))]
    errors += schedule_problems(specs, trained, cfg.train.steps, cfg.train.alternate, cfg.train.alternate_every)
    if rt.engine == "replay":
        errors.append(REPLAY_CANNOT_TRAIN)
    if rt.learner_workers < 0:
        errors.append(f"`runtime.learner_workers` must be >= 0 (0: train in the driver); got {rt.learner_workers}")
    if rt.learner_fsdp and rt.learner_workers < 1:
        errors.append("`runtime.learner_fsdp=true` shards the learner over its workers: set `runtime.learner_workers` >= 1")
    lora = [n for n in trained if specs[n].lora]
    if rt.learner_workers > 0 and lora:
        errors.append(f"`runtime.learner_workers` trains full policies only; LoRA polic{'ies' if len(lora) > 1 else 'y'} "
                      f"{', '.join(lora)} would need the driver: set `runtime.learner_workers=0`")
    if not trained:
        errors.append("every policy is frozen (or has no role): `masdsl run` would train nothing; use `masdsl eval`")
    for name in ("train", "eval"):
        if name not in workflow.data:
            errors.append(f"workflow `{workflow.name}` has no `data {name} ...` line; training needs both splits")
    for name, spec in specs.items():  # every policy's model loads, frozen ones too
        problem = model_problem(spec.model)
        if problem is not None:
            errors.append(f"policy `{name}`: {problem}")
    try:
        check_tracking(cfg.tracking)
    except UserError as exc:  # a malformed tracking.uri: refused now, not after the models load
        errors.append(str(exc))
    return errors


def role_problems(workflow: Workflow, cfg: Config) -> list[str]:
    """What the `train` section says about roles: `train.dynamic_sampling_roles` and
    `train.frozen_roles` name roles of the workflow (and the latter leaves one to train), and a
    role's own K (`samples` in its `sample { }`) needs a tree-sampling grouping.

    >>> import masdsl
    >>> from masdsl.config import resolve_config
    >>> wf = masdsl.load("workflows/coder_tester.mas")
    >>> role_problems(wf, resolve_config(overrides=["train.dynamic_sampling_roles={codr: 0.5}"]))
    ['`train.dynamic_sampling_roles`: the workflow has no role `codr` (did you mean `coder`?); roles: coder, tester']
    >>> role_problems(wf, resolve_config(overrides=["sample.coder.samples=8", "train.grouping=trajectory"]))[0][:56]
    '`sample.coder.samples=8`: a role of its own K needs tree'
    >>> role_problems(wf, resolve_config(overrides=["train.frozen_roles=[coder,tester]"]))
    ['`train.frozen_roles` holds every role (coder, tester): `masdsl run` would train nothing; use `masdsl eval`']
    """
    out = []
    for key in ("dynamic_sampling_roles", "frozen_roles"):
        for role in getattr(cfg.train, key) or ():
            if role not in workflow.roles:
                hint = did_you_mean(role, workflow.roles)
                out.append(f"`train.{key}`: the workflow has no role `{role}`" + (f" ({hint})" if hint else "")
                           + f"; roles: {', '.join(workflow.roles)}")
    if workflow.roles and set(workflow.roles) <= set(cfg.train.frozen_roles or ()):
        out.append(f"`train.frozen_roles` holds every role ({', '.join(workflow.roles)}): `masdsl run` would train nothing; use `masdsl eval`")
    if cfg.train.grouping == "trajectory":  # K there is episodes per task, one for every role
        for role in workflow.roles:
            k = role_sample(workflow, cfg, role).get("samples")
            if k is not None:
                out.append(f"`sample.{role}.samples={k}`: a role of its own K needs tree sampling; "
                           "`train.grouping=trajectory` runs `train.samples` whole episodes per task")
    return out


def async_problems(cfg: Config) -> list[str]:
    """What `train.async_rollout=1` (one-step off-policy, `masdsl.learner.ahead`) cannot run exactly
    or is not built for. Allowed: `train.kl_coef` (its reference is frozen), dynamic sampling (all
    of a step's rollouts sample from one weight version), schedules (`train.alternate`).

    >>> from masdsl.config import resolve_config
    >>> async_problems(resolve_config(overrides=["train.async_rollout=1", "runtime.engine=hf"]))
    []
    >>> async_problems(resolve_config(overrides=["train.async_rollout=1", "train.old_logprobs=trainer"]))[1][:52]
    '`train.old_logprobs=trainer` recomputes the old log-'
    """
    rt, tc = cfg.runtime, cfg.train
    if tc.async_rollout != 1:
        return []
    why = "`train.async_rollout=1` samples in a thread of the driver beside the update"
    out = [] if rt.engine == "hf" else [f"{why}, on `runtime.engine=hf` only (each policy's engine holds its own "
                                        f"copy of the weights); got `runtime.engine={rt.engine}`"]
    if tc.old_logprobs == "trainer":
        out.append("`train.old_logprobs=trainer` recomputes the old log-probs with the learner's newest weights, but "
                   "`train.async_rollout=1` samples with the weights one step older, so the PPO ratio would not be "
                   "the behaviour policy's; use `engine` (what `auto` is under async)")
    if rt.learner_workers > 0:
        out.append(f"{why}, not in learner workers: set `runtime.learner_workers=0`")
    if rt.ray:
        out.append(f"{why}, not with engines or env steps in Ray: set `runtime.ray=false`")
    if tc.gradient_checkpointing:  # its recompute restores the global RNG, rewinding the sampler's stream
        out.append(f"{why}, which draws from the global RNG that `train.gradient_checkpointing` saves and "
                   "restores in the backward: set `train.gradient_checkpointing=false`")
    return out


def advantage_problems(workflow: Workflow, cfg: Config) -> list[str]:
    """The roles' `advantage` estimators under the run's K and grouping (`masdsl check` already
    refused what the file alone decides, with its location): an estimator needing more candidates
    than the role's K (its `sample.<role>.samples`, else `train.samples`), and, where a group
    mixes roles (`turn`, `trajectory` grouping), roles whose estimators differ or one that scales
    by its role's statistics.

    >>> from types import SimpleNamespace
    >>> from masdsl.config import resolve_config
    >>> from masdsl.lang.workflow import RoleSpec
    >>> wf = SimpleNamespace(roles={"a": RoleSpec("a", "p", "", advantage="rloo"), "b": RoleSpec("b", "p", "")})
    >>> advantage_problems(wf, resolve_config(overrides=["train.samples=1"]))[0]
    'role `a`: `advantage rloo` needs groups of at least 2 candidates; its K (`train.samples`) is 1'
    >>> advantage_problems(wf, resolve_config(overrides=["train.grouping=turn"]))[0][:60]
    '`train.grouping=turn` puts several roles in one group, but t'
    """
    out, tc = [], cfg.train
    names = {role: spec.advantage for role, spec in workflow.roles.items()}
    for role, name in names.items():
        own = role_sample(workflow, cfg, role).get("samples")
        k, where = (tc.samples, "`train.samples`") if own is None else (own, f"`sample.{role}.samples`")
        if k < ADVANTAGE_MIN_K.get(name, 1):
            out.append(f"role `{role}`: `advantage {name}` needs groups of at least {ADVANTAGE_MIN_K[name]} "
                       f"candidates; its K ({where}) is {k}")
    if tc.grouping in ("turn", "trajectory"):
        if len(set(names.values())) > 1:
            listed = ", ".join(f"{r} {n}" for r, n in names.items())
            out.append(f"`train.grouping={tc.grouping}` puts several roles in one group, but the roles name different "
                       f"advantage estimators ({listed}); name one for all, or use grouping at or agent")
        elif "grpo_agent_norm" in names.values():
            out.append(f"`advantage grpo_agent_norm` scales each group by its role's statistics, but "
                       f"`train.grouping={tc.grouping}` puts several roles in one group; use grouping at or agent")
    return out


def effective_policies(workflow: Workflow, cfg: Config) -> dict[str, PolicySpec]:
    """The workflow's policies with the config's `policy.<name>.*` overrides applied (over
    `policy."*".*`, every policy's): `model`, `lora`, `frozen` and the schedule (`lr`, `train_every`,
    `frozen_until`) replace the file's;
    `chat_template_kwargs` merge over the file's (these keys win). Unknown policy names and lora
    keys are errors.

    >>> import networkx as nx
    >>> from masdsl.config import resolve_config
    >>> from masdsl.lang.workflow import RoleSpec
    >>> wf = Workflow("w", "", "code", nx.DiGraph(), roles={"a": RoleSpec("a", "p", "")},
    ...               policies={"p": PolicySpec("p", "m1", chat_template_kwargs={"enable_thinking": True, "x": 1})}, data={})
    >>> effective_policies(wf, resolve_config(overrides=["policy.p.model=m2", "policy.p.lora={r: 8}"]))["p"].lora
    {'r': 8}
    >>> effective_policies(wf, resolve_config(overrides=["policy.p.chat_template_kwargs={enable_thinking: false}"]))["p"].chat_template_kwargs
    {'enable_thinking': False, 'x': 1}
    >>> effective_policies(wf, resolve_config(overrides=["policy.q.model=m2"]))
    Traceback (most recent call last):
    ...
    masdsl.errors.ConfigError: `policy.q`: the workflow has no policy `q`; policies: p
    """
    check_names(cfg, workflow)
    specs = dict(workflow.policies)
    for name in workflow.policies:
        ov = policy_override(cfg, name)
        if ov is None:
            continue
        changes = {k: getattr(ov, k) for k in ("model", "lora", "frozen", "lr", "train_every", "frozen_until")
                   if getattr(ov, k) is not None}
        if ov.chat_template_kwargs:
            changes["chat_template_kwargs"] = {**(specs[name].chat_template_kwargs or {}), **ov.chat_template_kwargs}
        specs[name] = dataclasses.replace(specs[name], **changes)
    for spec in specs.values():
        unknown = set(spec.lora or {}) - set(LORA_KEYS)
        if unknown:
            raise ConfigError(f"policy `{spec.name}`: unknown lora key(s) {sorted(unknown)}; known: {sorted(LORA_KEYS)}")
    return specs


def role_sample(workflow: Workflow, cfg: Config, role: str) -> dict[str, Any]:
    """The role's `sample { }` block with the config's overrides applied: `sample."*".*` (every
    role), then `sample.<role>.*` (a role's own key wins over the every-role one).

    >>> from types import SimpleNamespace
    >>> from masdsl.config import resolve_config
    >>> from masdsl.lang.workflow import RoleSpec
    >>> wf = SimpleNamespace(roles={"coder": RoleSpec("coder", "p", "", sample={"max_tokens": 64, "top_p": 0.9})})
    >>> role_sample(wf, resolve_config(overrides=["sample.coder.max_tokens=8"]), "coder")
    {'max_tokens': 8, 'top_p': 0.9}
    >>> role_sample(wf, resolve_config(overrides=["sample.*.max_tokens=4096", "sample.*.top_p=0.5"]), "coder")
    {'max_tokens': 4096, 'top_p': 0.5}
    """
    out = dict(workflow.roles[role].sample or {})
    overrides = cfg.sample or {}
    for override in (overrides.get(ALL_ROLES), overrides.get(role)):
        if override is not None:
            out.update({k: v for k, v in dataclasses.asdict(override).items() if v is not None})
    return out
