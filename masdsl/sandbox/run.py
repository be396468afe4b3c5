"""Running code and tests in the sandbox: `run_python`, `run_tests` and their pooled forms.

Every call takes its `limits` (a `Limits`; None means the defaults, `Limits()`); nothing here
holds a default that callers could change. Identical runs (same code, tests or stdin, limits)
are answered from `CACHE`; `run_tests_many` / `run_python_many` spread runs over a thread pool.

>>> run_python("import sys; print(sys.stdin.read().upper(), end='')", "hi").stdout
'HI'
>>> run_python("while True: pass", limits=Limits(timeout_s=0.5)).timed_out
True
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterable, Mapping, Sequence

from masdsl.errors import UserError
from masdsl.sandbox.isolation import runner
from masdsl.sandbox.limits import Limits
from masdsl.sandbox.process import is_memory_error, run_job
from masdsl.sandbox.results import SandboxResult, TestReport, TestResult


class _LRU:
    """A small thread-safe LRU of finished runs (timeouts are not cached: load-dependent)."""

    def __init__(self, size: int = 4096) -> None:
        self.size, self.data, self.lock = size, OrderedDict(), threading.Lock()
        self.hits = self.misses = 0

    def get(self, key):
        with self.lock:
            if key in self.data:
                self.hits += 1
                self.data.move_to_end(key)
                return self.data[key]
            self.misses += 1
            return None

    def put(self, key, value) -> None:
        with self.lock:
            self.data[key] = value
            while len(self.data) > self.size:
                self.data.popitem(last=False)

    def clear(self) -> None:
        with self.lock:
            self.data.clear()
            self.hits = self.misses = 0


CACHE = _LRU()  # results, keyed by everything a run depends on (its limits too)


def _run_job(job: dict[str, Any], stdin: str, limits: Limits, n_tests: int = 0) -> dict[str, Any]:
    mode, zygote = runner(limits)
    return run_job(job, stdin, limits, mode, zygote, n_tests)


def run_python(code: str, stdin: str = "", *, limits: Limits | None = None,
               modules: Mapping[str, str] | None = None) -> SandboxResult:
    """Run `code` as a program (`__main__`) in the sandbox with `stdin`; never raises for bad code.

    `modules` (`{name: source}`) are importable by the program as `import name`.

    >>> run_python("import helper; print(helper.twice(21))", modules={"helper": "twice = lambda x: 2 * x"}).stdout
    '42\\n'
    """
    limits = limits if limits is not None else Limits()
    modules = dict(modules or {})
    key = ("run", code, stdin, limits, tuple(sorted(modules.items())))
    cached = CACHE.get(key)
    if cached is not None:
        return cached
    raw = _run_job({"mode": "run", "code": code, "modules": modules}, stdin, limits)
    stderr = raw["stderr"].decode("utf-8", "replace")
    result = SandboxResult(
        stdout=raw["stdout"].decode("utf-8", "replace"), stderr=_tail(stderr), returncode=raw["rc"],
        timed_out=raw["timed_out"], memory_error=is_memory_error(stderr), wall_s=raw["wall_s"],
        output_truncated=raw["truncated"],
    )
    if not result.timed_out:
        CACHE.put(key, result)
    return result


def _tail(text: str, n: int = 2000) -> str:
    return text if len(text) <= n else "..." + text[-n:]


def normalize_output(text: str) -> list[str]:
    """Whitespace-normalised program output: the list of whitespace-separated tokens.

    >>> normalize_output("1 2\\n3  \\n\\n") == normalize_output("1  2 3")
    True
    """
    return text.split()


def _io_pair(test: Any) -> tuple[str, str] | None:
    if isinstance(test, dict) and "input" in test and "output" in test:
        return str(test["input"]), str(test["output"])
    if isinstance(test, (list, tuple)) and len(test) == 2:
        return str(test[0]), str(test[1])
    return None


def _test_kind(tests: Sequence[Any]) -> str:
    if all(isinstance(t, str) for t in tests):
        return "asserts"
    if all(_io_pair(t) is not None for t in tests):
        return "io"
    raise UserError("tests must be a list of assert strings or a list of {input, output} pairs")


def run_tests(code: str, tests: Sequence[Any], *, limits: Limits | None = None) -> TestReport:
    """Run `tests` against `code`: assert strings in the code's namespace, or stdin/stdout pairs.

    Each test passes or fails on its own (an assert error, a wrong output, a timeout, a crash).

    >>> r = run_tests("print(int(input()) * 2)", [{"input": "2", "output": "4"}, {"input": "3", "output": "7"}])
    >>> [t.status for t in r.results]
    ['pass', 'fail']
    >>> run_tests("def f(:", ["assert f() == 1"]).setup_error
    'SyntaxError: invalid syntax (solution.py, line 1)'
    """
    limits = limits if limits is not None else Limits()
    tests = list(tests)
    if not tests:
        return TestReport([])
    kind = _test_kind(tests)
    payload = tests if kind == "asserts" else [_io_pair(t)[0] for t in tests]
    expected = None if kind == "asserts" else [_io_pair(t)[1] for t in tests]
    key = ("tests", code, kind, tuple(map(str, payload)), tuple(expected or ()), limits)
    cached = CACHE.get(key)
    if cached is not None:
        return cached
    report = _run_tests_uncached(code, kind, payload, expected, limits)
    if not report.timed_out:
        CACHE.put(key, report)
    return report


def _run_tests_uncached(code, kind, payload, expected, limits) -> TestReport:
    results: dict[int, TestResult] = {}
    start, stderr_tail, setup_error, setup_kind, t0 = 0, "", "", "", time.monotonic()
    job = {"mode": kind, "code": code, "out_cap": limits.max_output_kb * 1024}
    # assert tests reach the child on its stdin, which it reads only after the code under test
    # is running in a process of its own (see child_judge.py); io inputs go in the job
    stdin = json.dumps(list(payload)) if kind == "asserts" else ""
    if kind != "asserts":
        job["tests"] = payload
    while start < len(payload):
        raw = _run_job({**job, "start": start}, stdin, limits, n_tests=len(payload) - start)
        stderr = raw["stderr"].decode("utf-8", "replace")
        stderr_tail = _tail(stderr) or stderr_tail
        current, loaded, resume = None, False, None
        for event in raw["events"]:
            if "begin" in event:
                current = event["begin"]
            elif "resume" in event:
                resume = event["resume"]
            elif "loaded" in event:
                loaded = event["loaded"]
                if not loaded:
                    setup_error, setup_kind = event["err"], event["kind"]
            elif "i" in event:
                results[event["i"]] = _judge(event, expected)
        if not loaded:  # the code did not even load: every test fails the same way
            if not setup_error:
                setup_kind, setup_error = _death(raw, stderr)
            status = setup_kind if setup_kind in ("timeout", "memory") else "error"
            return TestReport([TestResult(False, status, setup_error)] * len(payload), setup_error,
                              stderr_tail, time.monotonic() - t0)
        if resume is not None and resume > start:  # the child gave up on its process: go on in a new one
            start = resume
            continue
        if current is None or current in results:  # finished normally
            break
        results[current] = TestResult(False, *_death(raw, stderr))
        start = current + 1
    ordered = [results.get(i, TestResult(False, "crash", "no result")) for i in range(len(payload))]
    return TestReport(ordered, setup_error, stderr_tail, time.monotonic() - t0)


def _death(raw: dict[str, Any], stderr: str) -> tuple[str, str]:
    """Status and message for a process that died or was killed in the middle of a test."""
    if raw["timed_out"]:
        return "timeout", "timed out"
    if raw["truncated"]:
        return "error", "output limit exceeded"
    if is_memory_error(stderr):
        return "memory", "MemoryError"
    return "crash", f"the process died (exit status {raw['rc']})"


def _judge(event: dict[str, Any], expected: list[str] | None) -> TestResult:
    kind, err = event["kind"], event.get("err", "")
    if expected is None:
        return TestResult(kind == "pass", kind, err)
    out = event.get("out", "")
    if kind != "ran":
        return TestResult(False, kind, err, out)
    if normalize_output(out) == normalize_output(expected[event["i"]]):
        return TestResult(True, "pass", "", out)
    return TestResult(False, "fail", "wrong output", out)


# ---------------------------------------------------------------- the worker pool

_POOL: list[ThreadPoolExecutor] = []  # this process's pool, made on first use
_POOL_LOCK = threading.Lock()


def pool_size() -> int:
    """Sandboxed processes run at once by the pool (MASDSL_SANDBOX_WORKERS, else the CPU count)."""
    return max(1, int(os.environ.get("MASDSL_SANDBOX_WORKERS", "0")) or (os.cpu_count() or 1))


def _pool() -> ThreadPoolExecutor:
    with _POOL_LOCK:
        if not _POOL:
            _POOL.append(ThreadPoolExecutor(max_workers=pool_size(), thread_name_prefix="masdsl-sandbox"))
        return _POOL[0]


def run_tests_many(jobs: Iterable[tuple[str, Sequence[Any]]], *, limits: Limits | None = None) -> list[TestReport]:
    """`run_tests` over many (code, tests) pairs on the worker pool, results in input order.

    >>> [r.pass_rate for r in run_tests_many([("x = 1", ["assert x == 1"]), ("x = 2", ["assert x == 1"])])]
    [1.0, 0.0]
    """
    return list(_pool().map(lambda job: run_tests(job[0], job[1], limits=limits), list(jobs)))


def run_python_many(jobs: Iterable[tuple[str, str]], *, limits: Limits | None = None) -> list[SandboxResult]:
    """`run_python` over many (code, stdin) pairs on the worker pool, results in input order."""
    return list(_pool().map(lambda job: run_python(job[0], job[1], limits=limits), list(jobs)))


__all__ = ["CACHE", "normalize_output", "pool_size", "run_python", "run_python_many", "run_tests", "run_tests_many"]
