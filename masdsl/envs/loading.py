"""Reading data files and splitting rows: what every data source of `masdsl.envs.datasets`
uses (formats in docs/data.md).

Every row is a dict with a unique string `id`. Splits are "train" and "eval", disjoint by
construction: a row is in eval when the first byte of sha256(id) is below 52 (about 20 %), so
the split never depends on file order. File loaders also accept "all" (every row: use it when
the file already is one split, e.g. APPS's test file). A missing file or a malformed row raises
`DataError` naming the file and the row.

Files are JSONL, a JSON list (either may be gzipped), or, by extension, parquet (`.parquet`)
and Arrow (`.arrow`: IPC file or stream, as `datasets` writes them); the last two need
`pyarrow` (the `data` extra) and number rows from 1 in table order.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable

from masdsl.errors import DataError

SPLITS = ("train", "eval")
EVAL_BELOW = 52  # of 256: the eval share of a hash split (52/256 = 20.3 %)
DATA_DIR = Path(__file__).with_name("data")
TABLE_SUFFIXES = (".parquet", ".arrow")


def split_of(row_id: str) -> str:
    """ "eval" for about 20 % of ids (by sha256), "train" for the rest; stable across runs.

    >>> split_of("HumanEval/0"), split_of("HumanEval/1")
    ('train', 'eval')
    """
    return "eval" if hashlib.sha256(row_id.encode("utf-8")).digest()[0] < EVAL_BELOW else "train"


def check_split(split: str, allow_all: bool = False) -> None:
    """Reject a split other than "train" or "eval" (or "all" with `allow_all`) with a `DataError`."""
    allowed = SPLITS + (("all",) if allow_all else ())
    if split not in allowed:
        raise DataError(f"unknown split {split!r}: use " + " or ".join(repr(s) for s in allowed))


def select(rows: list[dict], split: str) -> list[dict]:
    """The rows of `split` (by `split_of` their id); "all" keeps every row."""
    return rows if split == "all" else [r for r in rows if split_of(r["id"]) == split]


def json_line(line: str, path: Path | str, n: int) -> Any:
    """One JSONL line's value, or a `DataError` naming the file and the row."""
    try:
        return json.loads(line)
    except ValueError as exc:
        raise DataError(f"{path}: row {n}: not valid JSON ({exc.args[0]})") from exc


def open_table(path: Path, schema_only: bool = False) -> Any:
    """The pyarrow table (or only its schema) of a parquet or Arrow file; `DataError` if unreadable."""
    try:
        import pyarrow as pa  # heavy, optional (the `data` extra): only parquet/arrow files need it
        import pyarrow.parquet as pq  # as above
    except ImportError as exc:
        raise DataError(f"{path}: reading {path.suffix} files needs pyarrow: pip install 'masdsl[data]'") from exc
    try:
        if path.suffix == ".parquet":
            return pq.read_schema(path) if schema_only else pq.read_table(path)
        try:
            reader = pa.ipc.open_file(pa.memory_map(str(path)))
        except pa.ArrowInvalid:  # not the IPC file format: `datasets` writes the stream format
            reader = pa.ipc.open_stream(pa.memory_map(str(path)))
        return reader.schema if schema_only else reader.read_all()
    except (pa.ArrowException, OSError) as exc:
        raise DataError(f"{path}: not a readable {path.suffix[1:]} file ({exc})") from exc


def table_fields(path: str | Path) -> list[str]:
    """The column names of a parquet or Arrow file (its schema only, no rows read)."""
    return list(open_table(Path(path), schema_only=True).names)


