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
from typing import TYPE_CHECKING, Any, Optional, Sequence

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
    """`policy.<name>.<key>=value`: a policy's model, LoRA, frozen flag or chat-template variables
    instead of the `.mas` file's; `policy."*".<key>` (`ALL_POLICIES`) of every policy's, under the
    policy's own `policy.<name>` (`policy_override`)."""

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
ALL_POLICIES = "*"  # `policy."*"`: every policy of the workflow (a policy's own `policy.<name>` wins)
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
        cfg = _merge(cfg, {"train": block, **nested}, "train block")
    files: list[YamlFile] = []
    if config_file:
        from masdsl.config_file import compose  # start-up: PyYAML, only for a run with --config

        files = compose([config_file] if isinstance(config_file, (str, Path)) else list(config_file))
        for file in files:
            cfg = _merge(cfg, file.config, f"config file `{file.path}`", file)
    parsed = [parse_override(item) for item in overrides]
    for ov in parsed:
        cfg = _apply(cfg, ov)

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
                  if key.count(".") == 1 and key.split(".")[0] in _NAMED_SECTIONS and not set_later(key)}
    return out


# --- overrides: Hydra's grammar -------------------------------------------------------------

OPS = {"++": "force", "+": "add", "~": "delete", "": "set"}  # prefix -> what the override does
SWEEP_FUNCTIONS = ("range", "choice")  # Hydra's basic sweeper's; its others are refused by name
UNSUPPORTED_FUNCTIONS = ("glob", "interval", "sort", "shuffle", "tag")


@dataclass(frozen=True)
class Override:
    """One command-line override: `op` is `set` (`key=value`), `add` (`+key=value`: the key must
    not be set yet), `force` (`++key=value`: add or override) or `delete` (`~key`, `~key=value`:
    the key back to its default, or out of its section); `value` is the text after `=` (None:
    no `=`)."""

    text: str
    op: str
    key: str
    value: str | None


def parse_override(text: str) -> Override:
    """`text` split into its operation, key and value; a malformed one is a `ConfigError`.

    >>> parse_override("++train.steps=5")
    Override(text='++train.steps=5', op='force', key='train.steps', value='5')
    >>> parse_override("~sample.coder"), parse_override('policy."*".model=m').key
    (Override(text='~sample.coder', op='delete', key='sample.coder', value=None), 'policy.*.model')
    >>> parse_override("train.steps")
    Traceback (most recent call last):
    ...
    masdsl.errors.ConfigError: override `train.steps` is not of the form key=value (`~train.steps` resets it to its default)
    """
    prefix = next(p for p in OPS if text.startswith(p))
    body = text[len(prefix):]
    key, eq, value = body.partition("=")
    key = key.strip().replace('"*"', "*").replace("'*'", "*")  # `policy."*".model`, as the YAML key is written
    if not eq and prefix != "~":
        what = "+key=value" if prefix else "key=value"
        hint = (f" (a config file: `--config {text}`)" if text.endswith((".yaml", ".yml")) and not prefix
                else f" (`~{key}` resets it to its default)" if not prefix else "")
        raise ConfigError(f"override `{text}` is not of the form {what}{hint}", key=key or None)
    if not key:
        raise ConfigError(f"override `{text}` has no key (e.g. `train.steps=5`)")
    if any(not part or " " in part for part in key.split(".")):
        raise ConfigError(f"override `{text}`: `{key}` is not a dotted key (e.g. `train.steps`)", key=key or None)
    return Override(text, OPS[prefix], key, value if eq else None)


def expand_sweep(overrides: Sequence[str]) -> list[list[str]]:
    """The runs of a sweep, as Hydra's basic sweeper makes them: an override whose value is a
    sweep (`key=a,b`, `key=range(1,4)`, `key=choice(a,b)`) takes each of its values in turn, any
    other override goes into every run; the cartesian product, in the order given (the first
    sweep varies slowest). A comma inside quotes, brackets or braces, or escaped (`\\,`), is no
    separator. Each run is a list of overrides without a sweep, for `resolve_config`.

    >>> expand_sweep(["train.lr=1e-5,2e-5", "train.steps=4", "train.grouping=at,trajectory"])
    [['train.lr=1e-5', 'train.steps=4', 'train.grouping=at'], ['train.lr=1e-5', 'train.steps=4', 'train.grouping=trajectory'], ['train.lr=2e-5', 'train.steps=4', 'train.grouping=at'], ['train.lr=2e-5', 'train.steps=4', 'train.grouping=trajectory']]
    >>> expand_sweep(["train.seed=range(1,4)", "+policy.p.model=choice(a,b)"])
    [['train.seed=1', '+policy.p.model=a'], ['train.seed=1', '+policy.p.model=b'], ['train.seed=2', '+policy.p.model=a'], ['train.seed=2', '+policy.p.model=b'], ['train.seed=3', '+policy.p.model=a'], ['train.seed=3', '+policy.p.model=b']]
    >>> expand_sweep(["x='a,b',c", 'sample.coder.stop=["a","b"]', "train.lr=range(0,1,0.25)"])[:2]
    [["x='a,b'", 'sample.coder.stop=["a","b"]', 'train.lr=0.0'], ["x='a,b'", 'sample.coder.stop=["a","b"]', 'train.lr=0.25']]
    >>> expand_sweep(["train.steps=5"]), expand_sweep([])
    ([['train.steps=5']], [[]])
    """
    import itertools

    axes = []
    for item in overrides:
        ov = parse_override(item)
        values = None if ov.value is None else sweep_values(ov.value, ov)
        if values is not None and ov.op == "delete":
            raise ConfigError(f"override `{item}`: a removal takes one value, not a sweep", key=ov.key)
        axes.append([item] if values is None else [item.partition("=")[0] + "=" + v for v in values])
    return [list(run) for run in itertools.product(*axes)]


