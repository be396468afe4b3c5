"""The only place generated code runs: a separate, limited, isolated process per run.

Every run gets a fresh empty working directory (removed afterwards), a scrubbed environment
(no inherited variables, so no secrets), resource limits set with `setrlimit` before `exec`
(CPU time, address space, processes, file size, open files), a wall-clock watchdog that kills
the whole process group, and an output cap (at most `max_output_kb` is read, then the run is
killed). On top of that, the best isolation the machine allows is chosen once per process
(bubblewrap, unshare or none: `isolation.py`); `isolation_summary()` says which is active. Under
bubblewrap a program sees only the interpreter, its standard library and the packages the
workflow declares (`visible.py`): no dataset, project source, run folder or home; a fallback that
cannot seal reads says so on stderr the first time a run uses it.

Starting bubblewrap and an interpreter per run costs more than the run itself, so where runs get
uids of their own (masdsl as root), one long-lived *zygote* (`zygote.py`, `child_zygote.py`) is
started inside the isolation and forks a child per run; the child gets its own working
directory, uid, session and limits before any code runs, and a kill takes its process group and
every process of its uid. Elsewhere, or with `MASDSL_SANDBOX_ZYGOTE=0`, each run gets a fresh
sandboxed interpreter (limits then set with `setrlimit` in `preexec_fn`). As root without
CAP_SYS_ADMIN (a default container) bubblewrap runs in a user namespace as a capability-less
root: isolated from the network and the file system, but the process limit is not enforced; the
summary says so.

Tests run many per process (see `child.py`): assert tests in a judge process that calls the
code (run in a server process of its own) and compares only the plain builtin values it
returns, so no object or patch of the code can fake a pass (docs/sandbox.md); stdin/stdout tests
each with a fresh `__main__`; each test has its own timer, and a test that kills its process is
marked failed and the rest resume in a new process.

Every call that runs code takes its `Limits` (`limits_from_config` makes them from a config's
`sandbox` block); there is no default that a caller could change for the others.

The modules: `limits.py` (Limits, limits_from_config), `results.py` (SandboxResult,
TestReport), `run.py` (run_python, run_tests, the cache and pool), `isolation.py` (the mode and
the zygotes), `visible.py` (what a program can see), `process.py` (one run's process, watchdog
and output cap), `zygote.py` (the zygote's masdsl side), `child*.py` (the program that runs
inside, never imported), and `math_equal.py` / `math_worker.py` (math answers compared in a
worker process).

>>> r = run_python("print(sum(range(10)))")
>>> (r.ok, r.stdout)
(True, '45\\n')
>>> report = run_tests("def f(x):\\n    return x + 1", ["assert f(1) == 2", "assert f(1) == 3"])
>>> (report.passed, report.pass_rate)
([True, False], 0.5)
"""

from __future__ import annotations

from masdsl.sandbox.isolation import isolation_summary
from masdsl.sandbox.limits import Isolation, Limits, limits_from_config
from masdsl.sandbox.math_equal import equal
from masdsl.sandbox.results import SandboxResult, TestReport, TestResult
from masdsl.sandbox.run import CACHE, normalize_output, pool_size, run_python, run_python_many, run_tests, run_tests_many

__all__ = [
    "CACHE", "Isolation", "Limits", "SandboxResult", "TestReport", "TestResult", "equal", "isolation_summary",
    "limits_from_config", "normalize_output", "pool_size", "run_python", "run_python_many", "run_tests",
    "run_tests_many",
]
