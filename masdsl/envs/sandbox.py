"""The only place generated code runs: a separate, limited, isolated process per run.

Every run gets a fresh empty working directory (removed afterwards), a scrubbed environment
(no inherited variables, so no secrets), resource limits set with `setrlimit` before `exec`
(CPU time, address space, processes, file size, open files), a wall-clock watchdog that kills
the whole process group, and an output cap (at most `max_output_kb` is read, then the run is
killed). On top of that, the best isolation the machine allows is chosen once per process:

- `bwrap`: bubblewrap with new pid, network, ipc and uts namespaces, a read-only `/`, a private
  `/tmp`, and only the working directory writable. When masdsl runs as root, the code runs under
  a uid of its own (so the process limit counts only its processes: root ignores RLIMIT_NPROC),
  and directories it could not enter as that uid (e.g. `/root` holding the interpreter) are
  replaced by empty tmpfs with just the interpreter bound back in, which also hides their files.
- `unshare`: util-linux `unshare` with new pid and network namespaces.
- `none`: limits and the uid switch only (reported loudly: the network is reachable).

`isolation_summary()` says which is active; the runtime prints it once per run.

Starting bubblewrap and an interpreter per run costs more than the run itself, so where runs get
uids of their own (masdsl as root), one long-lived *zygote* (see `sandbox_zygote.py`) is started
inside the isolation and forks a child per run; the child gets its own working directory, uid,
session and limits before any code runs, and a kill takes its process group and every process of
its uid. Elsewhere, or with `MASDSL_SANDBOX_ZYGOTE=0`, each run gets a fresh sandboxed
interpreter (limits then set with `setrlimit` in `preexec_fn`). As root without CAP_SYS_ADMIN (a
default container) bubblewrap runs in a user namespace as a capability-less root: isolated from
the network and the file system, but the process limit is not enforced; the summary says so.

Tests run many per process (see `sandbox_child.py`): assert tests in a judge process that calls
the code (run in a server process of its own) and compares only the plain builtin values it
returns, so no object or patch of the code can fake a pass (docs/sandbox.md); stdin/stdout tests
each with a fresh `__main__`; each test has its own timer, and a test that
kills its process is marked failed and the rest resume in a new process.

>>> r = run_python("print(sum(range(10)))")
>>> (r.ok, r.stdout)
(True, '45\\n')
>>> report = run_tests("def f(x):\\n    return x + 1", ["assert f(1) == 2", "assert f(1) == 3"])
>>> (report.passed, report.pass_rate)
([True, False], 0.5)
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from masdsl.envs import sandbox_process as _process
from masdsl.envs.sandbox_process import Isolation

@dataclass(frozen=True)
class Limits:
    """Resource limits of one sandboxed run.

    `timeout_s` is the wall-clock limit of a `run_python` call and of *each* test in
    `run_tests`; CPU time is limited to the same budget (rounded up, plus one second).
    """

    timeout_s: float = 5.0
    memory_mb: int = 1024  # address space (RLIMIT_AS) of every process
    max_procs: int = 16  # processes/threads the code may have at once (RLIMIT_NPROC)
    max_file_mb: int = 16  # largest file it may write (RLIMIT_FSIZE)
    max_output_kb: int = 256  # stdout + stderr read before the run is killed
    max_open_files: int = 64  # RLIMIT_NOFILE
    isolation: Isolation = "auto"

    def __post_init__(self) -> None:
        from masdsl.errors import UserError

        if self.timeout_s <= 0 or self.memory_mb < 64 or self.max_procs < 1:
            raise UserError(f"sandbox limits out of range: {self}")
        if self.isolation not in ("auto", "bwrap", "unshare", "none"):
            raise UserError(f"unknown sandbox isolation {self.isolation!r}: use auto, bwrap, unshare or none")


DEFAULT_LIMITS = Limits()


def limits_from_config(cfg: Any) -> Limits:
    """`Limits` from a config's `sandbox` block (a dataclass, a mapping or an OmegaConf node).

    >>> limits_from_config({"timeout_s": 2, "max_procs": 8}).max_procs
    8
    """
    if cfg is None:
        return DEFAULT_LIMITS
    if isinstance(cfg, Limits):
        return cfg
    get = cfg.get if hasattr(cfg, "get") else (lambda k, d=None: getattr(cfg, k, d))
    names = ("timeout_s", "memory_mb", "max_procs", "max_file_mb", "max_output_kb", "max_open_files", "isolation")
    values = {k: get(k, None) for k in names}
    return Limits(**{k: (type(getattr(DEFAULT_LIMITS, k))(v) if k != "isolation" else str(v))
                     for k, v in values.items() if v is not None})


def set_default_limits(limits: Limits) -> None:
    """Make `limits` the default of every later run that is not given its own (the runtime
    calls this once with the run's `sandbox` config, so `pass_rate` etc. obey it)."""
    global DEFAULT_LIMITS
    DEFAULT_LIMITS = limits


@dataclass(frozen=True)
class SandboxResult:
    """The outcome of `run_python`. `ok`: exit status 0, within every limit."""

    stdout: str
    stderr: str
    returncode: int
    timed_out: bool
    memory_error: bool
    wall_s: float
    output_truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not (self.timed_out or self.memory_error or self.output_truncated)


@dataclass(frozen=True)
class TestResult:
    """One test: `status` is pass, fail (wrong answer/assert), error, timeout, memory or crash."""

    __test__ = False  # not a pytest test class

    passed: bool
    status: str
    error: str = ""
    output: str | None = None  # what the program printed (stdin/stdout tests)


@dataclass(frozen=True)
class TestReport:
    """All tests of one `run_tests` call, in order; `setup_error` when the code itself failed."""

    __test__ = False

    results: list[TestResult]
    setup_error: str = ""
    stderr_tail: str = ""
    wall_s: float = 0.0

    @property
    def passed(self) -> list[bool]:
        return [r.passed for r in self.results]

    @property
    def pass_rate(self) -> float:
        return sum(self.passed) / len(self.results) if self.results else 0.0

    @property
    def timed_out(self) -> bool:
        return any(r.status == "timeout" for r in self.results)

    @property
    def memory_error(self) -> bool:
        return any(r.status == "memory" for r in self.results)


# ---------------------------------------------------------------- isolation


def isolation_summary(limits: Limits | None = None) -> str:
    """One line saying exactly what isolation and limits are active.

    >>> "limits: wall" in isolation_summary()
    True
    """
    limits = limits or DEFAULT_LIMITS
    mode = _process.choose_mode(limits.isolation)
    if mode.name == "bwrap":
        parts = ["bubblewrap: new pid/net/ipc/uts namespaces, read-only /, private /tmp, only the workdir writable"]
        if mode.hidden:
            parts.append("hidden: " + ", ".join(h for h, _ in mode.hidden))
    elif mode.name == "unshare":
        parts = ["unshare: new pid/net namespaces; the file system is NOT read-only"]
    else:
        parts = ["no namespaces: the network is NOT isolated and the file system is NOT read-only"]
    if mode.switch_uid and _process.zygote_enabled() and _process.zygote_for(mode) is not None:
        parts.append("each run forked by one long-lived sandboxed zygote (MASDSL_SANDBOX_ZYGOTE=0: a new sandbox per run)")
    if mode.switch_uid:
        parts.append("each run as its own uid")
    elif os.geteuid() == 0:
        parts.append("runs as root (no CAP_SYS_ADMIN to switch uid): the process limit is NOT enforced and "
                     "files root owns are readable outside hidden folders")
    parts.append(
        f"limits: wall {limits.timeout_s:g}s per run/test, cpu, address space {limits.memory_mb} MB, "
        f"{limits.max_procs} processes, files {limits.max_file_mb} MB, output {limits.max_output_kb} KB, "
        f"{limits.max_open_files} open files; scrubbed env; fresh workdir"
    )
    return "sandbox: " + "; ".join(parts)


# ---------------------------------------------------------------- public API


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


CACHE = _LRU()


def run_python(code: str, stdin: str = "", *, limits: Limits | None = None) -> SandboxResult:
    """Run `code` as a program (`__main__`) in the sandbox with `stdin`; never raises for bad code.

    >>> run_python("import sys; print(sys.stdin.read().upper(), end='')", "hi").stdout
    'HI'
    >>> run_python("while True: pass", limits=Limits(timeout_s=0.5)).timed_out
    True
    """
    limits = limits or DEFAULT_LIMITS
    key = ("run", code, stdin, limits)
    cached = CACHE.get(key)
    if cached is not None:
        return cached
    raw = _process.run_job({"mode": "run", "code": code}, stdin, limits)
    stderr = raw["stderr"].decode("utf-8", "replace")
    result = SandboxResult(
        stdout=raw["stdout"].decode("utf-8", "replace"), stderr=_tail(stderr), returncode=raw["rc"],
        timed_out=raw["timed_out"], memory_error=_process.is_memory_error(stderr), wall_s=raw["wall_s"],
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
    from masdsl.errors import UserError

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
    limits = limits or DEFAULT_LIMITS
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
    # is running in a process of its own (see sandbox_child.py); io inputs go in the job
    stdin = json.dumps(list(payload)) if kind == "asserts" else ""
    if kind != "asserts":
        job["tests"] = payload
    while start < len(payload):
        raw = _process.run_job({**job, "start": start}, stdin, limits, n_tests=len(payload) - start)
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
    if _process.is_memory_error(stderr):
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

_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def pool_size() -> int:
    """Sandboxed processes run at once by the pool (MASDSL_SANDBOX_WORKERS, else the CPU count)."""
    return max(1, int(os.environ.get("MASDSL_SANDBOX_WORKERS", "0")) or (os.cpu_count() or 1))


def _pool() -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=pool_size(), thread_name_prefix="masdsl-sandbox")
        return _POOL


def run_tests_many(jobs: Iterable[tuple[str, Sequence[Any]]], *, limits: Limits | None = None) -> list[TestReport]:
    """`run_tests` over many (code, tests) pairs on the worker pool, results in input order.

    >>> [r.pass_rate for r in run_tests_many([("x = 1", ["assert x == 1"]), ("x = 2", ["assert x == 1"])])]
    [1.0, 0.0]
    """
    return list(_pool().map(lambda job: run_tests(job[0], job[1], limits=limits), list(jobs)))


def run_python_many(jobs: Iterable[tuple[str, str]], *, limits: Limits | None = None) -> list[SandboxResult]:
    """`run_python` over many (code, stdin) pairs on the worker pool, results in input order."""
    return list(_pool().map(lambda job: run_python(job[0], job[1], limits=limits), list(jobs)))


__all__ = [
    "CACHE", "DEFAULT_LIMITS", "Limits", "SandboxResult", "TestReport", "TestResult", "isolation_summary",
    "limits_from_config", "normalize_output", "pool_size", "set_default_limits", "run_python", "run_python_many", "run_tests", "run_tests_many",
]


class UsesSandboxLimits:
    """For envs built with sandbox limits: the run's limits also govern `pass_rate`,
    `run_answer`, ... called from expressions, in this process and in Ray workers."""

    limits: Limits | None = None

    def _use_limits(self) -> None:
        if self.limits is not None:
            set_default_limits(self.limits)

    def __setstate__(self, state: dict) -> None:  # unpickled in a worker process (Ray env tasks)
        self.__dict__.update(state)
        self._use_limits()