def read_rows(path: str | Path) -> list[tuple[int, Any]]:
    """(row number, value) of a JSONL file (blank lines skipped), of a JSON list file, or of a
    parquet/Arrow table (rows in order, from 1)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such data file")
    if path.suffix in TABLE_SUFFIXES:
        return list(enumerate(open_table(path).to_pylist(), 1))
    text = path.read_text(encoding="utf-8") if path.suffix != ".gz" else gzip.open(path, "rt", encoding="utf-8").read()
    if path.suffix == ".json" or text.lstrip().startswith("["):
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise DataError(f"{path}: not valid JSON ({exc.args[0]})") from exc
        if isinstance(value, dict):
            value = next((v for v in value.values() if isinstance(v, list)), None)
        if not isinstance(value, list):
            raise DataError(f"{path}: expected a JSON list of rows")
        return list(enumerate(value, 1))
    return [(n, json_line(line, path, n)) for n, line in enumerate(text.splitlines(), 1) if line.strip()]


def scan_jsonl(path: str | Path, unique_ids: bool = True) -> tuple[dict | None, int | None, str]:
    """Read every line of a JSONL file, as `load_jsonl` would, keeping nothing but the first row:
    (the first row, the line of the first mistake, what is wrong there); (row, None, "") when
    every line is right (row None: no rows). What `masdsl check` asks of a data file.
    `unique_ids=False`: an `id` may repeat (a data source that keys its rows by other fields).
    Remembered per file until it changes (size or mtime): the language server checks on every edit.

    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "t.jsonl")
    >>> _ = open(p, "w").write('{"id": "a"}\\n\\n{"id": "b" "q": 1}\\n')
    >>> scan_jsonl(p)
    ({'id': 'a'}, 3, "not valid JSON (Expecting ',' delimiter, column 12)")
    >>> _ = open(p, "w").write('{"id": "a"}\\n[1, 2]\\n')
    >>> scan_jsonl(p)[1:]
    (2, 'a JSON list, not an object (a row is one object per line: {"id": ..., ...})')
    """
    stat = os.stat(path)
    return _scan_jsonl(str(path), stat.st_mtime_ns, stat.st_size, unique_ids)


@lru_cache(maxsize=32)
def _scan_jsonl(path: str, mtime_ns: int, size: int, unique_ids: bool) -> tuple[dict | None, int | None, str]:
    first, seen, n = None, {}, 0
    try:
        with open(path, encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line.rstrip("\r\n"))
                except json.JSONDecodeError as exc:
                    return first, n, f"not valid JSON ({exc.msg}, column {exc.colno})"
                if not isinstance(row, dict):
                    kind = {list: "a JSON list", str: "a JSON string"}.get(type(row), f"the JSON value `{line.strip()[:20]}`")
                    return first, n, kind + ', not an object (a row is one object per line: {"id": ..., ...})'
                first = row if first is None else first
                if unique_ids and row.get("id") is not None:
                    key = str(row["id"])
                    if key in seen:
                        return first, n, f"the id {key!r} again (first on line {seen[key]}): ids must be unique"
                    seen[key] = n
    except UnicodeDecodeError as exc:
        return first, n + 1, f"not UTF-8 text ({exc.reason})"
    return first, None, ""


def load_jsonl(path: str | Path, *, required: Iterable[str] = ()) -> list[dict]:
    """Rows of a JSONL file (or a JSON list). A row without `id` gets `row-N` (N: its line);
    ids must be unique; every field in `required` must be present.

    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "t.jsonl")
    >>> _ = open(p, "w").write('{"q": 1}\\n\\n{"id": "b", "q": 2}\\n')
    >>> [r["id"] for r in load_jsonl(p)]
    ['row-1', 'b']
    """
    return keyed_rows(read_rows(path), path, required=required)


def keyed_rows(numbered: Iterable[tuple[int, Any]], where: str | Path, *, required: Iterable[str] = ()) -> list[dict]:
    """Rows given as (row number, value), checked as `load_jsonl` checks a file's; `where` names
    the file (or dataset) in errors."""
    rows, seen, path = [], {}, where
    for n, raw in numbered:
        if not isinstance(raw, dict):
            raise DataError(f"{path}: row {n}: expected a JSON object, got {type(raw).__name__}")
        missing = [k for k in required if k not in raw or raw[k] is None]
        if missing:
            raise DataError(f"{path}: row {n}: missing field " + ", ".join(f"`{k}`" for k in missing))
        row = dict(raw)
        row["id"] = str(row["id"]) if row.get("id") is not None else f"row-{n}"
        if row["id"] in seen:
            raise DataError(f"{path}: row {n}: duplicate id {row['id']!r} (first on row {seen[row['id']]})")
        seen[row["id"]] = n
        rows.append(row)
    return rows


def load_rows(path: str | Path, split: str, convert: Callable[[dict, int], dict]) -> list[dict]:
    """Read `path`, convert each row (KeyError/ValueError/TypeError -> DataError with the row)."""
    check_split(split, allow_all=True)
    rows, seen = [], set()
    for n, raw in read_rows(path):
        try:
            if not isinstance(raw, dict):
                raise TypeError(f"expected a JSON object, got {type(raw).__name__}")
            row = convert(raw, n)
        except KeyError as exc:
            raise DataError(f"{path}: row {n}: missing field `{exc.args[0]}`") from exc
        except (ValueError, TypeError) as exc:
            raise DataError(f"{path}: row {n}: {exc}") from exc
        if row["id"] in seen:
            raise DataError(f"{path}: row {n}: duplicate id {row['id']!r}")
        seen.add(row["id"])
        rows.append(row)
    return select(rows, split)


def json_field(raw: dict, key: str) -> Any:
    """`raw[key]`, decoded when it holds JSON text (empty text: None); `ValueError` if not JSON."""
    value = raw[key]
    if isinstance(value, str):
        try:
            return json.loads(value) if value.strip() else None
        except ValueError as exc:
            raise ValueError(f"field `{key}` is not valid JSON") from exc
    return value
