"""docs/tutorial.md run as written, with the real model (SmolLM2-135M-Instruct): what its run shows.

    .venv/bin/python benchmarks/tutorial_run.py [--seeds 0 1] [--out benchmarks/results/tutorial.json]

Each seed runs the page's commands in a fresh folder (`masdsl.testing.tutorial.script`: the
same script `tests/benchmarks/test_tutorial.py` runs with a tiny model), with `train.seed=SEED` and MLflow
off added to `masdsl run` and `masdsl eval`. It records, per seed, the run's eval success and
reward before and after training on the same 16 held-out questions, each question's outcome
(for Wilson's interval over questions and McNemar's exact test, `masdsl/stats.py`), and the
wall time of the run and of the whole page. docs/tutorial.md states these numbers, and
tests/benchmarks/test_tutorial.py checks that the page and this file agree.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterable

from masdsl.runtime.records import StepRecord
from masdsl.runtime.rundir import RunDir
from masdsl.stats import mcnemar, wilson
from masdsl.testing.tutorial import script
from masdsl.training.significance import SOLVED, task_outcomes

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results" / "tutorial.json"


def outcomes(records: Iterable[StepRecord]) -> dict[str, int]:
    """task id -> 1 when its eval episode succeeded (`masdsl.training.significance.task_outcomes`)."""
    return {t: int(v >= SOLVED) for t, v in task_outcomes(records)["success"].items()}


def run_seed(seed: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.time()
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        r = subprocess.run(["bash", "-c", script(["tracking.enabled=false", f"train.seed={seed}"])], cwd=tmp,
                           capture_output=True, text=True, env=env)
        page_s = time.time() - t0
        if r.returncode != 0:
            raise SystemExit(f"the tutorial failed (seed {seed}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
        runs = Path(tmp) / "quiz" / "runs" / "quiz"
        (run,) = [d for d in runs.iterdir() if (d / "checkpoints").is_dir()]  # `masdsl eval` adds a folder
        summary = json.loads((run / "summary.json").read_text())
        first, last = RunDir(run).first_and_last_evaluation() or ((), ())
        before, after = outcomes(first), outcomes(last)
        n = len(before)
        return {"seed": seed, "run_s": summary["wall_s"], "page_s": round(page_s, 1), "steps": summary["steps"],
                "tasks": n, "success_before": summary["eval_before"]["success/eval"],
                "success_after": summary["eval_after"]["success/eval"],
                "reward_before": summary["eval_before"]["reward/eval"], "reward_after": summary["eval_after"]["reward/eval"],
                "ci_before": wilson(sum(before.values()), n), "ci_after": wilson(sum(after.values()), n),
                "mcnemar": mcnemar(before, after), "before": before, "after": after}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    path = Path(args.out)
    rows = json.loads(path.read_text()) if path.exists() else {}
    for seed in args.seeds:
        row = run_seed(seed)
        rows[str(seed)] = row
        path.write_text(json.dumps(rows, indent=1))
        print(f"seed {seed}: success {row['success_before']:.3f} -> {row['success_after']:.3f} "
              f"({sum(row['before'].values())} -> {sum(row['after'].values())} of {row['tasks']}), McNemar p "
              f"{row['mcnemar']['p']:.3g}; run {row['run_s']:.0f} s, page {row['page_s']:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
