"""The paper's Tables 1 and 3 at CPU scale: does AT-GRPO make a built-in model better?

    .venv/bin/python benchmarks/learning.py [--steps 6] [--seeds 0 1 2] [--arms ...] [--warm-start DIR]
                                            [--model NAME] [--write-docs] [--out runs/learning]

Arms (the rows of the paper's tables), on the same generated 5x5 boards, greedy evaluation on the
same eval boards before and after training:

    single                 the planner alone, untrained        (the step-0 evaluation of single+grpo)
    mas                    tool -> planner, untrained          (the step-0 evaluation of mas+at)
    single+grpo            the planner alone trained with GRPO (`at` grouping of one role = GRPO per turn)
    mas+at                 the MAS trained with AT-GRPO, one shared policy
    mas+at+per-role        the MAS trained with AT-GRPO, one full policy per role (the paper's best)
    swapped                mas+at+per-role's two trained policies swapped (Table 3: evaluation only)
    mas+trajectory         the MAS trained with vanilla trajectory GRPO (one group per task)

The MAS is `workflows/plan_path_helper.mas` (the tool's program may `import grid`), the single
agent `workflows/plan_path_single.mas` on the same boards; both with `gamma=1.0`. Every training
arm draws the same number of candidates per decision (K) on the same tasks per step for the same
number of steps, from the same starting weights (`--warm-start`: a folder made by
`masdsl warm-start`, else `--model`). Success is the env's `solved()` at the end of an
episode; the interval is Wilson's 95 % interval over the distinct eval boards (a board's success
is its mean over the seeds; seeds add no trials: `masdsl/stats.py`), beside the spread of the
seeds' rates and McNemar's exact p-value of before vs after on the same boards, per seed. Results go to `<out>/results.json` as each run ends (a killed benchmark keeps what it
finished; `--resume` skips finished runs), the curves to docs/img/learning_curves.png and, with
`--write-docs`, the table to docs/performance.md (`## learning`).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

from perf_doc import DOC, machine, replace_section, update

from masdsl.stats import mcnemar, rate_over_tasks, wilson

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PNG = ROOT / "docs" / "img" / "learning_curves.png"
ARMS = ("single+grpo", "mas+at", "mas+at+per-role", "swapped", "mas+trajectory")
TRAINED = ("single+grpo", "mas+at", "mas+at+per-role", "mas+trajectory")
MAS_FILE, SINGLE_FILE = "plan_path_helper.mas", "plan_path_single.mas"


def workflow_text(arm: str, size: int, n_train: int, n_eval: int, max_turns: int, model: str) -> str:
    """The workflow of `arm` on `size` x `size` boards, every policy on `model`."""
    single = arm.startswith("single")
    text = (ROOT / "workflows" / (SINGLE_FILE if single else MAS_FILE)).read_text()
    text = re.sub(r"max_turns \d+", f"max_turns {max_turns}", text)
    text = re.sub(r'data train plan_path\("train", n=\d+(, size=\d+)?\)', f'data train plan_path("train", n={n_train}, size={size})', text)
    text = re.sub(r'data eval\s+plan_path\("eval", n=\d+(, size=\d+)?\)', f'data eval plan_path("eval", n={n_eval}, size={size})', text)
    text = text.replace('policy shared { model: "smollm2-135m-instruct" }', f'policy shared {{ model: "{model}" }}')
    if arm in ("mas+at+per-role", "swapped"):
        text = text.replace(f'policy shared {{ model: "{model}" }}',
                            f'policy tool_p    {{ model: "{model}" }}\npolicy planner_p {{ model: "{model}" }}')
        parts = text.split("role planner {")
        text = parts[0].replace("policy shared", "policy tool_p") + "role planner {" + parts[1].replace(
            "policy shared", "policy planner_p")
    return text


def task_outcomes(records: Path) -> dict[str, float]:
    """{eval task id: success} of one evaluation's records (a JSONL of step records, greedy: one
    episode per task)."""
    out: dict[str, float] = {}
    for line in records.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            out.setdefault(str(row["task_id"]), float(row.get("episode_success") or 0.0))
    return out


def load_arm(arm: str, args: argparse.Namespace):
    import masdsl

    name = f"plan_path_{arm.replace('+', '_').replace('-', '_')}"
    return masdsl.loads(workflow_text(arm, args.size, args.n_train, args.eval_tasks, args.max_turns, args.start_model),
                        name=name, base_dir=ROOT / "workflows")


def overrides_for(wf, seed: int, args: argparse.Namespace) -> list[str]:
    sample = [f"sample.{role}.temperature={args.temperature}" for role in wf.roles if args.temperature is not None]
    budgets = {"tool": args.tool_tokens, "planner": args.planner_tokens}  # the same for every arm
    sample += [f"sample.{role}.max_tokens={n}" for role, n in budgets.items() if n and role in wf.roles]
    return [
        f"train.steps={args.steps}", f"train.samples={args.samples}", f"train.batch={args.batch}",
        f"train.lr={args.lr}", f"train.seed={seed}", f"train.eval_tasks={args.eval_tasks}",
        f"train.eval_every={args.eval_every}", "train.checkpoint_every=0", "tracking.enabled=false",
        f"runtime.engine={args.engine}", *sample, *args.override,
    ]


def run_arm(arm: str, seed: int, args: argparse.Namespace) -> dict:
    from masdsl.config import resolve_config
    from masdsl.plan.run_plan import resolve_run
    from masdsl.runtime.rundir import RunDir
    from masdsl.training.trainer import train

    wf = load_arm(arm, args)
    overrides = overrides_for(wf, seed, args)
    if arm == "mas+trajectory":
        overrides.append("train.grouping=trajectory")
    cfg = resolve_config(wf.train, overrides=overrides)
    t0 = time.perf_counter()
    plan = resolve_run(wf, cfg)
    res = train(plan, RunDir.open(plan, Path(args.out) / f"{arm}-seed{seed}"), on_step=lambda step, h: print(
        f"  {arm} seed {seed} step {step}: reward {_mean_reward(h):.3f}, success/train {h['success/train']:.3f}, "
        f"non-flat {h.get('groups/nonflat_frac', float('nan')):.2f}", flush=True))
    n = args.eval_tasks  # the eval split holds exactly these boards
    evals = sorted((Path(args.out) / f"{arm}-seed{seed}" / "eval").glob("step_*.jsonl"))
    return {
        "tasks_before": task_outcomes(evals[0]), "tasks_after": task_outcomes(evals[-1]),  # McNemar's pairs
        "arm": arm, "seed": seed, "n_eval": n,
        "before": res.eval_before["success/eval"], "after": res.eval_after["success/eval"],
        "reward_before": res.eval_before["reward/eval"], "reward_after": res.eval_after["reward/eval"],
        "evals": [(e["step"], e["success/eval"], e["reward/eval"]) for e in res.evals],
        "train_reward": [_mean_reward(h) for h in res.history],
        "train_success": [h["success/train"] for h in res.history],
        "nonflat": [h.get("groups/nonflat_frac", float("nan")) for h in res.history],
        "samples": sum(h["tokens/generated"] for h in res.history),
        "wall_s": time.perf_counter() - t0,
    }


def run_swapped(seed: int, args: argparse.Namespace) -> dict:
    """Table 3's swap: the per-role run's trained tool policy plays the planner and vice versa."""
    from masdsl.api import evaluate
    from masdsl.training.export import export_run

    run_dir = Path(args.out) / f"mas+at+per-role-seed{seed}"
    wf = load_arm("swapped", args)
    folders = export_run(run_dir, workflow=wf, out=run_dir / "export")
    swap = [f"policy.tool_p.model={folders['planner_p']}", f"policy.planner_p.model={folders['tool_p']}"]
    t0 = time.perf_counter()
    ev = evaluate(wf, [*overrides_for(wf, seed, args), *swap], tasks=args.eval_tasks)
    m = ev.metrics
    return {"arm": "swapped", "seed": seed, "n_eval": args.eval_tasks, "before": None,
            "after": m["success/eval"], "reward_before": None, "reward_after": m["reward/eval"],
            "tasks_after": task_outcomes(ev.records),
            "evals": [], "train_reward": [], "train_success": [], "nonflat": [], "samples": 0,
            "wall_s": time.perf_counter() - t0}


def _mean_reward(h: dict) -> float:
    vals = [v for k, v in h.items() if k.startswith("reward/") and k.endswith("/mean")]
    return sum(vals) / len(vals) if vals else float("nan")


LABELS = {"single+grpo": "single agent + GRPO", "mas+at": "MAS + AT-GRPO, shared policy",
          "mas+at+per-role": "MAS + AT-GRPO, per-role policies", "swapped": "the same, the two policies swapped",
          "mas+trajectory": "MAS + trajectory GRPO"}


def summarise(results: list[dict]) -> list[dict]:
    """One row per table line: untrained rows from the step-0 evaluations, trained rows over the
    seeds: the rate over distinct eval tasks, its Wilson interval (n = tasks, not tasks x seeds),
    the seeds' spread and, where a run kept its per-task outcomes, McNemar's p per seed."""
    rows = []
    # "before RL": the starting weights, a warm start when `--warm-start` gives one (not untrained then)
    for label, arm in (("single agent, before RL", "single+grpo"), ("MAS, before RL", "mas+at")):
        rs = [r for r in results if r["arm"] == arm][:1]  # greedy step-0 evaluation: the same for every seed
        if rs:
            k = round(rs[0]["before"] * rs[0]["n_eval"])
            rows.append({"method": label, "seeds": "-", "n": rs[0]["n_eval"], "before": rs[0]["before"],
                         "after": None, "ci": wilson(k, rs[0]["n_eval"]), "per_seed": [],
                         "reward": (rs[0]["reward_before"], None)})
    for arm in ARMS:
        rs = [r for r in results if r["arm"] == arm]
        if not rs:
            continue
        n = rs[0]["n_eval"]  # every seed evaluates the same eval tasks: they are the trials
        after = rate_over_tasks([r["after"] for r in rs], n)
        trained = rs[0]["before"] is not None
        before = sum(r["before"] for r in rs) / len(rs) if trained else None
        paired = [mcnemar(r["tasks_before"], r["tasks_after"])["p"] for r in rs if "tasks_before" in r]
        rows.append({"method": LABELS[arm], "seeds": ",".join(str(r["seed"]) for r in rs), "n": n,
                     "before": before, "after": after["rate"], "ci": after["ci"],
                     "per_seed": after["per_seed"], "spread": after["spread"], "mcnemar_p": paired,
                     "gain": after["rate"] - before if trained else None,
                     "reward": (sum(r["reward_before"] for r in rs) / len(rs) if trained else None,
                                sum(r["reward_after"] for r in rs) / len(rs)),
                     "reward_per_seed": [r["reward_after"] for r in rs]})
    return rows


def table(rows: list[dict]) -> str:
    out = ["| method | seeds | eval tasks | success % before | success % after [95 % CI over tasks] | gain "
           "| after, per seed (spread) | McNemar p, per seed | eval reward before -> after (per seed) |",
           "|---|---|--:|--:|--:|--:|---|---|---|"]
    for r in rows:
        ci = f"[{100 * r['ci'][0]:.1f}, {100 * r['ci'][1]:.1f}]"
        after = "-" if r["after"] is None else f"{100 * r['after']:.1f} {ci}"
        before = "-" if r["before"] is None else f"{100 * r['before']:.1f}" + ("" if r["after"] is not None else f" {ci}")
        gain = "-" if r.get("gain") is None else f"{100 * r['gain']:+.1f}"
        seeds = ", ".join(f"{100 * x:.1f}" for x in r["per_seed"]) or "-"
        if len(r["per_seed"]) > 1:
            seeds += f" ({100 * r['spread']:.1f})"
        paired = ", ".join(f"{p:.3g}" for p in r.get("mcnemar_p", [])) or "-"
        rb, ra = r["reward"]
        if ra is None:
            reward = f"{rb:.3f}"
        else:
            reward = ("" if rb is None else f"{rb:.3f} -> ") + f"{ra:.3f} (" + ", ".join(
                f"{x:.3f}" for x in r["reward_per_seed"]) + ")"
        out.append(f"| {r['method']} | {r['seeds']} | {r['n']} | {before} | {after} | {gain} | {seeds} | {paired} "
                   f"| {reward} |")
    return "\n".join(out)


def plot(results: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    colors = dict(zip(TRAINED, ("tab:orange", "tab:blue", "tab:green", "tab:red")))
    for r in [r for r in results if r["arm"] in TRAINED]:
        first = r is next(x for x in results if x["arm"] == r["arm"])
        steps = range(1, len(r["train_reward"]) + 1)
        ax1.plot(steps, r["train_reward"], color=colors[r["arm"]], alpha=0.7, marker="o", ms=3,
                 label=r["arm"] if first else None)
        xs, _, ys = zip(*r["evals"])  # eval reward: at this scale it moves where success does not yet
        ax2.plot(xs, ys, color=colors[r["arm"]], alpha=0.7, marker="o", ms=3, label=r["arm"] if first else None)
    ax1.set_xlabel("training step"), ax1.set_ylabel("mean training reward (all roles and turns)")
    ax2.set_xlabel("training step"), ax2.set_ylabel("eval reward (greedy, mean per episode)")
    ax1.legend(fontsize=8), ax2.legend(fontsize=8)
    fig.suptitle(f"learning at CPU scale: Plan-Path 5x5, {title}, one line per seed")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=5)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--n-train", type=int, default=64)
    ap.add_argument("--eval-tasks", type=int, default=24)
    ap.add_argument("--eval-every", type=int, default=2)
    ap.add_argument("--max-turns", type=int, default=1, help="the flow's max_turns")
    ap.add_argument("--temperature", type=float, default=1.0, help="training sampling temperature of every role")
    ap.add_argument("--tool-tokens", type=int, default=96, help="the tool's max_tokens in every arm")
    ap.add_argument("--planner-tokens", type=int, default=48, help="the planner's max_tokens in every arm")
    ap.add_argument("--model", default="smollm2-135m-instruct", help="the built-in model or folder every arm starts from")
    ap.add_argument("--warm-start", default="", help="a `masdsl warm-start` folder every arm starts from")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--one-seed", nargs="*", default=["mas+trajectory"], help="arms run on the first seed only")
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    ap.add_argument("--engine", default="auto")
    ap.add_argument("--override", nargs="*", default=[], help="more dotted config overrides for every run")
    ap.add_argument("--out", default=str(ROOT / "runs" / "learning"))
    ap.add_argument("--resume", action="store_true", help="keep finished runs from <out>/results.json")
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    args.start_model = str(Path(args.warm_start).resolve()) if args.warm_start else args.model

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    store = out / "results.json"
    results: list[dict] = json.loads(store.read_text()) if args.resume and store.exists() else []
    t0 = time.perf_counter()
    for arm in args.arms:
        for seed in (args.seeds[:1] if arm in args.one_seed else args.seeds):
            if any(r["arm"] == arm and r["seed"] == seed for r in results):
                continue
            if arm == "swapped" and not any(r["arm"] == "mas+at+per-role" and r["seed"] == seed for r in results):
                continue  # needs that seed's per-role run
            r = run_swapped(seed, args) if arm == "swapped" else run_arm(arm, seed, args)
            results.append(r)
            store.write_text(json.dumps(results, indent=1))
            before = "-" if r["before"] is None else f"{r['before']:.3f}"
            print(f"[{time.perf_counter() - t0:7.0f} s] {arm} seed {seed}: success {before} -> {r['after']:.3f}, "
                  f"eval reward -> {r['reward_after']:.3f} ({r['wall_s']:.0f} s)", flush=True)
    rows = summarise(results)
    start = f"the warm start `{Path(args.warm_start).name}`" if args.warm_start else f"`{args.model}`"
    plot(results, PNG, start)
    cmd = " ".join(["benchmarks/learning.py", *sys.argv[1:]])
    text = (f"## learning\n\nMeasured with `.venv/bin/python {cmd}` ({machine()}): Plan-Path on {args.size}x{args.size} "
            f"boards, max_turns {args.max_turns}, K = {args.samples}, {args.batch} tasks per step, {args.steps} steps, "
            f"lr {args.lr}, training temperature {args.temperature}, {args.eval_tasks} eval boards, greedy, every arm "
            f"from {start}; {time.perf_counter() - t0:.0f} s in this invocation.\n\n"
            + table(rows) + "\n\n![learning curves](img/learning_curves.png)\n")
    print(text)
    if args.write_docs:
        update(DOC, replace_section, "learning", text)
        (HERE / "results" / "learning.json").write_text(json.dumps(results, indent=1))  # the raw rows, kept
    return 0


if __name__ == "__main__":
    sys.exit(main())
