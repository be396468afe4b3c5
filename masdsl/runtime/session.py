"""Set up what a rollout needs from a `Workflow` and a `Config`: the env, the tasks, the engines.

    env, splits = prepare(workflow, cfg)          # env from the registry, {"train": [...], "eval": [...]}
    engines = build_engines(workflow, cfg)        # {policy: Engine}; one engine per distinct model

Engines: `runtime.engine=replay` serves every policy from `runtime.replay_file`; otherwise
`masdsl.runtime.backends.build_engine(runtime.engine, model)` (`auto`: vllm when usable, else
hf). Policies on the same model share one engine (they act with the same weights in an
evaluation). With `runtime.ray` each engine lives in a Ray actor (`actors.RemoteEngine`).
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import json
from functools import partial
from pathlib import Path
from typing import Any, Mapping

from masdsl.config import ConfigError
from masdsl.errors import DataError, UserError
from masdsl.lang.workflow import DataSpec, PolicySpec, Workflow
from masdsl.runtime.executor import DEFAULT_MAX_TOKENS


def sandbox_limits(cfg: Any) -> Any:
    """`cfg.sandbox` as the sandbox's `Limits` (the fields both know)."""
    from masdsl.envs.sandbox import Limits

    names = {f.name for f in dataclasses.fields(Limits)}
    return Limits(**{k: v for k, v in dataclasses.asdict(cfg.sandbox).items() if k in names})


def make_env(workflow: Workflow, cfg: Any) -> Any:
    """Instantiate the workflow's env from the registry with `workflow.env_args` (and the
    sandbox limits when its constructor takes `limits`)."""
    from masdsl.envs.registry import load_builtins

    registry = load_builtins()
    spec = registry.envs.get(workflow.env)
    if spec is None:
        near = difflib.get_close_matches(workflow.env, list(registry.envs), n=1)
        hint = f" (did you mean `{near[0]}`?)" if near else ""
        raise UserError(f"unknown env `{workflow.env}`{hint}")
    kwargs = dict(workflow.env_args)
    try:
        params = inspect.signature(spec.factory).parameters
    except (TypeError, ValueError):
        params = {}
    if "limits" in params and "limits" not in kwargs:
        kwargs["limits"] = sandbox_limits(cfg)
    try:
        return spec.factory(**kwargs)
    except TypeError as exc:
        raise UserError(f"env `{workflow.env}`: bad arguments {kwargs}: {exc}") from None


def read_jsonl(path: Path) -> list[dict]:
    """Rows of a JSONL file (`masdsl.envs.datasets.load_jsonl` when present)."""
    try:
        from masdsl.envs.datasets import load_jsonl
    except ImportError:
        load_jsonl = None
    if load_jsonl is not None:
        return list(load_jsonl(path))
    if not path.is_file():
        raise DataError(f"data file `{path}` does not exist")
    rows = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise DataError(f"{path}:{lineno}: not valid JSON: {exc.msg}") from None
    return rows


def load_split(spec: DataSpec) -> list[dict]:
    """The rows of one `data` line, checked: dicts with a unique `id` (made a string)."""
    from masdsl.envs.registry import load_builtins

    where = f"{spec.span}: " if spec.span is not None else ""
    if spec.source is not None:
        source = load_builtins().data_sources.get(spec.source)
        if source is None:
            raise UserError(f"{where}unknown data source `{spec.source}`")
        rows = list(source.fn(*spec.args, **dict(spec.kwargs)))
    elif spec.path is not None:
        rows = read_jsonl(Path(spec.path))
    else:
        raise DataError(f"{where}`data {spec.split}` names neither a source nor a file")
    seen: set[str] = set()
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping) or "id" not in row:
            raise DataError(f"{where}row {i} of `data {spec.split}` has no `id`")
        row = {**row, "id": str(row["id"])}
        if row["id"] in seen:
            raise DataError(f"{where}`data {spec.split}` has the id `{row['id']}` twice")
        seen.add(row["id"])
        out.append(row)
    return out


def prepare(workflow: Workflow, cfg: Any) -> tuple[Any, dict[str, list[dict]]]:
    """The env and every data split of the workflow."""
    return make_env(workflow, cfg), {split: load_split(spec) for split, spec in workflow.data.items()}


def effective_policies(workflow: Workflow, cfg: Any) -> dict[str, PolicySpec]:
    """The workflow's policies with `policy.<name>.*` overrides applied (unknown names: error)."""
    overrides = dict(cfg.policy or {})
    for name in overrides:
        if name not in workflow.policies:
            near = difflib.get_close_matches(name, list(workflow.policies), n=1)
            hint = f" (did you mean `policy.{near[0]}`?)" if near else f" (policies: {', '.join(workflow.policies)})"
            raise ConfigError(f"unknown policy `{name}` in `policy.{name}`{hint}")
    out = {}
    for name, spec in workflow.policies.items():
        o = overrides.get(name)
        changes = {k: getattr(o, k) for k in ("model", "lora", "frozen") if o is not None and getattr(o, k) is not None}
        out[name] = dataclasses.replace(spec, **changes) if changes else spec
    return out


def _build_one(spec: PolicySpec, cfg: Any, max_model_len: int) -> Any:
    """One engine for a policy's model through the engines' factory (`runtime.engine`)."""
    from masdsl.runtime.backends import build_engine, engine_kwargs

    return build_engine(cfg.runtime.engine, spec.model, **engine_kwargs(cfg), max_model_len=max_model_len)


def build_engines(workflow: Workflow, cfg: Any) -> dict[str, Any]:
    """{policy: Engine} for a rollout; policies on the same model share one engine."""
    if cfg.runtime.engine == "replay":
        from masdsl.runtime.backends.replay import ReplayEngine

        if not cfg.runtime.replay_file:
            raise ConfigError("`runtime.engine=replay` needs `runtime.replay_file=PATH`")
        engine = ReplayEngine(cfg.runtime.replay_file)
        return {name: engine for name in workflow.policies}
    specs = effective_policies(workflow, cfg)
    from masdsl.runtime.executor import role_sample

    longest = max((int(role_sample(workflow, cfg, name).get("max_tokens", DEFAULT_MAX_TOKENS))
                   for name in workflow.roles), default=DEFAULT_MAX_TOKENS)  # `sample.<role>` overrides count
    max_model_len = int(cfg.runtime.max_prompt_tokens) + longest
    by_model: dict[str, Any] = {}
    engines = {}
    for name, spec in specs.items():
        if spec.model not in by_model:
            if cfg.runtime.ray:
                from masdsl.runtime.actors import RemoteEngine, init_ray

                init_ray(cfg)
                gpus = 1.0 / len({s.model for s in specs.values()}) if str(cfg.runtime.device).startswith("cuda") else 0.0
                by_model[spec.model] = RemoteEngine(partial(_build_one, spec, cfg, max_model_len), num_gpus=gpus)
            else:
                by_model[spec.model] = _build_one(spec, cfg, max_model_len)
        engines[name] = by_model[spec.model]
    return engines


def close_engines(engines: Mapping[str, Any]) -> None:
    """Close each distinct engine once."""
    seen = set()
    for engine in engines.values():
        if id(engine) not in seen:
            seen.add(id(engine))
            engine.close()
