"""Sandbox overhead and throughput: `python benchmarks/sandbox.py [--runs N] [--no-write]`.

Measures, with the cache off (every program differs):
1. one program: a bare `python -c CODE` subprocess vs `run_python(CODE)` (isolation + limits);
2. one test: a bare subprocess running code + one assert vs `run_tests(code, [assert])`;
3. HumanEval's 164 canonical solutions with all their tests (1,133 asserts): one at a time
   vs the worker pool (`run_tests_many`), in tests per second.
Results go to docs/performance.md under `## sandbox` (that section is replaced, others kept).
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from masdsl.envs import sandbox  # noqa: E402
from masdsl.envs.datasets import humaneval  # noqa: E402

CODE = "def f(x):\n    return sum(i * i for i in range(x))\nprint(f(1000))  # run {i}\n"
TEST = "assert f(10) == 285"


def bare(code: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return time.perf_counter() - start


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def median_ms(values: list[float]) -> float:
    return 1000 * statistics.median(values)


def interleaved(runs: int, a, b) -> tuple[list[float], list[float]]:
    """Alternate the two measurements so machine load affects both alike."""
    xs, ys = [], []
    for i in range(runs):
        xs.append(a(i))
        ys.append(b(i))
    return xs, ys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/performance.md alone")
    args = parser.parse_args()
    sandbox.CACHE.size = 0  # measure real runs only
    summary = sandbox.isolation_summary()
    bare(CODE.format(i=-1))
    sandbox.run_python(CODE.format(i=-1))  # warm-up: the isolation probe

    bare_run, sb_run = interleaved(args.runs, lambda i: bare(CODE.format(i=i)),
                                   lambda i: timed(lambda: sandbox.run_python(CODE.format(i=i))))
    bare_test, sb_test = interleaved(
        args.runs, lambda i: bare(CODE.format(i=i) + TEST),
        lambda i: timed(lambda: sandbox.run_tests(CODE.format(i=i), [TEST])))

    rows = humaneval("all")
    jobs = [(r["solution"] + f"\n# {time.time()}", r["tests"]) for r in rows]
    n_tests = sum(len(t) for _, t in jobs)
    start = time.perf_counter()
    serial = [sandbox.run_tests(c, t) for c, t in jobs]
    serial_s = time.perf_counter() - start
    jobs = [(c + " ", t) for c, t in jobs]
    start = time.perf_counter()
    pooled = sandbox.run_tests_many(jobs)
    pool_s = time.perf_counter() - start
    assert all(r.pass_rate == 1.0 for r in serial + pooled), "a canonical solution failed"

    ratio_run = median_ms(sb_run) / median_ms(bare_run)
    ratio_test = median_ms(sb_test) / median_ms(bare_test)
    load = os.getloadavg()[0]
    lines = [
        "## sandbox",
        "",
        f"Command: `.venv/bin/python benchmarks/sandbox.py --runs {args.runs}` "
        f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs, "
        f"load average {load:.1f} at the end, Python {platform.python_version()}).",
        "",
        f"Isolation: {summary}",
        "",
        "| measurement | bare subprocess | sandbox | ratio |",
        "|---|---|---|---|",
        f"| one program (`python -c` vs `run_python`), median of {args.runs} | {median_ms(bare_run):.1f} ms "
        f"| {median_ms(sb_run):.1f} ms | {ratio_run:.2f}x |",
        f"| one assert test (code + assert vs `run_tests`), median of {args.runs} | {median_ms(bare_test):.1f} ms "
        f"| {median_ms(sb_test):.1f} ms | {ratio_test:.2f}x |",
        "",
        f"HumanEval canonical solutions, {len(jobs)} programs, {n_tests} assert tests (cache off):",
        f"one at a time {serial_s:.1f} s ({n_tests / serial_s:.0f} tests/s); "
        f"worker pool of {sandbox.pool_size()} {pool_s:.1f} s ({n_tests / pool_s:.0f} tests/s).",
        "",
        "The goal is at most 1.5x a bare subprocess per program. Several tests share one sandboxed "
        "process (each under its own timer), so per-test cost falls with the number of tests.",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        write_section(ROOT / "docs" / "performance.md", text)
    return 0


def write_section(path: Path, section: str) -> None:
    """Replace `## sandbox` in `path` (up to the next `## `), or append it."""
    old = path.read_text(encoding="utf-8") if path.exists() else "# Performance\n\n"
    pattern = re.compile(r"^## sandbox\n.*?(?=^## |\Z)", re.S | re.M)
    new = pattern.sub(lambda _: section, old) if pattern.search(old) else old.rstrip("\n") + "\n\n" + section
    path.write_text(new, encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
