"""Step time with the learner in the driver vs on 1 and 2 Ray learner workers, and the weight sync per step.

    .venv/bin/python benchmarks/scale.py [--steps 3] [--workers 0 1 2]

The embedded SmolLM2-135M-Instruct (float32, CPU), `tests/support/toy_data/toy_digits.mas` with a
dense reward (the output's length, up to 4 tokens, so no group is flat), 4 tasks x K = 4 per
step: 16 rows per role, 32 rows, two PPO mini-batches of 16, AdamW lr 1e-6. Engines run in a Ray
actor (`runtime.ray=true`), so every configuration pays the same weight sync into the engine.
Per step it reports:

- `update_s`: the update phase of `train_step` (with workers: submit, both ranks' forward and
  backward, all-reduce, AdamW, rank 0's new weights into the object store);
- `return_s` (workers only): from rank 0's end of the update to the driver holding the ref of
  the new weights (the driver no longer loads them after each update);
- `sync_s`: `TrainSession.sync_all`: the weights into the engine actor (the driver's, or with
  workers the object-store ref rank 0 left, which the actor reads directly).

`--via-driver` (workers only) measures the path before the engines read the object store: after
each update the driver loads rank 0's weights into its model (counted in `return_s`) and sends
them to the engine itself.

The first step is a warm-up; the table holds the mean of the others. Each configuration runs in
its own process (`--one N`).
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

ROOT = Path(__file__).resolve().parent.parent
TOY = ROOT / "tests" / "support" / "toy_data"


def one(workers: int, steps: int, via_driver: bool = False) -> dict[str, float]:
    """Run `steps` training steps with `runtime.learner_workers=workers`; per-step timings."""
    import masdsl
    from masdsl.config import resolve_config
    from masdsl.plan.run_plan import resolve_run
    from masdsl.training.display import Progress
    from masdsl.training.session import open_session, start_state
    from masdsl.training.step import train_step
    from masdsl.training.trainer import next_batch, seed_everything

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    text = (TOY / "toy_digits.mas").read_text()
    for role_reward in ("reward same(digit, task.target)", "reward same(digit, namer.digit)"):
        text = text.replace(role_reward, "reward len(output)")
    wf = masdsl.loads(text.replace("max_tokens: 1", "max_tokens: 4"), name="scale", base_dir=TOY)
    cfg = resolve_config(wf.train, overrides=[
        "tracking.enabled=false", "runtime.engine=hf", "runtime.ray=true", f"runtime.learner_workers={workers}",
        "train.samples=4", "train.batch=4", "train.mini_batch_size=16", "train.lr=1e-6", f"train.steps={steps}"])
    seed_everything(0)
    session = open_session(resolve_run(wf, cfg), Path(tempfile.mkdtemp()), Progress(None, steps))
    rows: list[dict[str, float]] = []
    try:
        state = start_state(session, None)
        session.sync_all()
        for _ in range(steps):
            idx, cursor = next_batch(len(session.train_rows), cfg.train.batch, cfg.train.seed, state.cursor)
            t0 = time.perf_counter()
            m = train_step(session, state, [session.train_rows[i] for i in idx], cursor)
            step_s = time.perf_counter() - t0
            ret = sum(g.return_s for g in session.groups.values())
            if via_driver:  # the former path: weights into the driver's model, then sent to the engine
                t0 = time.perf_counter()
                for p in session.policies.values():
                    p.current()
                    p.remote_weights = None
                step_s += time.perf_counter() - t0
                ret += time.perf_counter() - t0
            t0 = time.perf_counter()
            session.sync_all()
            sync_s = time.perf_counter() - t0
            rows.append({"step_s": step_s + sync_s, "rollout_s": m["time/rollout_s"], "update_s": m["time/update_s"],
                         "return_s": ret, "sync_s": sync_s})
    finally:
        session.close()
    rest = rows[1:] or rows
    return {k: sum(r[k] for r in rest) / len(rest) for k in rest[0]}


def table(results: dict[int, dict[str, float]]) -> str:
    lines = ["| learner | step s | rollout s | update s | rank 0 end to driver s | sync to engine s |",
             "|---|--:|--:|--:|--:|--:|"]
    for n, r in results.items():
        who = "driver (`learner_workers=0`)" if n == 0 else f"{n} worker{'s' if n > 1 else ''}"
        back = f"{r['return_s']:.2f}" if n else "-"
        lines.append(f"| {who} | {r['step_s']:.2f} | {r['rollout_s']:.2f} | {r['update_s']:.2f} | {back} | "
                     f"{r['sync_s']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--via-driver", action="store_true", help="workers' weights reach the engine through the driver")
    ap.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one is not None:
        print("RESULT " + json.dumps(one(args.one, args.steps, args.via_driver)))
        return
    results = {}
    for n in args.workers:
        via = ["--via-driver"] if args.via_driver else []
        out = subprocess.run([sys.executable, __file__, "--one", str(n), "--steps", str(args.steps), *via],
                             capture_output=True, text=True, check=True).stdout
        results[n] = json.loads(next(l for l in out.splitlines() if l.startswith("RESULT "))[7:])
        print(n, results[n], flush=True)
    print(table(results))  # docs/performance.md `## scale` holds it, with the machine's load


if __name__ == "__main__":
    main()
