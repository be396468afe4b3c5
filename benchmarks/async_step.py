"""Wall time per step, synchronous vs `train.async_rollout=1`, on the toy with the tiny random model.

    nice -n 19 .venv/bin/python benchmarks/async_step.py [--steps 10] [--threads 1] [--out benchmarks/results/async_step.json]

Each setting trains `tests/support/toy_data/toy_digits.mas` (its own `train { }`: K 16, 20 tasks, lr
1e-3) for `--steps` steps on the tiny Llama of `masdsl.testing.tiny` (hf engine, fp32, torch on
`--threads` threads), no evaluation between, no checkpoint but the last, in this process, one after
the other. Per setting it keeps the step metrics the run logs (`time/step_s`, `time/rollout_s`,
`time/update_s`, `time/sync_s`, `time/rollout_wait_s`) and their means over steps 2.. (step 1
samples synchronously in both settings; the last step has no rollout ahead), with the phase
model of docs/performance.md, "train.async_rollout": sync = rollout + update, async ~ max(rollout,
update) + what the overlap costs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

import masdsl
from masdsl.config import resolve_config
from masdsl.plan.run_plan import resolve_run
from masdsl.testing import build_tiny_model
from masdsl.runtime.rundir import RunDir
from masdsl.training.trainer import train

ROOT = Path(__file__).resolve().parent.parent
KEYS = ("time/step_s", "time/rollout_s", "time/update_s", "time/sync_s", "time/rollout_wait_s", "time/eval_s")


def run(mode: int, steps: int, model: Path, out: Path) -> dict:
    wf = masdsl.load(ROOT / "tests/support/toy_data/toy_digits.mas")
    cfg = resolve_config(wf.train, overrides=[
        *(f"policy.{p}.model={model}" for p in wf.policies), "tracking.enabled=false", "runtime.engine=hf",
        f"train.steps={steps}", "train.eval_every=0", "train.eval_tasks=2", f"train.async_rollout={mode}"])
    t0 = time.perf_counter()
    plan = resolve_run(wf, cfg)
    result = train(plan, RunDir.open(plan, out / f"async{mode}"))
    wall = time.perf_counter() - t0
    h = result.history
    middle = h[1:-1] if len(h) > 2 else h
    means = {k: statistics.fmean(x[k] for x in middle) for k in KEYS}
    means["time/step_s (less eval)"] = means["time/step_s"] - means["time/eval_s"]
    return {"async_rollout": mode, "steps": steps, "wall_s": wall, "means_steps_2_to_last_but_one": means,
            "per_step": [{k: x[k] for k in KEYS} | {"staleness": x["staleness"]} for x in h],
            "reward_last": (h[-1]["reward/namer/turn0/mean"] + h[-1]["reward/copier/turn0/mean"]) / 2}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/async_step.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        model = build_tiny_model(Path(tmp) / "model", seed=0)
        runs = [run(mode, args.steps, model, Path(tmp)) for mode in (0, 1)]
    for r in runs:
        m = r["means_steps_2_to_last_but_one"]
        print(f"async_rollout={r['async_rollout']}: step {m['time/step_s (less eval)']:.3f} s, rollout "
              f"{m['time/rollout_s']:.3f}, update {m['time/update_s']:.3f}, waited {m['time/rollout_wait_s']:.3f}",
              file=sys.stderr)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"threads": args.threads, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                    "runs": runs}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
