"""One rule for relative paths in a workflow's data: they are relative to the `.mas` file.

A quoted data file (`data train "tasks.jsonl"`) and every path a data source is given
(`apps("data/apps.jsonl", "all")`, `parquet("rows.parquet")`, `hf("data/saved")`, `aime(...)`,
...) are read from the folder of the `.mas` file, whatever the working directory: the file is
the unit, and it runs the same from anywhere. A data source names its path parameters when it
registers (`@data_source(..., paths=("path",))`); two kinds of value are not paths:

- a split word (`"train"`, `"eval"`, `"all"`): `apps("train")` is the bundled sample;
- for a parameter that takes a name *or* a folder (`names=`: `hf`'s `name`), a value with no
  file or folder of that name next to the `.mas` file: a dataset name, passed on as written
  (`hf("openai/gsm8k")`).

The compiler records the `.mas` folder (`DataSpec.base_dir`); the runtime and `masdsl check`
resolve with `resolve_args`, so both read the same file.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Mapping, Sequence

SPLIT_WORDS = ("train", "eval", "all")


def resolve_path(value: Any, base_dir: str | Path, name_or_path: bool = False) -> Any:
    """`value` joined onto `base_dir` when it is a relative path (see the module's rule).

    >>> resolve_path("data/x.jsonl", "/w"), resolve_path("/abs/x.jsonl", "/w"), resolve_path("train", "/w")
    ('/w/data/x.jsonl', '/abs/x.jsonl', 'train')
    >>> resolve_path("openai/gsm8k", "/w", name_or_path=True)   # no such folder under /w: a dataset name
    'openai/gsm8k'
    """
    if not isinstance(value, str) or not value or value in SPLIT_WORDS or value.startswith("~"):
        return value
    if Path(value).is_absolute():
        return value
    there = Path(base_dir) / value
    if name_or_path and not there.exists():
        return value
    return str(there)


def resolve_args(spec: Any, args: Sequence[Any], kwargs: Mapping[str, Any],
                 base_dir: str | Path | None) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The arguments of a call of data source `spec` (a `DataSourceSpec`) with its path
    parameters resolved against `base_dir` (None: as written, relative to the working directory).
    The call keeps its shape (positional stays positional); arguments that do not bind are left
    alone: the call reports them."""
    paths, names = getattr(spec, "paths", ()), getattr(spec, "names", ())
    if base_dir is None or not (paths or names):
        return tuple(args), dict(kwargs)
    try:
        params = list(inspect.signature(spec.fn).parameters)
    except (TypeError, ValueError):
        return tuple(args), dict(kwargs)

    def resolved(name: str, value: Any) -> Any:
        return resolve_path(value, base_dir, name in names) if name in paths or name in names else value

    return (tuple(resolved(params[i], v) if i < len(params) else v for i, v in enumerate(args)),
            {k: resolved(k, v) for k, v in kwargs.items()})
