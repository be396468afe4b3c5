"""The run configuration: defaults < the file's `train { }` block < `--config` files < overrides.

One typed schema (OmegaConf structured config, `masdsl.config_schema`) so unknown keys and wrong
types are rejected before any model loads, with a hint; overrides in Hydra's grammar
(`masdsl.config_overrides`); `--config` files composed with their `defaults:` lists
(`masdsl.config_file`). Every name of the schema and the override grammar is `masdsl.config`'s too.

>>> cfg = resolve_config(train_block={"samples": 2}, overrides=["train.steps=5"])
>>> (cfg.train.samples, cfg.train.steps, cfg.train.grouping)
(2, 5, 'at')
>>> resolve_config(overrides=["train.sampels=3"])
Traceback (most recent call last):
...
masdsl.errors.ConfigError: unknown config key `train.sampels` (did you mean `train.samples`?)
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from masdsl.config_overrides import apply, expand_sweep, merge, parse_override, sweep_values  # noqa: F401 (the API)
from masdsl.config_schema import (  # noqa: F401: the schema is masdsl.config's too
    ALL_POLICIES, ALL_ROLES, CHOICES, ENGINES, GROUPINGS, ISOLATIONS, LOSSES, MASTER_WEIGHTS, MINIMUMS, PROBE_TABLE, PROBES,
    NAMED_SECTIONS, OLD_LOGPROBS, SAMPLE_RANGES, Config, PolicyOverride, RuntimeConfig, SampleOverride,
    SandboxConfig, TrackingConfig, TrainConfig, train_problems)
from masdsl.errors import ConfigError, did_you_mean  # noqa: F401 (ConfigError: masdsl.config.ConfigError as well)
from masdsl.precision import resolve_dtype

if TYPE_CHECKING:  # OmegaConf is imported where it is used: it costs `masdsl check` ~70 ms of start-up
    from omegaconf import DictConfig

    from masdsl.config_file import YamlFile
    from masdsl.lang.workflow import Workflow  # an annotation only: masdsl.lang sits above config


def resolve_config(
    train_block: dict[str, Any] | None = None,
    config_file: str | Path | Sequence[str | Path] | None = None,
    overrides: list[str] | tuple[str, ...] = (),
) -> Config:
    """Layer the configuration and validate it; raises ConfigError with a hint on mistakes.

    `config_file`: one YAML file or several (`--config A --config B`: later wins), each after
    the files its `defaults:` list names (`masdsl.config_file.compose`). `overrides`: Hydra's
    grammar (`parse_override`): `key=value`, `+key=value` (add), `++key=value` (add or
    override), `~key` (back to the default); a sweep value (`key=a,b`) is refused.
    """
    from omegaconf import OmegaConf  # start-up: see the top of the module

    cfg = OmegaConf.structured(Config)
    if train_block:
        block = dict(train_block)
        # top-level sections may appear as nested blocks inside `train { }`
        nested = {k: block.pop(k) for k in ("runtime", "tracking", "sandbox", "policy") if k in block}
        cfg = merge(cfg, {"train": block, **nested}, "train block")
    files: list[YamlFile] = []
    if config_file:
        from masdsl.config_file import compose  # start-up: PyYAML, only for a run with --config

        files = compose([config_file] if isinstance(config_file, (str, Path)) else list(config_file))
        for file in files:
            cfg = merge(cfg, file.config, f"config file `{file.path}`", file)
    parsed = [parse_override(item) for item in overrides]
    for ov in parsed:
        cfg = apply(cfg, ov)

    def set_later(key: str | None) -> bool:  # an override after the files set `key` (or a section above it)
        return any(key and (key + ".").startswith(ov.key + ".") for ov in parsed)

    try:
        out = _values(cfg)
        _check_samples(out)
    except ConfigError as exc:  # a value a file set (and no override after it): name the last file that set it
        file = next((f for f in reversed(files) if exc.key in f.values), None)
        raise (file.error(exc) if file and not set_later(exc.key) else exc) from None
    # where each `policy.<name>` / `sample.<role>` a file names stands, for `check_names`' errors
    out._where = {key: (str(f.path), *at) for f in files for key, at in f.keys.items()
                  if key.count(".") == 1 and key.split(".")[0] in NAMED_SECTIONS}
    return out


def _values(cfg: DictConfig) -> Config:
    """The merged configuration as `Config`, its choices and minimums checked."""
    from omegaconf import OmegaConf  # start-up: see the top of the module
    from omegaconf.errors import OmegaConfBaseException

    try:  # reading the values resolves `${...}` interpolations, which may name nothing
        for (section, name), allowed in CHOICES.items():
            value = cfg[section][name]
            if value not in allowed:
                raise ConfigError(f"`{section}.{name}` must be one of {', '.join(allowed)}; got `{value}`",
                                  key=f"{section}.{name}")
        for (section, name), low in MINIMUMS.items():
            if cfg[section][name] < low:
                raise ConfigError(f"`{section}.{name}` must be at least {low}; got {cfg[section][name]}",
                                  key=f"{section}.{name}")
        out = OmegaConf.to_object(cfg)
        # `auto` is decided here, once: the run folder, the plan and every process read the dtype that ran
        out.runtime.dtype = resolve_dtype(out.runtime.dtype, out.runtime.device)
        return out
    except OmegaConfBaseException as exc:
        msg = str(getattr(exc, "msg", None) or exc).splitlines()[0]
        key = getattr(exc, "full_key", None) or None
        raise ConfigError(f"`{key}`: {msg}" if key else msg, key=key) from None


def _check_samples(cfg: Config) -> None:
    """Every `sample.<role>.<key>` (and `sample."*".<key>`) in its `SAMPLE_RANGES` range.

    >>> resolve_config(overrides=["sample.*.max_tokens=0"])
    Traceback (most recent call last):
    ...
    masdsl.errors.ConfigError: `sample.*.max_tokens` must be a whole number of at least 1; got 0
    """
    for role, override in cfg.sample.items():
        for key, (test, what) in SAMPLE_RANGES.items():
            value = getattr(override, key)
            if value is not None and not test(value):
                raise ConfigError(f"`sample.{role}.{key}` must be {what}; got {value}", key=f"sample.{role}.{key}")


_SECTIONS = {"train": TrainConfig, "runtime": RuntimeConfig, "tracking": TrackingConfig, "sandbox": SandboxConfig}
_PLAIN = {"int": (int,), "float": (int, float), "bool": (bool,), "str": (str,)}


def _plain_value(annotation: str, value: Any) -> bool:
    """`value` is exactly of the field's type (OmegaConf would take it as it is)."""
    if annotation.startswith("Optional[") and value is None:
        return True
    kinds = _PLAIN.get(annotation.removeprefix("Optional[").removesuffix("]"))
    return kinds is not None and type(value) in kinds and not (type(value) is str and ("${" in value or value == "???"))


