"""The run configuration: defaults < the file's `train { }` block < `--config YAML` < overrides.

One typed schema (OmegaConf structured config) so unknown keys and wrong types are rejected
before any model loads, with a hint.

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from masdsl.errors import ConfigError, did_you_mean  # ConfigError: masdsl.config.ConfigError as well

if TYPE_CHECKING:  # OmegaConf is imported where it is used: it costs `masdsl check` ~70 ms of start-up
    from omegaconf import DictConfig

    from masdsl.config_file import YamlFile


@dataclass
class TrainConfig:
    steps: int = 3  # optimizer steps (each: rollout -> group -> update -> sync)
    samples: int = 4  # K: candidates per role step (tree sampling)
    batch: int = 4  # tasks (episodes) per step
    lr: float = 1e-6
    grouping: str = "at"  # one of GROUPINGS: at | agent | turn | trajectory
    loss: str = "grpo"  # one of LOSSES
    clip_eps: float = 0.2
    dual_clip: float = 3.0  # c > 1 caps a negative-advantage token's loss at -c*A (the paper's 3); 0: off
    kl_coef: float = 0.0  # > 0 keeps a frozen reference model
    mini_batch_size: int = 16  # rows per optimizer step (the paper's 16); 0: the whole rollout in one step
    ppo_epochs: int = 1  # passes over each rollout's mini-batches
    old_logprobs: str = "auto"  # engine | trainer | auto (trainer unless runtime.dtype is float32)
    drop_flat_groups: bool = False  # leave out groups whose rewards are all equal (they teach nothing)
    drop_lowest_groups: float = 0.0  # leave out this fraction of groups, lowest mean reward first (paper's code/math: 0.3)
    dynamic_sampling: int = 0  # DAPO's dynamic sampling: draw more tasks until a step holds this many non-flat groups; 0: off
    dynamic_sampling_rounds: int = 3  # ... but at most this many rollouts of `batch` tasks per step
    master_weights: str = "float32"  # float32: fp32 weights and AdamW state, runtime.dtype compute | compute: all in runtime.dtype
    max_grad_norm: float = 1.0
    weight_decay: float = 0.0
    micro_batch_tokens: int = 4096  # token budget per forward/backward
    gradient_checkpointing: bool = False
    eval_every: int = 0  # 0: only at start and end
    eval_tasks: int = 8
    eval_temperature: float = 0.0  # 0: greedy
    eval_samples: int = 1  # N episodes per eval task (distinct seeds): mean@N, pass@k; N > 1 wants eval_temperature > 0
    checkpoint_every: int = 0  # 0: only at the end
    seed: int = 0


@dataclass
class RuntimeConfig:
    engine: str = "auto"  # auto | vllm | hf | replay
    replay_file: Optional[str] = None
    ray: bool = False  # run engines/env steps in Ray actors/tasks
    ray_address: Optional[str] = None  # "auto" joins a running cluster
    env_workers: int = 2
    env_retries: int = 2
    max_prompt_tokens: int = 2048
    truncate_prompts: bool = False  # False: an over-long prompt is an error
    device: str = "cpu"
    dtype: str = "float32"
    runs_dir: str = "runs"
    vllm_gpu_memory_utilization: float = 0.3
    # 0: every policy trains in the driver; N >= 1: each trainable full policy trains on N Ray
    # actors with torch.distributed (data-parallel over its rows; masdsl/learner/workers.py)
    learner_workers: int = 0
    learner_fsdp: bool = False  # learner workers shard weights, grads and AdamW state (FSDP2 fully_shard) instead of DDP
    learner_restarts: int = 1  # a learner group whose rank dies is restarted (step redone) this often per run, then the step fails
    engine_replicas: int = 1  # engines per full policy, requests balanced across them (runtime.ray=true)
    vllm_tensor_parallel_size: int = 1  # GPUs per vLLM engine
    vllm_sleep_mode: bool = False  # a vLLM engine on its learner's GPU sleeps (frees weights + KV cache) during the update


@dataclass
class TrackingConfig:
    enabled: bool = True
    uri: Optional[str] = None  # default: $MLFLOW_TRACKING_URI or sqlite:///mlflow.db
    experiment: Optional[str] = None  # default: the workflow name
    log_weights: bool = False
    log_models: bool = False  # end of a finished run: each policy as an MLflow transformers model
    register: bool = False  # also register it as model version `<workflow>-<policy>` (implies log_models)
    system_metrics: bool = True  # MLflow system metrics (CPU, memory, GPU) on training runs; needs psutil


@dataclass
class SandboxConfig:
    timeout_s: float = 5.0
    memory_mb: int = 1024
    max_procs: int = 64
    max_file_mb: int = 16
    max_output_kb: int = 64
    isolation: str = "auto"  # auto | bwrap | unshare | none


@dataclass
class PolicyOverride:
    model: Optional[str] = None
    lora: Optional[dict[str, Any]] = None
    frozen: Optional[bool] = None
    # passed to `tokenizer.apply_chat_template(..., **kwargs)`, e.g. {enable_thinking: false} for
    # Qwen3; merged over the `.mas` policy block's `chat_template_kwargs` (these keys win)
    chat_template_kwargs: Optional[dict[str, Any]] = None


@dataclass
class SampleOverride:
    """`sample.<role>.<key>=value`: overrides one key of that role's `sample { }` block;
    `sample."*".<key>` (`ALL_ROLES`) of every role's, under the role's own `sample.<role>`.

    The keys are exactly those `sample { }` accepts (`masdsl.lang.check.SAMPLE_KEYS`), in the
    ranges of `SAMPLE_RANGES`.
    """

    temperature: Optional[float] = None
    top_p: Optional[float] = None
    top_k: Optional[int] = None
    min_p: Optional[float] = None
    max_tokens: Optional[int] = None
    stop: Optional[list[str]] = None
    seed: Optional[int] = None
    repetition_penalty: Optional[float] = None


@dataclass
class Config:
    train: TrainConfig = field(default_factory=TrainConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    policy: dict[str, PolicyOverride] = field(default_factory=dict)
    sample: dict[str, SampleOverride] = field(default_factory=dict)  # role name (or "*": every role) -> sampling overrides


ALL_ROLES = "*"  # `sample."*"`: every role of the workflow (a role's own `sample.<role>` wins)
SAMPLE_RANGES = {  # `sample { }` / `sample.<role>` key: (test, what it must be)
    "temperature": (lambda v: v >= 0, "at least 0"),
    "top_p": (lambda v: 0 < v <= 1, "in (0, 1]"),
    "max_tokens": (lambda v: isinstance(v, int) and v >= 1, "a whole number of at least 1"),
    "top_k": (lambda v: isinstance(v, int) and v >= -1, "a whole number (-1 or 0: off)"),
    "min_p": (lambda v: 0 <= v <= 1, "in [0, 1] (0: off)"),
    "repetition_penalty": (lambda v: v > 0, "positive (1: off)"),
    "seed": (lambda v: isinstance(v, int) and v >= 0, "a whole number of at least 0"),
}


# The allowed values of the string options, defined here once (OmegaConf cannot type a field as a
# Literal); `resolve_config` checks CHOICES, `learner.config.problems` the loss (collected with the
# other numeric problems); the learner's implementations are keyed by them.
GROUPINGS = ("at", "agent", "turn", "trajectory")  # masdsl.learner.grouping implements each
LOSSES = ("grpo",)  # masdsl.learner.losses implements each
OLD_LOGPROBS = ("auto", "engine", "trainer")
MASTER_WEIGHTS = ("float32", "compute")
ENGINES = ("auto", "vllm", "hf", "replay")
ISOLATIONS = ("auto", "bwrap", "unshare", "none")
MINIMUMS = {
    ("train", "steps"): 1, ("train", "samples"): 1, ("train", "batch"): 1, ("train", "ppo_epochs"): 1,
    ("train", "eval_samples"): 1, ("runtime", "engine_replicas"): 1, ("runtime", "vllm_tensor_parallel_size"): 1,
    ("runtime", "learner_restarts"): 0, ("train", "dynamic_sampling"): 0, ("train", "dynamic_sampling_rounds"): 1,
}
CHOICES = {
    ("train", "grouping"): GROUPINGS,
    ("train", "old_logprobs"): OLD_LOGPROBS,
    ("train", "master_weights"): MASTER_WEIGHTS,
    ("runtime", "engine"): ENGINES,
    ("sandbox", "isolation"): ISOLATIONS,
}


def _all_keys(node: Any, prefix: str = "") -> list[str]:
    from omegaconf import DictConfig  # start-up: see the top of the module

    keys = []
    if isinstance(node, (DictConfig, dict)):
        for k in node:
            full = f"{prefix}{k}"
            keys.append(full)
            keys += _all_keys(node[k], full + ".")
    return keys


# sections keyed by a name from the workflow (policy, role): their entries' fields, for hints
_NAMED_SECTIONS = {"policy": PolicyOverride, "sample": SampleOverride}


def _unknown_key_error(key: str, schema: DictConfig) -> ConfigError:
    known = _all_keys(schema)
    parts = key.split(".")
    if len(parts) >= 3 and parts[0] in _NAMED_SECTIONS:
        head = f"{parts[0]}.{parts[1]}"
        known = [f"{head}.{f.name}" for f in dataclasses.fields(_NAMED_SECTIONS[parts[0]])]
        key = ".".join(parts[:3])
    hint = did_you_mean(key, known)
    return ConfigError(f"unknown config key `{key}`" + (f" ({hint})" if hint else ""), key=key)


def _merge(base: DictConfig, layer: Any, what: str, file: YamlFile | None = None) -> DictConfig:
    from omegaconf import OmegaConf  # start-up: see the top of the module
    from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

    try:
        return OmegaConf.merge(base, layer)
    except ConfigKeyError as exc:
        error = _unknown_key_error(exc.full_key or str(exc.key), base)
        raise (file.error(error, value=False) if file else error) from None
    except (ValidationError, OmegaConfBaseException) as exc:
        # OmegaConf appends "full_key: ... reference_type=... object_type=..." lines: keep the
        # first line, and name the key when `what` does not already
        msg = str(getattr(exc, "msg", None) or exc).splitlines()[0]
        key = getattr(exc, "full_key", None) or None
        plain = layer if isinstance(layer, dict) else OmegaConf.to_container(layer, resolve=False)
        flat = None if key else next((k for k, v in plain.items() if k in base and OmegaConf.is_dict(base[k])
                                      and not isinstance(v, dict)), None)
        if flat is not None:  # `train: 3`: OmegaConf names no key ("Merge error: int is not a subclass ...")
            key, msg = flat, f"must be a mapping of keys; got `{plain[flat]}`"
        if file:
            raise file.error(ConfigError(f"`{key}`: {msg}" if key else msg, key=key)) from None
        where = what if not key or f"`{key}`" in what else f"{what}, `{key}`"
        raise ConfigError(f"{where}: {msg}", key=key) from None


def resolve_config(
    train_block: dict[str, Any] | None = None,
    config_file: str | Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
) -> Config:
    """Layer the configuration and validate it; raises ConfigError with a hint on mistakes."""
    from omegaconf import OmegaConf  # start-up: see the top of the module

    cfg = OmegaConf.structured(Config)
    if train_block:
        block = dict(train_block)
        # top-level sections may appear as nested blocks inside `train { }`
        nested = {k: block.pop(k) for k in ("runtime", "tracking", "sandbox", "policy") if k in block}
        cfg = _merge(cfg, {"train": block, **nested}, "train block")
    file = None
    if config_file:
        from masdsl.config_file import read_yaml  # start-up: PyYAML, only for a run with --config

        file = read_yaml(config_file)
        cfg = _merge(cfg, file.config, f"config file `{file.path}`", file)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override `{item}` is not of the form key=value")
        key = item.split("=", 1)[0]
        try:
            layer = OmegaConf.from_dotlist([item])
        except Exception as exc:  # omegaconf grammar errors
            raise ConfigError(f"override `{item}`: {exc}") from None
        cfg = _merge(cfg, layer, f"override `{key}`")
    try:
        out = _values(cfg)
        _check_samples(out)
    except ConfigError as exc:  # a value the file set (and no override after it): name the file
        set_later = any(exc.key and (exc.key + ".").startswith(item.split("=", 1)[0] + ".") for item in overrides)
        raise (file.error(exc) if file and exc.key in file.values and not set_later else exc) from None
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
        return OmegaConf.to_object(cfg)
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


def check_names(cfg: Config, workflow: Any) -> None:  # Any: a Workflow (masdsl.lang sits above config)
    """`sample.<role>` and `policy.<name>` must name roles / policies of `workflow` (`sample."*"`:
    every role).

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
    """
    for section, what, names in (("sample", "role", workflow.roles), ("policy", "policy", workflow.policies)):
        for name in getattr(cfg, section, None) or {}:
            if name not in names and (section, name) != ("sample", ALL_ROLES):
                hint = did_you_mean(name, names, fmt=f"`{section}.{{}}`")
                hint = f" ({hint})" if hint else ""
                plural = "policies" if what == "policy" else "roles"
                raise ConfigError(f"`{section}.{name}`: the workflow has no {what} `{name}`{hint}; "
                                  f"{plural}: {', '.join(names)}", key=f"{section}.{name}")
