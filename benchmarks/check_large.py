"""Benchmark: `masdsl check` on a generated workflow with 200 roles and 1,000 edges.

Run: .venv/bin/python benchmarks/check_large.py [--roles 200] [--repeat 5] [--no-write]
Reports the wall time of the whole command (`masdsl check FILE` in a fresh process: Python
start-up, imports, registry, parse, checks), of Python's own start-up (`python -c pass`, the
floor), and of the in-process `analyze(build=False)` alone (what the command runs), then
appends the figures to docs/performance.md under `## language`. Goal: under 0.5 s.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from perf_doc import DOC, append_line, machine, update

ROOT = Path(__file__).resolve().parents[1]
JUMPS = (2, 3, 5)


def generate(n_roles: int) -> tuple[str, int]:
    """A valid workflow: a ring of roles with guarded jumps and exits; returns (text, edges)."""
    lines = ['workflow large "Generated for benchmarks/check_large.py."', "env code",
             'data train humaneval("train")', 'data eval  humaneval("eval")',
             'policy shared { model: "smollm2-135m-instruct" }', ""]
    for i in range(n_roles):
        prev = f"{{{{ r{i - 1}.code }}}}" if i else "{{ task.prompt }}"
        lines += [f"role r{i} {{", "  policy shared",
                  f'  prompt """\n    Improve this solution (step {i}).\n    {{{{ task.prompt }}}}\n    {prev}\n  """',
                  "  sample { temperature: 1.0, max_tokens: 64 }",
                  '  parse code = code_block(output, "python")', "  reward pass_rate(code, task.tests)", "}", ""]
    edges = ["  max_turns 3", "  start -> r0"]
    for i in range(n_roles):
        edges.append(f"  r{i} -> end when passes(r{i}.code, task.tests) and turn >= 1")
        edges += [f"  r{i} -> r{(i + k) % n_roles} when len(r{i}.code) > {k * 10}" for k in JUMPS]
        edges.append(f"  r{i} -> r{(i + 1) % n_roles}")
    lines += ["flow {", *edges, "}", "", "team pass_rate(r0.code, task.tests)",
              "train { samples: 4, batch: 4, steps: 3, lr: 1e-6 }", ""]
    return "\n".join(lines), len(edges) - 1


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def time_cli(path: Path | None, repeat: int) -> tuple[list[float], list[float]]:
    """(wall seconds, CPU seconds) of each `masdsl check FILE` process (`python -c pass` without a path)."""
    wall, cpu = [], []
    args = ["-m", "masdsl.cli", "check", str(path)] if path is not None else ["-c", "pass"]
    for _ in range(repeat):
        c0, t0 = _children_cpu(), time.perf_counter()
        r = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT)
        wall.append(time.perf_counter() - t0)
        cpu.append(_children_cpu() - c0)
        if r.returncode != 0:
            sys.exit(f"check failed:\n{r.stdout}{r.stderr}")
    return wall, cpu


def time_analyze(text: str, path: Path, repeat: int) -> list[float]:
    from masdsl.envs.registry import load_builtins
    from masdsl.lang import analyze

    load_builtins()
    analyze(text, str(path), path.parent, build=False)  # warm: imports
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        a = analyze(text, str(path), path.parent, build=False)
        out.append(time.perf_counter() - t0)
        assert a.ok, a.errors[:3]
    return out


@contextmanager
def large_workflow(roles: int) -> Iterator[tuple[str, Path, int]]:
    """The generated workflow's text, written to a temporary `large.mas`, and its edge count."""
    text, n_edges = generate(roles)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "large.mas"
        path.write_text(text)
        yield text, path, n_edges


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--roles", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--no-write", action="store_true", help="do not append to docs/performance.md")
    args = ap.parse_args()
    with large_workflow(args.roles) as (text, path, n_edges):
        cli, cli_cpu = time_cli(path, args.repeat)
        bare, _ = time_cli(None, args.repeat)
        inproc = time_analyze(text, path, args.repeat)
    lines = len(text.splitlines())
    summary = (f"- {machine()}: `masdsl check` on "
               f"{args.roles} roles, {n_edges} edges ({lines} lines): whole command median {statistics.median(cli):.2f} s "
               f"wall (min {min(cli):.2f}, n={len(cli)}; CPU median {statistics.median(cli_cpu):.2f} s), of which Python's "
               f"own start-up (`python -c pass`) median {statistics.median(bare):.3f} s; parse + check in process "
               f"median {statistics.median(inproc):.3f} s (min {min(inproc):.3f}). The machine is shared, so wall times "
               f"vary with load. Goal < 0.5 s. Command: `.venv/bin/python benchmarks/check_large.py`")
    print(summary)
    if not args.no_write:
        update(DOC, append_line, "language", summary)


if __name__ == "__main__":
    main()