def plainly_valid(train_block: dict[str, Any]) -> bool:
    """True when `resolve_config(train_block=...)` would accept the block, told without OmegaConf
    (what `masdsl check` pays for on every file): known keys of `train` (or of a nested
    `runtime`, `tracking`, `sandbox` block), values of exactly their field's type, the allowed
    choices and minimums of `resolve_config`. False says nothing: ask `resolve_config`.

    >>> plainly_valid({"samples": 2, "lr": 1, "runtime": {"engine": "hf"}}), plainly_valid({"sampels": 2})
    (True, False)
    """
    values: dict[str, dict[str, Any]] = {"train": {}}
    for key, value in train_block.items():
        if key in _SECTIONS and key != "train" and isinstance(value, dict):
            values[key] = value
        else:
            values["train"][key] = value
    merged = {}
    for section, cls in _SECTIONS.items():
        fields = {f.name: f for f in dataclasses.fields(cls)}
        given = values.get(section, {})
        if any(k not in fields or not _plain_value(str(fields[k].type), v) for k, v in given.items()):
            return False
        merged[section] = {**{n: f.default for n, f in fields.items()}, **given}
    return (all(merged[sec][name] in allowed for (sec, name), allowed in CHOICES.items())
            and all(merged[sec][name] >= low for (sec, name), low in MINIMUMS.items()))


def to_yaml(cfg: Config) -> str:
    from omegaconf import OmegaConf  # start-up: see the top of the module

    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


def flatten(cfg: Config) -> dict[str, Any]:
    """Dotted key -> value, for MLflow params."""
    from omegaconf import OmegaConf  # start-up: see the top of the module

    out: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{prefix}{k}.")
        else:
            out[prefix[:-1]] = node

    walk(OmegaConf.to_container(OmegaConf.structured(cfg)), "")
    return out


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """What a run records of its configuration (`masdsl.plan.run_plan.RunPlan.record`): the text of
    the run folder's and each checkpoint's `config.yaml`, which `resolve_config(None, PATH)` loads
    back into the same configuration (`--resume`, `masdsl export`, `eval --checkpoint`); MLflow's
    parameters (dotted key -> value) and `config/resolved.yaml`; the `tracking` section MLflow obeys.

    >>> record = RunRecord.of(resolve_config(overrides=["train.steps=3"]))
    >>> record.params["train.steps"], "steps: 3" in record.yaml, record.tracking.enabled
    (3, True, True)
    """

    yaml: str
    params: dict[str, Any]
    tracking: TrackingConfig

    @classmethod
    def of(cls, cfg: Config) -> "RunRecord":
        return cls(yaml=to_yaml(cfg), params=flatten(cfg), tracking=dataclasses.replace(cfg.tracking))


