"""Set up what a rollout needs from a `Workflow`: the env (under the run's sandbox limits) and the tasks.

    env, splits = prepare(workflow, plan.sandbox)   # env from the workflow's registry, {"train": [...], "eval": [...]}

Building the env runs the workflow's code (its env factory, its data sources), so it is the
runtime's work, not the plan's: the plan only decided the sandbox limits it runs under. A session
(and an evaluation) sets up its inputs before any model loads; the engines that serve the
policies come from `masdsl.runtime.engine_factory`.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Mapping

from masdsl.config import SandboxConfig
from masdsl.envs.base import Env
from masdsl.envs.data_paths import resolve_args
from masdsl.envs.datasets import load_jsonl
from masdsl.envs.registry import load_builtins
from masdsl.errors import DataError, UserError, did_you_mean
from masdsl.lang.workflow import Workflow
from masdsl.sandbox import limits_from_config


def make_env(workflow: Workflow, sandbox: SandboxConfig) -> Env:
    """Instantiate the workflow's env from the registry with `workflow.env_args` (and the
    `sandbox` limits when its constructor takes `limits`)."""
    registry = workflow.registry or load_builtins()
    spec = registry.envs.get(workflow.env)
    if spec is None:
        hint = did_you_mean(workflow.env, registry.envs)
        raise UserError(f"unknown env `{workflow.env}`" + (f" ({hint})" if hint else ""))
    kwargs = dict(workflow.env_args)
    params: Mapping[str, inspect.Parameter]
    try:
        params = inspect.signature(spec.factory).parameters
    except (TypeError, ValueError):
        params = {}
    if "limits" in params and "limits" not in kwargs:
        kwargs["limits"] = limits_from_config(sandbox)
    try:
        return spec.factory(**kwargs)
    except TypeError as exc:
        raise UserError(f"env `{workflow.env}`: bad arguments {kwargs}: {exc}") from None


def load_split(workflow: Workflow, split: str) -> list[dict]:
    """The rows of the workflow's `data SPLIT` line, checked: dicts with a unique `id` (a string)."""
    spec = workflow.data[split]
    where = f"{spec.span}: " if spec.span is not None else ""
    if spec.source is not None:
        source = (workflow.registry or load_builtins()).data_sources.get(spec.source)
        if source is None:
            raise UserError(f"{where}unknown data source `{spec.source}`")
        args, kwargs = resolve_args(source, spec.args, spec.kwargs, spec.base_dir)  # relative to the .mas file
        rows = list(source.fn(*args, **kwargs))
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


def prepare(workflow: Workflow, sandbox: SandboxConfig) -> tuple[Any, dict[str, list[dict]]]:
    """The env and every data split of the workflow."""
    return make_env(workflow, sandbox), {split: load_split(workflow, split) for split in workflow.data}
