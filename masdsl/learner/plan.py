"""The pre-flight of a training run: `resolve_run(workflow, cfg) -> RunPlan`, or one `ConfigError`.

The one place that decides whether `masdsl run` may start, and what it will run: the policies
after `policy.<name>.*`, each role's sampling after `sample.*`, the engines' context length and
where each policy acts and learns. `masdsl run` (also with `--dry-run`), `masdsl check FILE
[overrides]`, `masdsl graph`, `masdsl.train` and the trainer itself call it, so each refuses
exactly what a run refuses, with the same message. It reads no data, loads no model and starts no
engine, Ray or MLflow: model names are only looked up (`masdsl.runtime.models.model_problem`).
What needs the data (`train.batch` larger than the train split) is checked once the data loads.

>>> import masdsl
>>> from masdsl.config import resolve_config
>>> wf = masdsl.load("workflows/coder_tester.mas")
>>> plan = resolve_run(wf, resolve_config(wf.train, overrides=["runtime.engine=hf", "sample.coder.max_tokens=64"]))
>>> plan.samples["coder"]["max_tokens"], plan.max_model_len, plan.placement.lines()[0]
(64, 2240, 'policy shared <- roles coder, tester (full weights, smollm2-135m-instruct)')
>>> resolve_run(wf, resolve_config(wf.train, overrides=["train.clip_eps=5", "runtime.engine=replay"]))
Traceback (most recent call last):
...
masdsl.learner.plan.RunPlanError: invalid configuration:
  - `train.clip_eps` must be in (0, 1); got 5.0
  - `runtime.engine=replay` replays fixed outputs and cannot train; use hf or vllm
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from masdsl.config import Config, ConfigError
from masdsl.errors import UserError
from masdsl.lang.workflow import PolicySpec, Workflow
from masdsl.learner.config import problems as train_problems
from masdsl.runtime.models import model_problem
from masdsl.runtime.placement import REPLAY_CANNOT_TRAIN, Placement, engine_problems, plan_placement
from masdsl.runtime.inputs import effective_policies
from masdsl.runtime.step_requests import max_model_len, role_sample
from masdsl.tracking import validate as check_tracking


class RunPlanError(ConfigError):
    """Everything wrong with a run's configuration, as one message; `problems`: one line each."""

    def __init__(self, problems: Sequence[str]):
        self.problems = tuple(problems)
        one = len(self.problems) == 1
        super().__init__(self.problems[0] if one else "invalid configuration:\n  - " + "\n  - ".join(self.problems))


@dataclass(frozen=True)
class RunPlan:
    """What `masdsl run` will run, decided before anything starts."""

    policies: Mapping[str, PolicySpec]  # the file's policies with `policy.<name>.*` applied
    samples: Mapping[str, Mapping[str, Any]]  # role -> its `sample { }` settings after `sample.*` overrides
    max_model_len: int  # an evaluation engine's context: runtime.max_prompt_tokens + the longest max_tokens
    placement: Placement  # per policy: its engine and its learner

    def lines(self) -> list[str]:
        """The plan as `masdsl run --dry-run` prints it: placement, sampling per role, context."""
        out = ["placement (engines and learners per policy):", *("  " + line for line in self.placement.lines()),
               "sampling per role (the file's sample { } with the overrides):"]
        out += [f"  {role}: {json.dumps(dict(s), sort_keys=True)}" for role, s in self.samples.items()]
        out.append(f"engine context: max_model_len {self.max_model_len} (runtime.max_prompt_tokens + the longest max_tokens)")
        return out


def resolve_run(workflow: Workflow, cfg: Config) -> RunPlan:
    """The plan of `masdsl run` for `workflow` under `cfg`; raises one `RunPlanError` listing every
    problem (a `ConfigError` for an unknown `policy.<name>` / `sample.<role>` name first)."""
    specs = effective_policies(workflow, cfg)  # raises on unknown role/policy names and lora keys
    found = run_problems(workflow, cfg, specs)
    if found:
        raise RunPlanError(found)
    return RunPlan(policies=specs, samples={role: role_sample(workflow, cfg, role) for role in workflow.roles},
                   max_model_len=max_model_len(workflow, cfg), placement=plan_placement(workflow, cfg))


def run_problems(workflow: Workflow, cfg: Config, specs: Mapping[str, PolicySpec]) -> list[str]:
    """Every reason `masdsl run` would refuse to start (empty when there is none)."""
    rt = cfg.runtime
    errors = train_problems(cfg.train) + engine_problems(cfg)
    if rt.engine == "replay":
        errors.append(REPLAY_CANNOT_TRAIN)
    if rt.learner_workers < 0:
        errors.append(f"`runtime.learner_workers` must be >= 0 (0: train in the driver); got {rt.learner_workers}")
    if rt.learner_fsdp and rt.learner_workers < 1:
        errors.append("`runtime.learner_fsdp=true` shards the learner over its workers: set `runtime.learner_workers` >= 1")
    lora = [n for n, s in specs.items() if s.lora and not s.frozen and workflow.roles_of_policy(n)]
    if rt.learner_workers > 0 and lora:
        errors.append(f"`runtime.learner_workers` trains full policies only; LoRA polic{'ies' if len(lora) > 1 else 'y'} "
                      f"{', '.join(lora)} would need the driver: set `runtime.learner_workers=0`")
    if all(s.frozen or not workflow.roles_of_policy(n) for n, s in specs.items()):
        errors.append("every policy is frozen (or has no role): `masdsl run` would train nothing; use `masdsl eval`")
    for name in ("train", "eval"):
        if name not in workflow.data:
            errors.append(f"workflow `{workflow.name}` has no `data {name} ...` line; training needs both splits")
    for name, spec in specs.items():  # every policy's model loads, frozen ones too
        problem = model_problem(spec.model)
        if problem is not None:
            errors.append(f"policy `{name}`: {problem}")
    try:
        check_tracking(cfg)
    except UserError as exc:  # a malformed tracking.uri: refused now, not after the models load
        errors.append(str(exc))
    return errors
