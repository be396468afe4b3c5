"""AT-GRPO (`at`: groups per task, role and turn) vs vanilla GRPO (`trajectory`: one group per
task, scored by the episode outcome), same toy, same number of samples, several seeds.

    .venv/bin/python benchmarks/grouping_ablation.py [--seeds 0 1 2] [--steps 60] [--write-docs]

The toy is tests/support/toy_data/toy_digits.mas (a namer says a hidden digit, a copier repeats
it; a tiny random model trained from scratch on CPU). `at` uses tree sampling with K = 16
candidates per role step; `trajectory` runs K = 16 independent episodes per task: both
generate 2 roles x 16 x 20 tasks = 640 samples per step. Eval: greedy success rate (both
digits right) on the 10 eval tasks every 10 steps. The curves go to
docs/img/learner_grouping_ablation.png and the numbers to docs/performance.md (`## learner`).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TOY = ROOT / "tests" / "support" / "toy_data" / "toy_digits.mas"
PNG = ROOT / "docs" / "img" / "learner_grouping_ablation.png"
NOTE = (
    '`trajectory` scores each episode only by its outcome (the team reward: both digits right), so\n'
    "a task's K episodes differ only when one of them gets both digits right, which a random model\n"
    "almost never does; `at` scores each role's K candidates at their own decision (the namer on the\n"
    "target, the copier on the namer's digit), so both roles get a signal from the first steps."
)


def run(mode: str, seed: int, steps: int, model_dir: Path) -> dict:
    import masdsl
    from masdsl.config import resolve_config
    from masdsl.plan.run_plan import resolve_run
    from masdsl.runtime.rundir import RunDir
    from masdsl.training.trainer import train

    wf = masdsl.load(TOY)
    cfg = resolve_config(wf.train, overrides=[
        f"policy.shared.model={model_dir}", "runtime.engine=hf", "tracking.enabled=false",
        f"train.grouping={mode}", f"train.seed={seed}", f"train.steps={steps}", "train.eval_every=10",
    ])
    t0 = time.perf_counter()
    plan = resolve_run(wf, cfg)
    res = train(plan, RunDir.open(plan, Path(tempfile.mkdtemp(prefix=f"ablation-{mode}-{seed}-"))))
    curve = [(e["step"], e["success/eval"]) for e in res.evals]
    samples = sum(h["tokens/generated"] for h in res.history)
    return {"mode": mode, "seed": seed, "curve": curve, "final": curve[-1][1], "samples": samples,
            "wall_s": time.perf_counter() - t0}


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4), constrained_layout=True)
    colors = {"at": "tab:blue", "trajectory": "tab:orange"}
    for r in results:
        xs, ys = zip(*r["curve"])
        ax.plot(xs, ys, color=colors[r["mode"]], alpha=0.8, marker="o", ms=3,
                label=r["mode"] if r["seed"] == results[0]["seed"] else None)
    ax.set_xlabel("training step")
    ax.set_ylabel("eval success (greedy)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("toy_digits: AT-GRPO (at) vs vanilla GRPO (trajectory), one line per seed")
    ax.legend()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def table(results: list[dict], steps: int) -> str:
    modes = ("at", "trajectory")
    rows = ["| grouping | " + " | ".join(f"seed {r['seed']}" for r in results if r["mode"] == "at") +
            " | mean final | mean steps to >= 0.9 |",
            "|---" * (len([r for r in results if r["mode"] == "at"]) + 3) + "|"]
    for m in modes:
        rs = [r for r in results if r["mode"] == m]
        first = [next((s for s, v in r["curve"] if v >= 0.9), None) for r in rs]
        reached = [f for f in first if f is not None]
        mean_first = f"{sum(reached) / len(reached):.0f} ({len(reached)}/{len(rs)} seeds)" if reached else f"never in {steps}"
        rows.append(f"| `{m}` | " + " | ".join(f"{r['final']:.2f}" for r in rs) +
                    f" | {sum(r['final'] for r in rs) / len(rs):.2f} | {mean_first} |")
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    import torch

    from masdsl.testing import build_tiny_model

    torch.set_num_threads(1)  # tiny models: one thread is fastest, and steady on a shared machine
    model_dir = build_tiny_model(seed=0)
    results = []
    for seed in args.seeds:
        for mode in ("at", "trajectory"):
            r = run(mode, seed, args.steps, model_dir)
            print(f"{mode:10s} seed {seed}: {r['curve']}  ({r['wall_s']:.0f} s, {r['samples']:.0f} tokens)", flush=True)
            results.append(r)
    text = table(results, args.steps)
    print(text)
    if args.write_docs:
        sys.path.insert(0, str(HERE))
        from perf_doc import DOC, replace_block, update

        plot(results, PNG)
        curves = "\n".join(f"- `{r['mode']}` seed {r['seed']}: " + ", ".join(f"{s}: {v:.1f}" for s, v in r["curve"])
                           for r in results)
        body = (
            "Toy `tests/support/toy_data/toy_digits.mas` (namer names a hidden digit, copier repeats it; tiny random\n"
            f"model from scratch, CPU), {args.steps} steps, equal samples per step (640 generations) and seeds.\n"
            "Eval success (greedy, both digits right, 10 eval tasks); command:\n"
            f"`.venv/bin/python benchmarks/grouping_ablation.py --seeds {' '.join(map(str, args.seeds))} "
            f"--steps {args.steps} --write-docs` ({time.strftime('%Y-%m-%d', time.gmtime())}).\n\n"
            f"{text}\n\n{NOTE}\n\nCurves (step: success):\n\n{curves}\n\n"
            "![grouping ablation](img/learner_grouping_ablation.png)"
        )
        update(DOC, replace_block, "learner", "<!-- learner:grouping_ablation -->", "<!-- /learner:grouping_ablation -->",
               f"### Grouping ablation: `at` vs `trajectory`\n\n{body}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