def sweep_values(value: str, ov: Override | None = None) -> list[str] | None:
    """The values of a sweep (each as it would be written after `key=`), or None for one value.

    >>> sweep_values("1,2"), sweep_values("[1,2]"), sweep_values("'a,b'"), sweep_values(r"a\\,b")
    (['1', '2'], None, None, None)
    >>> sweep_values("range(3)"), sweep_values("range(1, 7, step=2)"), sweep_values("choice('a,b', c)")
    (['0', '1', '2'], ['1', '3', '5'], ["'a,b'", 'c'])
    """
    items = _split_top(value)
    calls = [_call(item) for item in items]
    if len(items) == 1 and calls[0] is None:
        return None
    out: list[str] = []
    for item, call in zip(items, calls):
        if not item:
            raise _sweep_error(ov, value, "an empty value between commas")
        out += [item] if call is None else _call_values(*call, ov=ov, value=value)
    return out


def _sweep_error(ov: Override | None, value: str, what: str) -> ConfigError:
    return ConfigError(f"override `{ov.text if ov else value}`: {what}", key=ov.key if ov else None)


def _split_top(text: str) -> list[str]:
    """`text` split at its commas outside quotes, brackets and braces (`\\,` is no comma), each
    part stripped; unbalanced brackets: one part."""
    parts, depth, start, quote, i = [], 0, 0, None, 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"" and not text[start:i].strip():  # a quoted element starts the part
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
        i += 1
    if depth != 0 or quote:
        return [text.strip()]
    return [*parts, text[start:].strip()]


def _call(item: str) -> tuple[str, str] | None:
    """(name, arguments) of a sweep function call `name(...)`, else None."""
    import re

    m = re.fullmatch(r"([A-Za-z_]\w*)\s*\((.*)\)", item, re.S)
    if not m or m[1] not in SWEEP_FUNCTIONS + UNSUPPORTED_FUNCTIONS or _split_top(m[2] + ")") != [m[2] + ")"]:
        return None
    return m[1], m[2]


