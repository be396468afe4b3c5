"""Per-role advantage estimators against the default, and an alternating schedule against joint
training, on the toy workflow (issue 32 items 1 and 2). No goal is set on the numbers.

    .venv/bin/python benchmarks/estimators_schedules.py [--seeds 0 1 2] [--steps 60] [--write-docs]

The toy is tests/support/toy_data/toy_digits.mas (a namer says a hidden digit, a copier repeats it;
a tiny random model trained from scratch on CPU; K = 16, 20 tasks a step, lr 1e-3, as the
file says). Part A names an estimator for each role with its `advantage` line; part B gives each
role its own policy (`a` the namer's, `b` the copier's) and compares updating both every step
with `train { alternate: ["a", "b"], alternate_every: 5 }` (each policy updates 5 steps in
turn, so half as often). Eval: greedy success (both digits right) on the 10 eval tasks every 10
steps. The numbers go to docs/performance.md (`## learner`) and benchmarks/results/estimators_schedules.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TOY = ROOT / "tests" / "support" / "toy_data" / "toy_digits.mas"
RESULTS = HERE / "results" / "estimators_schedules.json"
# part A: label -> (namer's estimator, copier's estimator); None: no `advantage` line
ESTIMATORS = {"grpo (default)": (None, None), "drgrpo": ("drgrpo", "drgrpo"), "rloo": ("rloo", "rloo"),
              "grpo_agent_norm": ("grpo_agent_norm", "grpo_agent_norm"),
              "namer rloo, copier grpo_agent_norm": ("rloo", "grpo_agent_norm")}
# part B: label -> the extra `train { }` keys
SCHEDULES = {"joint (a and b every step)": "", "alternate a/b every 5 steps": ', alternate: ["a", "b"], alternate_every: 5'}


def estimator_text(namer: str | None, copier: str | None) -> str:
    text = TOY.read_text()
    for reward, name in (("reward same(digit, task.target)\n", namer), ("reward same(digit, namer.digit)\n", copier)):
        if name is not None:
            text = text.replace(reward, f"{reward}  advantage {name}\n", 1)
    return text


def schedule_text(extra: str) -> str:
    text = TOY.read_text().replace('policy shared { model: "smollm2-135m-instruct" }',
                                   'policy a { model: "smollm2-135m-instruct" }\npolicy b { model: "smollm2-135m-instruct" }')
    text = text.replace("role namer {\n  policy shared", "role namer {\n  policy a")
    text = text.replace("role copier {\n  policy shared", "role copier {\n  policy b")
    return text.replace("eval_every: 10 }", f"eval_every: 10{extra} }}")


def run(text: str, seed: int, steps: int, model_dir: Path) -> dict:
    import masdsl
    from masdsl.config import resolve_config
    from masdsl.plan.run_plan import resolve_run
    from masdsl.runtime.rundir import RunDir
    from masdsl.training.trainer import train

    wf = masdsl.loads(text, name="toy_digits", base_dir=TOY.parent)
    models = [f"policy.{p}.model={model_dir}" for p in wf.policies]
    cfg = resolve_config(wf.train, overrides=[*models, "runtime.engine=hf", "tracking.enabled=false",
                                              f"train.seed={seed}", f"train.steps={steps}", "train.eval_every=10"])
    t0 = time.perf_counter()
    plan = resolve_run(wf, cfg)
    res = train(plan, RunDir.open(plan, Path(tempfile.mkdtemp(prefix=f"est-sched-{seed}-"))))
    curve = [(e["step"], e["success/eval"]) for e in res.evals]
    return {"seed": seed, "curve": curve, "final": curve[-1][1], "wall_s": time.perf_counter() - t0}


def table(results: list[dict], labels: list[str], what: str, steps: int) -> str:
    seeds = sorted({r["seed"] for r in results})
    rows = [f"| {what} | " + " | ".join(f"seed {s}" for s in seeds) + " | mean final | mean steps to >= 0.9 |",
            "|---" * (len(seeds) + 3) + "|"]
    for label in labels:
        rs = [r for r in results if r["label"] == label]
        first = [next((s for s, v in r["curve"] if v >= 0.9), None) for r in rs]
        reached = [f for f in first if f is not None]
        mean_first = f"{sum(reached) / len(reached):.0f} ({len(reached)}/{len(rs)} seeds)" if reached else f"never in {steps}"
        rows.append(f"| {label} | " + " | ".join(f"{r['final']:.2f}" for r in rs) +
                    f" | {sum(r['final'] for r in rs) / len(rs):.2f} | {mean_first} |")
    return "\n".join(rows)


def doc_block(results: list[dict], args) -> str:
    a = [r for r in results if r["part"] == "A"]
    b = [r for r in results if r["part"] == "B"]
    curves = "\n".join(f"- {r['label']}, seed {r['seed']}: " + ", ".join(f"{s}: {v:.1f}" for s, v in r["curve"])
                       for r in results)
    wall = sum(r["wall_s"] for r in results)
    return (
        "### Per-role advantage estimators and an alternating schedule\n\n"
        "Toy `tests/support/toy_data/toy_digits.mas` (namer names a hidden digit, copier repeats it; tiny random\n"
        f"model from scratch, CPU; K = 16, 20 tasks a step), {args.steps} steps; eval success (greedy, both digits\n"
        "right, 10 eval tasks) every 10 steps. Command:\n"
        f"`.venv/bin/python benchmarks/estimators_schedules.py --seeds {' '.join(map(str, args.seeds))} "
        f"--steps {args.steps} --write-docs` ({time.strftime('%Y-%m-%d', time.gmtime())}, {wall / 60:.0f} min for the "
        f"{len(results)} runs on a shared 2-core machine).\n\n"
        "Estimators (each role's `advantage` line; one shared policy):\n\n"
        f"{table(a, list(ESTIMATORS), 'advantage', args.steps)}\n\n"
        "Schedules (a policy per role: `a` the namer's, `b` the copier's; under alternation each policy\n"
        "updates on half the steps, so it gets half the updates of joint training):\n\n"
        f"{table(b, list(SCHEDULES), 'schedule', args.steps)}\n\n"
        "All runs use the file's lr 1e-3, tuned on `grpo`. Both roles' rewards are 0 or 1, so `drgrpo` and\n"
        "`rloo`, which do not divide by a std, give advantages of at most 1 and mostly about half of\n"
        "`grpo`'s (a 0/1 group of 16 has a std of at most 0.52): at one lr they take smaller steps, so\n"
        "this compares estimators at one learning rate, not each at its best. With one reward scale\n"
        "for both roles `grpo_agent_norm` has no scales to even out; it scales each group by its role's\n"
        "spread over the step instead of the group's own. Under alternation each policy updates on half\n"
        "the steps, so in 60 steps it has had 30 updates against joint training's 60.\n\n"
        f"Curves (step: success):\n\n{curves}"
    )


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
    jobs = [("A", label, estimator_text(*names)) for label, names in ESTIMATORS.items()]
    jobs += [("B", label, schedule_text(extra)) for label, extra in SCHEDULES.items()]
    results = []
    for seed in args.seeds:
        for part, label, text in jobs:
            r = {"part": part, "label": label, **run(text, seed, args.steps, model_dir)}
            print(f"{label:40s} seed {seed}: {r['curve']}  ({r['wall_s']:.0f} s)", flush=True)
            results.append(r)
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    block = doc_block(results, args)
    print(block)
    if args.write_docs:
        sys.path.insert(0, str(HERE))
        from perf_doc import DOC, replace_block, update

        update(DOC, replace_block, "learner", "<!-- learner:estimators_schedules -->",
               "<!-- /learner:estimators_schedules -->", block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
