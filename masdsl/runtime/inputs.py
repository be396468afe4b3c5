"""Set up what a rollout needs from a `Workflow` and a `Config`: the env, the tasks, the policies.

    env, splits = prepare(workflow, cfg)          # env from the registry, {"train": [...], "eval": [...]}
    specs = effective_policies(workflow, cfg)     # the file's policies with `policy.<name>.*` applied

The engines that serve those policies come from `masdsl.runtime.engine_factory`.
"""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from typing import Any, Mapping

from masdsl.config import Config, ConfigError, check_names, policy_override
from masdsl.envs.datasets import load_jsonl
from masdsl.envs.registry import load_builtins
from masdsl.errors import DataError, UserError, did_you_mean
from masdsl.lang.workflow import DataSpec, PolicySpec, Workflow
from masdsl.sandbox import limits_from_config


def make_env(workflow: Workflow, cfg: Config) -> Any:
    """Instantiate the workflow's env from the registry with `workflow.env_args` (and the
    sandbox limits when its constructor takes `limits`)."""
    registry = load_builtins()
    spec = registry.envs.get(workflow.env)
    if spec is None:
        hint = did_you_mean(workflow.env, registry.envs)
        raise UserError(f"unknown env `{workflow.env}`" + (f" ({hint})" if hint else ""))
    kwargs = dict(workflow.env_args)
    try:
        params = inspect.signature(spec.factory).parameters
    except (TypeError, ValueError):
        params = {}
    if "limits" in params and "limits" not in kwargs:
        kwargs["limits"] = limits_from_config(cfg.sandbox)
    try:
        return spec.factory(**kwargs)
    except TypeError as exc:
        raise UserError(f"env `{workflow.env}`: bad arguments {kwargs}: {exc}") from None


def load_split(spec: DataSpec) -> list[dict]:
    """The rows of one `data` line, checked: dicts with a unique `id` (made a string)."""
    where = f"{spec.span}: " if spec.span is not None else ""
    if spec.source is not None:
        source = load_builtins().data_sources.get(spec.source)
        if source is None:
            raise UserError(f"{where}unknown data source `{spec.source}`")
        rows = list(source.fn(*spec.args, **dict(spec.kwargs)))
    elif spec.path is not None:
        rows = list(load_jsonl(Path(spec.path)))
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


def prepare(workflow: Workflow, cfg: Config) -> tuple[Any, dict[str, list[dict]]]:
    """The env and every data split of the workflow."""
    return make_env(workflow, cfg), {split: load_split(spec) for split, spec in workflow.data.items()}


LORA_KEYS = ("r", "alpha", "dropout", "target_modules")


def effective_policies(workflow: Workflow, cfg: Config) -> dict[str, PolicySpec]:
    """The workflow's policies with the config's `policy.<name>.*` overrides applied (over
    `policy."*".*`, every policy's): `model`, `lora` and `frozen` replace the file's;
    `chat_template_kwargs` merge over the file's (these keys win). Unknown policy names and lora
    keys are errors.

    >>> import networkx as nx
    >>> from masdsl.config import resolve_config
    >>> from masdsl.lang.workflow import RoleSpec
    >>> wf = Workflow("w", "", "code", nx.DiGraph(), roles={"a": RoleSpec("a", "p", "")},
    ...               policies={"p": PolicySpec("p", "m1")}, data={})
    >>> effective_policies(wf, resolve_config(overrides=["policy.p.model=m2", "policy.p.lora={r: 8}"]))["p"].lora
    {'r': 8}
    >>> effective_policies(wf, resolve_config(overrides=["policy.p.chat_template_kwargs={enable_thinking: false}"]))["p"].chat_template_kwargs
    {'enable_thinking': False}
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
        changes = {k: getattr(ov, k) for k in ("model", "lora", "frozen") if getattr(ov, k) is not None}
        if ov.chat_template_kwargs:
            changes["chat_template_kwargs"] = {**(specs[name].chat_template_kwargs or {}), **ov.chat_template_kwargs}
        specs[name] = dataclasses.replace(specs[name], **changes)
    for spec in specs.values():
        unknown = set(spec.lora or {}) - set(LORA_KEYS)
        if unknown:
            raise ConfigError(f"policy `{spec.name}`: unknown lora key(s) {sorted(unknown)}; known: {sorted(LORA_KEYS)}")
    return specs