def _call_values(name: str, args: str, ov: Override | None, value: str) -> list[str]:
    if name in UNSUPPORTED_FUNCTIONS:
        raise _sweep_error(ov, value, f"`{name}(...)` is not one of the sweeps masdsl expands: "
                           "comma lists (`a,b`), `range(start, stop, step)`, `choice(a, b)`")
    items = [a for a in _split_top(args) if a] if args.strip() else []
    if name == "choice":
        if not items:
            raise _sweep_error(ov, value, "`choice()` needs at least one value")
        return items
    import re

    given = [a for a in items if not re.match(r"\w+\s*=", a)]
    named = [a.split("=", 1) for a in items if re.match(r"\w+\s*=", a)]
    try:
        bound = dict(zip(("start", "stop", "step"), ["0", *given] if len(given) == 1 and not named else given))
        for k, v in named:
            if k.strip() not in ("start", "stop", "step") or k.strip() in bound:
                raise ValueError
            bound[k.strip()] = v
        if len(given) > 3 or "stop" not in bound:
            raise ValueError
        start, stop, step = (_number(bound.get(k, d)) for k, d in (("start", "0"), ("stop", ""), ("step", "1")))
        if step == 0:
            raise ValueError
    except ValueError:
        raise _sweep_error(ov, value, f"`range({args})` must be `range(start, stop)` or `range(start, stop, step)` "
                           "with numbers, step not 0") from None
    count = max(0, int(-((start - stop) // step)))  # ceil((stop - start) / step)
    values = [start + i * step for i in range(count)]
    if not values:
        raise _sweep_error(ov, value, f"`range({args})` gives no values")
    return [str(v) if isinstance(v, int) else repr(round(v, 12)) for v in values]


def _number(text: str) -> int | float:
    text = text.strip()
    try:
        return int(text)
    except ValueError:
        return float(text)


def _apply(cfg: DictConfig, ov: Override) -> DictConfig:
    """`cfg` with one override applied."""
    from omegaconf import OmegaConf  # start-up: see the top of the module

    values = None if ov.value is None else sweep_values(ov.value, ov)
    if values is not None:
        quoted = ov.text.partition("=")[0] + "='" + ov.value.replace("'", "\\'") + "'"
        raise ConfigError(
            f"override `{ov.text}` is a sweep of {len(values)} values ({', '.join(f'`{v}`' for v in values[:4])}"
            f"{', ...' if len(values) > 4 else ''}), and this command runs one configuration: run each with "
            f"`masdsl sweep` (Hydra's `--multirun`), or quote the value to keep it as one string: `{quoted}`",
            key=ov.key)
    if ov.op == "delete":
        return _remove(cfg, ov)
    text = ov.value
    if not text.lstrip().startswith(("'", '"', "[", "{")):
        text = text.replace("\\,", ",")  # Hydra's escaped comma: a comma in the one value
    try:
        layer = OmegaConf.from_dotlist([f"{ov.key}={text}"])
    except Exception as exc:  # omegaconf grammar errors
        raise ConfigError(f"override `{ov.text}`: {exc}", key=ov.key) from None
    if ov.op == "add":
        now, new = _select(cfg, ov.key), OmegaConf.select(layer, ov.key)
        if now is not None and not OmegaConf.is_config(new):
            body = ov.text[1:]
            raise ConfigError(f"override `{ov.text}`: `{ov.key}` is set already (to `{_plain(now)}`); "
                              f"change it with `{body}`, or add or change it with `+{ov.text}`", key=ov.key)
    return _merge(cfg, layer, f"override `{ov.key}`")


def _select(cfg: DictConfig, key: str) -> Any:
    from omegaconf import OmegaConf  # start-up: see the top of the module

    return OmegaConf.select(cfg, key, default=None, throw_on_missing=False, throw_on_resolution_failure=False)


def _plain(value: Any) -> Any:
    from omegaconf import OmegaConf  # start-up: see the top of the module

    return OmegaConf.to_container(value, resolve=False) if OmegaConf.is_config(value) else value


_ENTRY = object()  # `_default_of`: the key is an entry of a free mapping (removed, not reset)


def _default_of(parts: list[str]) -> Any:
    """The built-in default of a schema key (`_ENTRY` for a name under `policy` / `sample` or a
    key inside a mapping value); a `ConfigError` with a hint for a key the schema lacks."""
    from omegaconf import OmegaConf  # start-up: see the top of the module

    fields = {f.name: f for f in dataclasses.fields(Config)}
    head = parts[0]
    if head not in fields:
        raise _unknown_key_error(".".join(parts), OmegaConf.structured(Config))
    if len(parts) == 1:
        return {} if head in _NAMED_SECTIONS else OmegaConf.structured(fields[head].default_factory())
    if head in _NAMED_SECTIONS:
        if len(parts) == 2:
            return _ENTRY
        names = {f.name for f in dataclasses.fields(_NAMED_SECTIONS[head])}
        if parts[2] not in names:
            raise _unknown_key_error(".".join(parts), OmegaConf.structured(Config))
        return None if len(parts) == 3 else _ENTRY
    section = {f.name: f for f in dataclasses.fields(fields[head].default_factory())}
    if len(parts) > 2 or parts[1] not in section:
        raise _unknown_key_error(".".join(parts), OmegaConf.structured(Config))
    return section[parts[1]].default


def _remove(cfg: DictConfig, ov: Override) -> DictConfig:
    """`~key` (`~key=value`: only if it has that value): a schema key back to its built-in
    default, a `policy.<name>` / `sample.<role>` entry (or a key of a mapping value) taken out."""
    from omegaconf import OmegaConf  # start-up: see the top of the module

    parts = ov.key.split(".")
    default = _default_of(parts)
    now = _select(cfg, ov.key)
    if now is None:
        raise ConfigError(f"override `{ov.text}`: nothing to remove, `{ov.key}` is not set", key=ov.key)
    if ov.value is not None:
        try:
            expected = OmegaConf.from_dotlist([f"v={ov.value}"])["v"]
        except Exception as exc:  # omegaconf grammar errors
            raise ConfigError(f"override `{ov.text}`: {exc}", key=ov.key) from None
        if _plain(now) != _plain(expected):
            raise ConfigError(f"override `{ov.text}`: `{ov.key}` is `{_plain(now)}`, not `{_plain(expected)}` "
                              f"(`~{ov.key}` removes it whatever its value)", key=ov.key)
    cfg = cfg.copy()
    parent = cfg if len(parts) == 1 else _select(cfg, ".".join(parts[:-1]))
    if default is _ENTRY:
        del parent[parts[-1]]
    else:
        parent[parts[-1]] = default
    return cfg


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
    >>> policy_override(cfg, "p"), policy_override(cfg, "q").model, policy_override(resolve_config(), "p")
    (PolicyOverride(model='big', lora=None, frozen=None, chat_template_kwargs={'a': 1, 'b': 2}), 'big', None)
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
