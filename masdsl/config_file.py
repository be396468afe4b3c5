"""The `--config` YAML file of a run, read: its OmegaConf tree and where each key stands in it.

`read_yaml(path)` raises a `ConfigError` for a mistake in the file itself (no such file, a
folder, not UTF-8, not YAML, a top level that is not a mapping), with the line and column where
they are known. `YamlFile.where(key)` is the line and column of a dotted key, for the mistakes
`masdsl.config` finds once the file is merged (a wrong type, an unknown key, a value out of
range); `YamlFile.error` names them in the file:

>>> import tempfile
>>> path = Path(tempfile.mkdtemp()) / "c.yaml"
>>> _ = path.write_text("train:\\n  steps: 3\\n  lr: [1\\n")
>>> try:
...     read_yaml(path)
... except ConfigError as e:
...     print(str(e).replace(str(path), "c.yaml"), (e.line, e.col))
config file c.yaml:4:1: not valid YAML: did not find expected ',' or ']' (4, 1)
>>> _ = path.write_text("train:\\n  steps: 3\\n")
>>> f = read_yaml(path)
>>> f.where("train.steps"), f.where("train.steps", value=False), f.where("train.lr"), f.where("runtime")
((2, 10), (2, 3), (1, 1), None)
>>> print(str(f.error(ConfigError("`train.steps` must be at least 5", key="train.steps"))).replace(str(path), "c.yaml"))
config file c.yaml:2:10: `train.steps` must be at least 5

`compose(paths)` is `--config A --config B`: the files in the order they apply (later wins), each
with its `defaults:` list expanded as Hydra does (the files it names, relative to it, in order;
`_self_` where the file's own keys go, last when it is not listed):

>>> base = path.parent / "base.yaml"
>>> _ = base.write_text("train:\\n  steps: 7\\n")
>>> _ = path.write_text("defaults:\\n  - base\\ntrain:\\n  lr: 0.1\\n")
>>> [f.path.name for f in compose([path])], "defaults" in read_yaml(path).config
(['base.yaml', 'c.yaml'], False)
>>> _ = base.write_text("defaults: [c.yaml]\\n")
>>> try:
...     compose([path])
... except ConfigError as e:
...     print(str(e).replace(str(path.parent) + "/", ""))
config file base.yaml:1:12: `defaults` names `c.yaml`, which is already being composed: a cycle (c.yaml -> base.yaml -> c.yaml)
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from masdsl.errors import ConfigError


@dataclass
class YamlFile:
    path: Path
    config: Any  # the DictConfig
    keys: dict[str, tuple[int, int]] = field(default_factory=dict)  # dotted key -> (line, col) of the key
    values: dict[str, tuple[int, int]] = field(default_factory=dict)  # ... of its value
    # the top-level `defaults:` list (taken out of `config`): its entries, each with its (line, col)
    defaults: list[tuple[Any, tuple[int, int]]] = field(default_factory=list)

    def where(self, key: str | None, value: bool = True) -> tuple[int, int] | None:
        """(line, col) of `key`'s value (or of the key itself), else of its nearest parent the
        file has; None when the file has none of it."""
        parts = (key or "").split(".")
        for n in range(len(parts), 0, -1):
            at = (self.values if value and n == len(parts) else self.keys).get(".".join(parts[:n]))
            if at is not None:
                return at
        return None

    def error(self, exc: ConfigError, value: bool = True) -> ConfigError:
        """`exc` named in this file: `config file PATH:LINE:COL: ...` at its key (its value,
        or the key itself) when the file has it."""
        return _mistake(self.path, str(exc), *(self.where(exc.key, value) or ()), key=exc.key)


def _mistake(path: Path, message: str, line: int | None = None, col: int | None = None,
             key: str | None = None) -> ConfigError:
    where = f"{path}:{line}:{col}" if line else f"`{path}`"
    return ConfigError(f"config file {where}: {message}", key=key, file=str(path), line=line, col=col)


def _text(path: Path) -> str:
    if not path.exists():
        raise ConfigError(f"config file `{path}` does not exist", file=str(path))
    if path.is_dir():
        raise ConfigError(f"config file `{path}` is a folder, not a YAML file", file=str(path))
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"config file `{path}` cannot be read: {exc.strerror or exc}", file=str(path)) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise _mistake(path, f"not UTF-8 text (byte {data[exc.start]:#04x})", line, col) from None


def _marks(node: Any, prefix: str, out: YamlFile) -> None:
    """Record the position of every key of a mapping node, and of nested mappings' keys."""
    for key_node, value_node in node.value:
        key = prefix + str(key_node.value)
        out.keys[key] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
        out.values[key] = (value_node.start_mark.line + 1, value_node.start_mark.column + 1)
        if value_node.id == "mapping":
            _marks(value_node, key + ".", out)


