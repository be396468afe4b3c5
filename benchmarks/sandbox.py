"""Sandbox overhead and throughput: `python benchmarks/sandbox.py [--runs N] [--no-write]`.

Measures, with the cache off (every program differs):
1. one program: a bare `python -c CODE` subprocess vs `run_python(CODE)` (isolation + limits);
2. one test: a bare subprocess running code + one assert vs `run_tests(code, [assert])`;
3. HumanEval's 164 canonical solutions with all their tests (1,133 asserts): one at a time
   vs the worker pool (`run_tests_many`), in tests per second.
Sandboxed runs are measured both forked by the zygote (the default) and with a new bubblewrap
sandbox and interpreter per run (MASDSL_SANDBOX_ZYGOTE=0).
Then what a program can see (the bound paths) and the answer-key probes of
tests/sandbox/test_answer_key.py (tests/support/answer_key.py), run through `run_python` as root:
what each found.
Results go to docs/performance.md under `## sandbox` (that section is replaced, others kept).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from perf_doc import DOC, replace_section, update

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from masdsl import sandbox  # noqa: E402
from masdsl.envs.datasets import humaneval  # noqa: E402

CODE = "def f(x):\n    return sum(i * i for i in range(x))\nprint(f(1000))  # run {i}\n"
TEST = "assert f(10) == 285"
LIMITS = sandbox.Limits()  # the defaults: those of a run made through the default config


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


def interleaved(runs: int, *measures) -> list[list[float]]:
    """Take the measurements in turn, run after run, so machine load affects them alike."""
    results: list[list[float]] = [[] for _ in measures]
    for i in range(runs):
        for out, measure in zip(results, measures):
            out.append(measure(i))
    return results


def seen_and_probed() -> list[str]:
    """The paths a program can see, and what each answer-key probe found (nothing, we hope)."""
    from masdsl.sandbox.isolation import visible_paths
    from tests.support import answer_key

    canaries = answer_key.plant()
    os.environ[answer_key.SECRET_VAR] = canaries.secret
    try:
        outcomes = {name: answer_key.found(o) for name, o in answer_key.run_probes(canaries).items()}
    finally:
        answer_key.remove(canaries)
    clean = sum(1 for f in outcomes.values() if not f)
    return [
        "What a program can see (`masdsl env`, `sandbox visible`):", "",
        *[f"- `{path}`{' (' if sep else ''}{note}" if path.startswith("/") else f"- {line}"
          for line in visible_paths(LIMITS) for path, sep, note in [line.partition(" (")]],
        "",
        f"Answer-key probes (tests/support/answer_key.py, as root, forked by the zygote): "
        f"{len(outcomes) - clean} of {len(outcomes)} found anything.", "",
        "| probe | found |", "|---|---|",
        *[f"| {name} | {'; '.join(f)[:300] if f else 'nothing'} |" for name, f in outcomes.items()],
        "",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/performance.md alone")
    args = parser.parse_args()
    sandbox.CACHE.size = 0  # measure real runs only
    summary = sandbox.isolation_summary(LIMITS)
    bare(CODE.format(i=-1))
    sandbox.run_python(CODE.format(i=-1), limits=LIMITS)  # warm-up: the isolation probe

    def sandboxed(fn, zygote: bool):
        def measure(i: int) -> float:
            os.environ["MASDSL_SANDBOX_ZYGOTE"] = "1" if zygote else "0"
            return timed(lambda: fn(i))
        return measure

    run_prog = lambda i: sandbox.run_python(CODE.format(i=i), limits=LIMITS)  # noqa: E731
    run_test = lambda i: sandbox.run_tests(CODE.format(i=i), [TEST], limits=LIMITS)  # noqa: E731
    bare_run, zyg_run, proc_run = interleaved(args.runs, lambda i: bare(CODE.format(i=i)),
                                              sandboxed(run_prog, True), sandboxed(run_prog, False))
    bare_test, zyg_test, proc_test = interleaved(args.runs, lambda i: bare(CODE.format(i=i) + TEST),
                                                 sandboxed(run_test, True), sandboxed(run_test, False))
    os.environ["MASDSL_SANDBOX_ZYGOTE"] = "1"

    rows = humaneval("all")
    n_tests = sum(len(r["tests"]) for r in rows)
    throughput = {}
    for label, zygote, pooled in (("zygote, one at a time", "1", False), ("zygote, worker pool", "1", True),
                                  ("new sandbox per run, worker pool", "0", True)):
        os.environ["MASDSL_SANDBOX_ZYGOTE"] = zygote
        jobs = [(r["solution"] + f"\n# {label} {time.time()}", r["tests"]) for r in rows]
        start = time.perf_counter()
        reports = (sandbox.run_tests_many(jobs, limits=LIMITS) if pooled
                   else [sandbox.run_tests(c, t, limits=LIMITS) for c, t in jobs])
        throughput[label] = time.perf_counter() - start
        assert all(r.pass_rate == 1.0 for r in reports), "a canonical solution failed"
    os.environ["MASDSL_SANDBOX_ZYGOTE"] = "1"

    b_run, b_test = median_ms(bare_run), median_ms(bare_test)
    load = os.getloadavg()[0]
    lines = [
        "## sandbox",
        "",
        f"Command: `.venv/bin/python benchmarks/sandbox.py --runs {args.runs}` "
        f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs shared with other work, "
        f"load average {load:.1f} at the end, Python {platform.python_version()}). Medians of {args.runs} "
        "runs, measurements interleaved so machine load hits both sides alike; the cache is off.",
        "",
        f"Isolation: {summary}",
        "",
        "| measurement | bare `python -c` subprocess | sandbox, zygote (default) | ratio | sandbox, new bwrap per run | ratio |",
        "|---|---|---|---|---|---|",
        f"| one program (`run_python`) | {b_run:.1f} ms | {median_ms(zyg_run):.1f} ms | {median_ms(zyg_run) / b_run:.2f}x "
        f"| {median_ms(proc_run):.1f} ms | {median_ms(proc_run) / b_run:.2f}x |",
        f"| one assert test (`run_tests`; bare: code + assert) | {b_test:.1f} ms | {median_ms(zyg_test):.1f} ms "
        f"| {median_ms(zyg_test) / b_test:.2f}x | {median_ms(proc_test):.1f} ms | {median_ms(proc_test) / b_test:.2f}x |",
        "",
        f"HumanEval canonical solutions: {len(rows)} programs, {n_tests} assert tests "
        f"(several tests share one sandboxed process, each under its own timer); pool of {sandbox.pool_size()} workers:",
        "",
        "| mode | wall | tests/s |",
        "|---|---|---|",
        *[f"| {label} | {secs:.1f} s | {n_tests / secs:.0f} |" for label, secs in throughput.items()],
        "",
        "Goal: at most 1.5x a bare subprocess per program.",
        "",
        *seen_and_probed(),
    ]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        update(DOC, replace_section, "sandbox", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
