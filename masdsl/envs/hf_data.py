"""Data as users keep it: Hugging Face `datasets` on this machine, and parquet/Arrow files
(formats in docs/data.md).

- `hf(name, split="train", subset=None, part="all", cache_dir=None, revision=None)`: a
  dataset saved with `save_to_disk` (`name` is its folder) or already in the `datasets` cache
  (`name` as on the Hub, e.g. `"openai/gsm8k"`, loaded once before on this machine). Nothing is
  downloaded: `HF_DATASETS_OFFLINE` / `HF_HUB_OFFLINE` are set while loading.
- `parquet(path, split="all")`: a parquet or Arrow file; `data train "rows.parquet"` reads the
  same by extension (`masdsl.envs.loading.read_rows`).

Rows are checked as a JSONL file's (`masdsl.envs.loading.keyed_rows`): a row without `id` gets
`row-N`, ids are unique, errors name the dataset (or file) and the row number (from 1).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any, Iterator

from masdsl.envs.loading import TABLE_SUFFIXES, check_split, keyed_rows, read_rows, select, table_fields
from masdsl.envs.registry import data_source
from masdsl.errors import DataError

OFFLINE_VARS = ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")
SAVED_MARKERS = ("state.json", "dataset_dict.json")  # what `save_to_disk` writes in its folder


def saved_to_disk(path: Path) -> bool:
    """Whether `path` is a folder written by `Dataset.save_to_disk` / `DatasetDict.save_to_disk`."""
    return path.is_dir() and any((path / m).is_file() for m in SAVED_MARKERS)


def saved_splits(name: str) -> list[str] | None:
    """The splits of a folder written by `DatasetDict.save_to_disk` (its `dataset_dict.json`);
    None for any other path (a single `Dataset`'s folder, a hub name, nothing)."""
    marker = Path(name).expanduser() / "dataset_dict.json"
    try:
        splits = json.loads(marker.read_text(encoding="utf-8")).get("splits")
    except (OSError, ValueError, AttributeError):
        return None
    return [str(s) for s in splits] if isinstance(splits, list) else None


def saved_fields(name: str, split: str = "train") -> list[str] | None:
    """The columns rows of `hf(name, split)` have, when `name` is a `save_to_disk` folder, read
    from its metadata without loading a row: `state.json`'s format columns when the dataset was
    saved with some, else `dataset_info.json`'s features, else the schema of its first Arrow
    shard. None when `name` is no such folder (or `split` not one of its splits), or the
    metadata cannot be read: then nothing is known before loading.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())  # what `Dataset.save_to_disk(d)` writes, less the shards
    >>> _ = (d / "state.json").write_text('{"_data_files": [], "_format_columns": null}')
    >>> _ = (d / "dataset_info.json").write_text('{"features": {"question": {}, "answer": {}}}')
    >>> saved_fields(str(d)), saved_fields(str(d / "nothing"))
    (['question', 'answer'], None)
    """
    path = Path(name).expanduser()
    if not saved_to_disk(path):
        return None
    splits = saved_splits(name)
    if splits is not None:
        if split not in splits:
            return None
        path = path / split
    try:
        state = json.loads((path / "state.json").read_text(encoding="utf-8"))
        if isinstance(state.get("_format_columns"), list):
            return [str(c) for c in state["_format_columns"]]
    except (OSError, ValueError, AttributeError):
        state = {}
    try:
        features = json.loads((path / "dataset_info.json").read_text(encoding="utf-8")).get("features")
        if isinstance(features, dict) and features:
            return [str(f) for f in features]
    except (OSError, ValueError, AttributeError):
        pass
    try:
        return table_fields(path / state["_data_files"][0]["filename"])
    except (KeyError, IndexError, TypeError, DataError):
        return None


@contextlib.contextmanager
def offline() -> Iterator[Any]:
    """Import `datasets` with the Hub unreachable by configuration, for the block; yield the module.

    `datasets` and `huggingface_hub` read the offline switches at import, so both the variables
    and the flags of modules already imported are set, and restored on exit.
    """
    saved_env = {k: os.environ.get(k) for k in OFFLINE_VARS}
    os.environ.update({k: "1" for k in OFFLINE_VARS})
    flags: list[tuple[Any, str, Any]] = []
    try:
        try:
            import datasets  # heavy, optional (the `data` extra): only hf(...) needs it
            import huggingface_hub.constants as hub  # comes with datasets; holds the hub's offline flag
        except ImportError as exc:
            raise DataError("hf(...) needs the `datasets` package: pip install 'masdsl[data]'") from exc
        for module, name in ((datasets.config, "HF_HUB_OFFLINE"), (datasets.config, "HF_DATASETS_OFFLINE"),
                             (hub, "HF_HUB_OFFLINE")):
            flags.append((module, name, getattr(module, name, None)))
            setattr(module, name, True)
        verbosity = datasets.logging.get_verbosity()
        datasets.logging.set_verbosity_error()  # "Using the latest cached version ..." on every load
        try:
            yield datasets
        finally:
            datasets.logging.set_verbosity(verbosity)
    finally:
        for module, name, value in flags:
            setattr(module, name, value)
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _pick_split(ds: Any, datasets: Any, where: str, split: str) -> Any:
    if isinstance(ds, datasets.DatasetDict):
        if split not in ds:
            raise DataError(f"{where}: no split {split!r}; it has " + ", ".join(repr(s) for s in ds))
        return ds[split]
    return ds


def load_hf(name: str, split: str = "train", subset: str | None = None, cache_dir: str | None = None,
            revision: str | None = None) -> tuple[str, Any]:
    """(how errors name it, the `datasets.Dataset`) of one split of a local dataset."""
    path = Path(name).expanduser()
    with offline() as datasets:
        if saved_to_disk(path):
            try:
                ds = datasets.load_from_disk(str(path))
            except (OSError, ValueError) as exc:
                raise DataError(f"{path}: cannot load the saved dataset ({exc})") from exc
            return str(path), _pick_split(ds, datasets, str(path), split)
        where = f"hf dataset `{name}`" + (f" ({subset})" if subset else "") + f" split {split!r}"
        try:
            ds = datasets.load_dataset(name, subset, split=split, cache_dir=cache_dir, revision=revision)
        except (ConnectionError, FileNotFoundError, datasets.exceptions.DatasetNotFoundError) as exc:
            raise DataError(f"hf dataset `{name}` is not on this machine ({exc}); masdsl never downloads: "
                            f"load it once with `datasets.load_dataset` (or save it with `save_to_disk` and "
                            f"give its folder)") from exc
        except ValueError as exc:  # an unknown split or subset
            raise DataError(f"{where}: {exc}") from exc
        return where, ds


@data_source("hf", paths=("cache_dir",), names=("name",))
def hf(name: str, split: str = "train", subset: str | None = None, part: str = "all",
       cache_dir: str | None = None, revision: str | None = None) -> list[dict]:
    """Rows of a Hugging Face dataset on this machine: a `save_to_disk` folder or the `datasets`
    cache (never downloaded). `split` is the dataset's split, `subset` its configuration;
    `part` ("all", "train" or "eval") keeps the hash split of the rows' ids."""
    check_split(part, allow_all=True)
    where, ds = load_hf(name, split, subset, cache_dir, revision)
    return select(keyed_rows(enumerate(ds, 1), where), part)


@data_source("parquet", paths=("path",))
def parquet(path: str, split: str = "all") -> list[dict]:
    """Rows of a parquet or Arrow file, checked like a JSONL file's; `split` "train" or "eval"
    keeps the hash split of the ids, "all" (default) every row."""
    check_split(split, allow_all=True)
    if Path(path).suffix not in TABLE_SUFFIXES:
        raise DataError(f"{path}: parquet(...) reads .parquet or .arrow files; give a .jsonl file as "
                        f"`data train \"{path}\"`")
    return select(keyed_rows(read_rows(path), path), split)
