"""Command-line overrides in Hydra's grammar, and how each layer of the configuration merges.

`parse_override` reads one override: `key=value`, `+key=value` (add: the key must not be set),
`++key=value` (add or override), `~key` / `~key=value` (back to the default). A value with a
comma outside quotes and brackets, `range(...)` or `choice(...)` is a sweep: `sweep_values`
lists its values, `expand_sweep` makes a sweep's runs (Hydra's basic sweeper), and `apply`
refuses it (one configuration). `merge` merges a layer (the train block, a file, an override)
with the errors `masdsl.config.resolve_config` reports.

>>> parse_override("+policy.shared.model=m").op, sweep_values("1e-5,2e-5"), expand_sweep(["a=1,2"])
('add', ['1e-5', '2e-5'], [['a=1'], ['a=2']])
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from masdsl.config_aliases import ecosystem_hint
from masdsl.config_schema import NAMED_SECTIONS, Config
from masdsl.errors import ConfigError, did_you_mean

if TYPE_CHECKING:  # OmegaConf is imported where it is used (see masdsl.config)
    from omegaconf import DictConfig

    from masdsl.config_file import YamlFile


def _all_keys(node: Any, prefix: str = "") -> list[str]:
    from omegaconf import DictConfig  # start-up: see the top of the module

    keys = []
    if isinstance(node, (DictConfig, dict)):
        for k in node:
            full = f"{prefix}{k}"
            keys.append(full)
            keys += _all_keys(node[k], full + ".")
    return keys


def _leaves(node: Any, prefix: str) -> list[str]:
    """The dotted keys of the values under `node` (a nested mapping), `prefix` first."""
    from omegaconf import OmegaConf  # start-up: see the top of the module

    if not (isinstance(node, dict) or OmegaConf.is_dict(node)):
        return [prefix]
    return [leaf for k in node for leaf in _leaves(node[k], f"{prefix}.{k}")]


def _named_key(key: str, layer: Any) -> str:
    """The unknown `key` OmegaConf reports, or the first value under it in `layer` that another
    library names (verl's `actor_rollout_ref.actor.optim.lr`: OmegaConf stops at `actor_rollout_ref`)."""
    from omegaconf import OmegaConf  # start-up: see the top of the module

    node = layer
    for part in key.split("."):
        if not (isinstance(node, dict) or OmegaConf.is_dict(node)) or part not in node:
            return key
        node = node[part]
    return next((leaf for leaf in _leaves(node, key) if ecosystem_hint(leaf)), key)


def _unknown_key_error(key: str, schema: DictConfig, layer: Any = None) -> ConfigError:
    """`unknown config key` with a hint: another library's name first (`ecosystem_hint`), else
    the nearest spelling."""
    key = _named_key(key, layer) if layer is not None else key
    hint = ecosystem_hint(key)
    if hint is not None:
        return ConfigError(f"unknown config key `{key}` ({hint})", key=key)
    known = _all_keys(schema)
    parts = key.split(".")
    if len(parts) >= 3 and parts[0] in NAMED_SECTIONS:
        head = f"{parts[0]}.{parts[1]}"
        known = [f"{head}.{f.name}" for f in dataclasses.fields(NAMED_SECTIONS[parts[0]])]
        key = ".".join(parts[:3])
    hint = did_you_mean(key, known)
    return ConfigError(f"unknown config key `{key}`" + (f" ({hint})" if hint else ""), key=key)


def merge(base: DictConfig, layer: Any, what: str, file: YamlFile | None = None) -> DictConfig:
    from omegaconf import OmegaConf  # start-up: see the top of the module
    from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

    try:
        return OmegaConf.merge(base, layer)
    except ConfigKeyError as exc:
        error = _unknown_key_error(exc.full_key or str(exc.key), base, layer)
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


def apply(cfg: DictConfig, ov: Override) -> DictConfig:
    """`cfg` with one override applied."""
    from omegaconf import OmegaConf  # start-up: see the top of the module

    values = None if ov.value is None else sweep_values(ov.value, ov)
    if values is not None:
        quoted = ov.text.partition("=")[0] + "='" + ov.value.replace("'", "\\'") + "'"
        raise ConfigError(
            f"override `{ov.text}` is a sweep of {len(values)} values ({', '.join(f'`{v}`' for v in values[:4])}"
            f"{', ...' if len(values) > 4 else ''}), and this command runs one configuration: run each with "
            f"`masdsl sweep` (or `masdsl run --multirun`), or quote the value to keep it as one string: `{quoted}`",
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
    return merge(cfg, layer, f"override `{ov.key}`")


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
        return {} if head in NAMED_SECTIONS else OmegaConf.structured(fields[head].default_factory())
    if head in NAMED_SECTIONS:
        if len(parts) == 2:
            return _ENTRY
        names = {f.name for f in dataclasses.fields(NAMED_SECTIONS[head])}
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
    cfg = copy.deepcopy(cfg)  # the layers before stay as they were
    parent = cfg if len(parts) == 1 else _select(cfg, ".".join(parts[:-1]))
    if default is _ENTRY:
        del parent[parts[-1]]
    else:
        parent[parts[-1]] = default
    return cfg


