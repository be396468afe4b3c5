"""The sandbox's start-up cost, A/B between source trees:
`python benchmarks/sandbox_startup.py [--rounds R] [--runs N] TREE [TREE ...]`.

For each round and each TREE in turn (so load drift hits every tree alike), a fresh process with
TREE first on `sys.path` measures, with the cache off, the median of N:
- `per run`: a `run_python` in a new bubblewrap sandbox and interpreter (MASDSL_SANDBOX_ZYGOTE=0);
- `zygote fork`: a `run_python` forked by the zygote (the default);
- `zygote start`: starting a zygote and running its probe program (what a process pays once);
and the one-time set-up of the isolation (probing the modes, and in a sealed sandbox working
out what to bind). Prints, per tree, the median over rounds of each round's median, in ms.
Used for docs/performance.md (`## sandbox`): the HEAD tree (`git archive HEAD masdsl | tar -x
-C /tmp/old`) against the working tree.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

_CHILD = r"""
import json, os, statistics, sys, time
sys.path.insert(0, sys.argv[1])
runs = int(sys.argv[2])
from masdsl import sandbox
from masdsl.sandbox import isolation
sandbox.CACHE.size = 0
t = time.perf_counter(); isolation.choose_mode("auto"); setup = time.perf_counter() - t
def timed(fn):
    t = time.perf_counter(); fn(); return time.perf_counter() - t
out = {"setup": setup, "per run": [], "zygote fork": [], "zygote start": []}
for i in range(runs):
    os.environ["MASDSL_SANDBOX_ZYGOTE"] = "0"
    out["per run"].append(timed(lambda: sandbox.run_python(f"x = {i}")))
    os.environ["MASDSL_SANDBOX_ZYGOTE"] = "1"
    if i == 0:
        sandbox.run_python("x = -1")  # the first zygote
    out["zygote fork"].append(timed(lambda: sandbox.run_python(f"y = {i}")))
for i in range(max(3, runs // 4)):
    isolation._close_zygotes()
    mode = isolation.choose_mode("auto")
    out["zygote start"].append(timed(lambda: isolation.zygote_for(mode)))
print(json.dumps({k: v if k == "setup" else statistics.median(v) for k, v in out.items()}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="+", help="source trees holding a `masdsl` package")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=20, help="runs measured per round (median taken)")
    args = parser.parse_args()
    results: dict[str, list[dict]] = {tree: [] for tree in args.trees}
    for _ in range(args.rounds):
        for tree in args.trees:
            proc = subprocess.run([sys.executable, "-c", _CHILD, os.path.abspath(tree), str(args.runs)],
                                  capture_output=True, text=True, check=True, cwd="/tmp")
            results[tree].append(json.loads(proc.stdout.splitlines()[-1]))
    print(f"{args.rounds} rounds x {args.runs} runs, load average {os.getloadavg()[0]:.1f} at the end; ms, "
          "median over rounds of each round's median")
    print("| tree | one-time set-up | per run (new bwrap) | zygote fork | zygote start |")
    print("|---|---|---|---|---|")
    for tree, rounds in results.items():
        cell = {k: 1000 * statistics.median(r[k] for r in rounds) for k in rounds[0]}
        print(f"| {tree} | {cell['setup']:.0f} | {cell['per run']:.1f} | {cell['zygote fork']:.1f} "
              f"| {cell['zygote start']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