def check_names(cfg: Config, workflow: Workflow) -> None:
    """`sample.<role>` and `policy.<name>` must name roles / policies of `workflow` (`sample."*"`:
    every role, `policy."*"`: every policy); a name a `--config` file gave is reported at its
    file:line.

    Call it once the workflow is loaded, before any model loads (names come from the file).

    >>> from types import SimpleNamespace
    >>> wf = SimpleNamespace(roles={"coder": None, "tester": None}, policies={"shared": None})
    >>> check_names(resolve_config(overrides=["sample.coder.max_tokens=64", "sample.*.max_tokens=4096"]), wf)
    >>> check_names(resolve_config(overrides=["sample.codr.max_tokens=64"]), wf)
    Traceback (most recent call last):
    ...
    masdsl.errors.ConfigError: `sample.codr`: the workflow has no role `codr` (did you mean `sample.coder`?); roles: coder, tester
    >>> resolve_config(overrides=["sample.coder.max_token=64"])
    Traceback (most recent call last):
    ...
    masdsl.errors.ConfigError: unknown config key `sample.coder.max_token` (did you mean `sample.coder.max_tokens`?)
    >>> cfg = resolve_config(overrides=["policy.tool_p.model=m", "policy.planner_p.model=m"])
    >>> check_names(cfg, wf)
    Traceback (most recent call last):
    ...
    masdsl.errors.ConfigError: `policy.tool_p`: the workflow has no policy `tool_p`; policies: shared (the configuration names policies tool_p, planner_p; `policy."*".<key>` sets a key of every policy)
    """
    for section, what, names in (("sample", "role", workflow.roles), ("policy", "policy", workflow.policies)):
        given = getattr(cfg, section, None) or {}
        for name in given:
            if name not in names and name != ALL_ROLES:  # ALL_ROLES == ALL_POLICIES: "*"
                hint = did_you_mean(name, names, fmt=f"`{section}.{{}}`")
                hint = f" ({hint})" if hint else ""
                plural = "policies" if what == "policy" else "roles"
                unknown = [n for n in given if n not in names and n != ALL_ROLES]
                where = (getattr(cfg, "_where", None) or {}).get(f"{section}.{name}")
                # a recipe written for other names: which it names, and the form that fits any workflow
                recipe = (len(unknown) > 1 or where is not None) and not hint
                note = (f" (the configuration names {plural} {', '.join(unknown)}; `{section}.\"*\".<key>` sets a "
                        f"key of every {what})" if recipe else "")
                message = f"`{section}.{name}`: the workflow has no {what} `{name}`{hint}; {plural}: {', '.join(names)}{note}"
                if where:  # a --config file names it
                    path, line, col = where
                    raise ConfigError(f"config file {path}:{line}:{col}: {message}", key=f"{section}.{name}",
                                      file=path, line=line, col=col)
                raise ConfigError(message, key=f"{section}.{name}")


def policy_override(cfg: Config, name: str) -> PolicyOverride | None:
    """The overrides of policy `name`: `policy."*"`'s, then `policy.<name>`'s over them (a
    mapping value, `lora` or `chat_template_kwargs`, merges key by key); None when neither is set.

    >>> cfg = resolve_config(overrides=['policy.*.model=big', "policy.*.chat_template_kwargs.a=1",
    ...                                 "policy.p.chat_template_kwargs.b=2"])
    >>> ov = policy_override(cfg, "p")
    >>> (ov.model, ov.chat_template_kwargs, ov.lr), policy_override(cfg, "q").model, policy_override(resolve_config(), "p")
    (('big', {'a': 1, 'b': 2}, None), 'big', None)
    """
    given = [o for o in ((cfg.policy or {}).get(ALL_POLICIES), (cfg.policy or {}).get(name)) if o is not None]
    if not given:
        return None
    merged: dict[str, Any] = {}
    for override in given:
        for f in dataclasses.fields(PolicyOverride):
            value = getattr(override, f.name)
            if isinstance(value, dict) and isinstance(merged.get(f.name), dict):
                merged[f.name] = {**merged[f.name], **value}
            elif value is not None:
                merged[f.name] = value
    return PolicyOverride(**merged)