def read_yaml(path: str | Path) -> YamlFile:
    """The file read and parsed; a `ConfigError` for a file that is no YAML mapping."""
    import yaml  # start-up: PyYAML (OmegaConf's parser), only for a run with --config
    from omegaconf import DictConfig, OmegaConf  # start-up: see masdsl.config

    path = Path(path)
    text = _text(path)
    try:
        try:
            config = OmegaConf.load(io.StringIO(text))  # first: its loader's messages (a duplicate key, ...)
        except OSError:  # a top-level number, which OmegaConf cannot hold: named below
            config = None
        node = yaml.compose(text, Loader=yaml.SafeLoader)  # where each key is (OmegaConf keeps no lines)
    except yaml.YAMLError as exc:
        raise _not_yaml(path, text, exc) from None
    if node is not None and node.id != "mapping" or not isinstance(config, DictConfig):
        what = "a list" if node.id == "sequence" else f"the value `{str(node.value)[:40]}`"
        raise _mistake(path, f"the top level must be a mapping of sections (`train:`, `runtime:`, ...); got {what}",
                       node.start_mark.line + 1, node.start_mark.column + 1)
    out = YamlFile(path, config)
    if node is not None:
        _marks(node, "", out)
        _take_defaults(node, out)
    return out


SELF = "_self_"  # in a `defaults:` list: where the file's own keys apply (Hydra's name)


def _take_defaults(node: Any, out: YamlFile) -> None:
    """Move the top-level `defaults:` list out of the config (it is no config key) into `out.defaults`."""
    value = next((v for k, v in node.value if k.value == "defaults"), None)
    if value is None:
        return
    data = out.config.pop("defaults")
    at = out.values["defaults"]
    if value.id != "sequence":
        raise _mistake(out.path, "`defaults` must be a list of YAML files to compose (`defaults: [base.yaml, _self_]`); "
                       f"got `{str(data)[:40]}`", *at, key="defaults")
    items = data if isinstance(data, list) else list(data)  # a ListConfig
    out.defaults = [(item, (n.start_mark.line + 1, n.start_mark.column + 1)) for item, n in zip(items, value.value)]


def compose(paths: Any) -> list[YamlFile]:
    """The `--config` files, each after the files its `defaults:` list names, in the order they
    apply (later wins). A missing file, an entry that is no file name, `_self_` twice or a cycle
    is a `ConfigError` at the entry's file:line."""
    out: list[YamlFile] = []
    for path in paths:
        _expand(read_yaml(path), [], out)
    return out


def _expand(file: YamlFile, chain: list[YamlFile], out: list[YamlFile]) -> None:
    chain = [*chain, file]
    selves = [at for entry, at in file.defaults if entry == SELF]
    if len(selves) > 1:
        raise _mistake(file.path, f"`defaults` lists `{SELF}` twice (where this file's own keys apply: once)",
                       *selves[1], key="defaults")
    for entry, at in file.defaults if selves else [*file.defaults, (SELF, None)]:
        if entry == SELF:
            out.append(file)
            continue
        path = _entry_path(file, entry, at)
        if any(path.resolve() == f.path.resolve() for f in chain):
            loop = " -> ".join(str(f.path) for f in chain[next(i for i, f in enumerate(chain)
                                                             if f.path.resolve() == path.resolve()):])
            raise _mistake(file.path, f"`defaults` names `{entry}`, which is already being composed: "
                           f"a cycle ({loop} -> {path})", *at, key="defaults")
        _expand(read_yaml(path), chain, out)


def _entry_path(file: YamlFile, entry: Any, at: tuple[int, int]) -> Path:
    """The file a `defaults:` entry names: a path relative to `file`'s folder, `.yaml` optional."""
    if not isinstance(entry, str) or not entry.strip():
        group = " (masdsl has no config groups: name the file, `- group/option.yaml`)" if hasattr(entry, "keys") else ""
        raise _mistake(file.path, f"a `defaults` entry names a YAML file relative to this one (`- base.yaml`) "
                       f"or `{SELF}`; got `{entry}`{group}", *at, key="defaults")
    base = file.path.parent / entry
    tries = [base] if base.suffix in (".yaml", ".yml") else [base, base.with_name(base.name + ".yaml"),
                                                           base.with_name(base.name + ".yml")]
    for path in tries:
        if path.is_file():
            return path
    if base.is_dir():
        raise _mistake(file.path, f"`defaults` names `{entry}`, a folder, not a YAML file", *at, key="defaults")
    raise _mistake(file.path, f"`defaults` names `{entry}`: no such file ({' or '.join(str(t) for t in tries)})",
                   *at, key="defaults")


def _not_yaml(path: Path, text: str, exc: Exception) -> ConfigError:
    """A YAML syntax error at its line and column (and, for an unquoted `*:`, which YAML reads as
    an alias, how to write the every-role key)."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    lines = text.splitlines()
    line = lines[mark.line] if mark is not None and mark.line < len(lines) else ""
    indent = line[:len(line) - len(line.lstrip())]
    tab = mark.column if mark is not None and line[mark.column:mark.column + 1] == "\t" else indent.find("\t")
    if tab >= 0:  # PyYAML calls a tab "a character that cannot start any token" (or '\t'): name it
        return _mistake(path, "not valid YAML: a tab character; YAML indents and separates with spaces only "
                        "(replace the tab with spaces)", mark.line + 1, tab + 1)
    hint = ' (quote the every-role key: `"*":`)' if line.strip().startswith("*") else ""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return _mistake(path, f"not valid YAML: {problem}{hint}", *((mark.line + 1, mark.column + 1) if mark else ()))
