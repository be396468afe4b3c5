"""The paper's Tables 1 and 3 at CPU scale: does AT-GRPO make the embedded model better?

    .venv/bin/python benchmarks/learning.py [--task plan_path] [--size 5] [--steps 4] [--seeds 0 1 2]
                                            [--arms ...] [--write-docs] [--out runs/learning]

Arms (the rows of the paper's tables), on the same generated boards, the embedded
SmolLM2-135M-Instruct, greedy evaluation on the same eval boards before and after training:

    single                 the planner alone, untrained        (the step-0 evaluation of single+grpo)
    mas                    tool -> planner, untrained          (the step-0 evaluation of mas+at)
    single+grpo            the planner alone trained with GRPO (`at` grouping of one role = GRPO per turn)
    mas+at                 the MAS trained with AT-GRPO, one shared policy
    mas+at+per-role        the MAS trained with AT-GRPO, one LoRA adapter per role on a shared base
    mas+trajectory         the MAS trained with vanilla trajectory GRPO (one group per task)

Every training arm draws the same number of candidates per decision (K) on the same number of
tasks per step for the same number of steps. Success is the env's `solved()` at the end of an
episode; the interval is Wilson's 95 % interval over all eval episodes of the arm (eval boards x
seeds). Results go to `<out>/results.json` as each run ends (a killed benchmark keeps what it
finished; `--resume` skips finished runs), the curves to docs/img/learning_curves.png and, with
`--write-docs`, the table to docs/performance.md (`## learning`).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from pathlib import Path

from perf_doc import DOC, replace_section, update

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PNG = ROOT / "docs" / "img" / "learning_curves.png"
ARMS = ("single+grpo", "mas+at", "mas+at+per-role", "mas+trajectory")
ONE_SEED = ("mas+at+per-role", "mas+trajectory")  # the paper's 1-seed rows, to fit the hour


def workflow_text(task: str, arm: str, size: int, n_train: int, n_eval: int, max_turns: int = 0) -> str:
    """The shipped workflow of `arm`, on `size` x `size` boards; per-role LoRA policies when asked."""
    single = arm.startswith("single")
    text = (ROOT / "workflows" / f"{task}{'_single' if single else ''}.mas").read_text()
    if max_turns:
        text = re.sub(r"max_turns \d+", f"max_turns {max_turns}", text)
    text = re.sub(rf'data train {task}\("train", n=\d+\)', f'data train {task}("train", n={n_train}, size={size})', text)
    text = re.sub(rf'data eval\s+{task}\("eval", n=\d+\)', f'data eval {task}("eval", n={n_eval}, size={size})', text)
    if arm == "mas+at+per-role":
        text = text.replace('policy shared { model: "smollm2-135m-instruct" }',
                            'policy tool_p    { model: "smollm2-135m-instruct", lora: { r: 16, alpha: 32 } }\n'
                            'policy planner_p { model: "smollm2-135m-instruct", lora: { r: 16, alpha: 32 } }')
        parts = text.split("role planner {")
        text = parts[0].replace("policy shared", "policy tool_p") + "role planner {" + parts[1].replace(
            "policy shared", "policy planner_p")
    return text


def wilson(successes: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson's score interval for a proportion.

    >>> [round(x, 3) for x in wilson(0, 20)], [round(x, 3) for x in wilson(10, 20)]
    ([0.0, 0.161], [0.299, 0.701])
    """
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def run_arm(arm: str, seed: int, args: argparse.Namespace) -> dict:
    import masdsl
    from masdsl.config import resolve_config
    from masdsl.learner.trainer import train

    name = f"{args.task}_{arm.replace('+', '_').replace('-', '_')}"
    wf = masdsl.loads(workflow_text(args.task, arm, args.size, args.n_train, args.eval_tasks, args.max_turns),
                      name=name, base_dir=ROOT / "workflows")
    tokens = {"tool": args.tool_tokens, "planner": args.planner_tokens}
    sample = [f"sample.{role}.max_tokens={n}" for role, n in tokens.items() if n and role in wf.roles]
    sample += [f"sample.{role}.temperature={args.temperature}" for role in wf.roles if args.temperature is not None]
    overrides = [
        f"train.steps={args.steps}", f"train.samples={args.samples}", f"train.batch={args.batch}",
        f"train.lr={args.lr}", f"train.seed={seed}", f"train.eval_tasks={args.eval_tasks}",
        f"train.eval_every={args.eval_every}", "train.checkpoint_every=0", "tracking.enabled=false",
        f"runtime.engine={args.engine}", *sample, *args.override,
    ]
    if arm == "mas+trajectory":
        overrides.append("train.grouping=trajectory")
    cfg = resolve_config(wf.train, overrides=overrides)
    t0 = time.perf_counter()
    res = train(wf, cfg, run_dir=Path(args.out) / f"{arm}-seed{seed}")
    n = args.eval_tasks  # the eval split holds exactly these boards
    return {
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


def _mean_reward(h: dict) -> float:
    vals = [v for k, v in h.items() if k.startswith("reward/") and k.endswith("/mean")]
    return sum(vals) / len(vals) if vals else float("nan")


def summarise(results: list[dict]) -> list[dict]:
    """One row per table line: untrained rows from the step-0 evaluations, trained rows pooled over seeds."""
    rows = []
    for label, arm in (("single agent", "single+grpo"), ("MAS (untrained)", "mas+at")):
        rs = [r for r in results if r["arm"] == arm][:1]  # greedy step-0 evaluation: the same for every seed
        if rs:
            k = round(rs[0]["before"] * rs[0]["n_eval"])
            rows.append({"method": label, "seeds": "-", "n": rs[0]["n_eval"], "before": rs[0]["before"],
                         "after": None, "ci": wilson(k, rs[0]["n_eval"]), "per_seed": [],
                         "reward": (rs[0]["reward_before"], None)})
    labels = {"single+grpo": "single agent + GRPO", "mas+at": "MAS + AT-GRPO, shared policy",
              "mas+at+per-role": "MAS + AT-GRPO, per-role LoRA", "mas+trajectory": "MAS + trajectory GRPO"}
    for arm in ARMS:
        rs = [r for r in results if r["arm"] == arm]
        if not rs:
            continue
        n = sum(r["n_eval"] for r in rs)
        k_after = sum(round(r["after"] * r["n_eval"]) for r in rs)
        k_before = sum(round(r["before"] * r["n_eval"]) for r in rs)
        rows.append({"method": labels[arm], "seeds": ",".join(str(r["seed"]) for r in rs), "n": n,
                     "before": k_before / n, "after": k_after / n, "ci": wilson(k_after, n),
                     "ci_before": wilson(k_before, n), "per_seed": [r["after"] for r in rs],
                     "gain": (k_after - k_before) / n,
                     "reward": (sum(r["reward_before"] for r in rs) / len(rs), sum(r["reward_after"] for r in rs) / len(rs)),
                     "reward_per_seed": [r["reward_after"] for r in rs]})
    return rows


def table(rows: list[dict]) -> str:
    out = ["| method | seeds | eval episodes | success % before | success % after [95 % CI] | gain | after, per seed "
           "| eval reward before -> after (per seed) |",
           "|---|---|--:|--:|--:|--:|---|---|"]
    for r in rows:
        after = "-" if r["after"] is None else f"{100 * r['after']:.1f} [{100 * r['ci'][0]:.1f}, {100 * r['ci'][1]:.1f}]"
        before = f"{100 * r['before']:.1f}" + ("" if r["after"] is not None else
                                                 f" [{100 * r['ci'][0]:.1f}, {100 * r['ci'][1]:.1f}]")
        gain = "-" if r["after"] is None else f"{100 * r['gain']:+.1f}"
        seeds = ", ".join(f"{100 * x:.1f}" for x in r["per_seed"]) or "-"
        rb, ra = r["reward"]
        reward = f"{rb:.3f}" if ra is None else (f"{rb:.3f} -> {ra:.3f} (" +
                                                 ", ".join(f"{x:.3f}" for x in r["reward_per_seed"]) + ")")
        out.append(f"| {r['method']} | {r['seeds']} | {r['n']} | {before} | {after} | {gain} | {seeds} | {reward} |")
    return "\n".join(out)


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    colors = dict(zip(ARMS, ("tab:orange", "tab:blue", "tab:green", "tab:red")))
    for r in results:
        first = r is next(x for x in results if x["arm"] == r["arm"])
        steps = range(1, len(r["train_reward"]) + 1)
        ax1.plot(steps, r["train_reward"], color=colors[r["arm"]], alpha=0.7, marker="o", ms=3,
                 label=r["arm"] if first else None)
        xs, _, ys = zip(*r["evals"])  # eval reward: at this scale it moves where success does not yet
        ax2.plot(xs, ys, color=colors[r["arm"]], alpha=0.7, marker="o", ms=3, label=r["arm"] if first else None)
    ax1.set_xlabel("training step"), ax1.set_ylabel("mean training reward (all roles and turns)")
    ax2.set_xlabel("training step"), ax2.set_ylabel("eval reward (greedy, mean per episode)")
    ax1.legend(fontsize=8), ax2.legend(fontsize=8)
    fig.suptitle("learning at CPU scale: SmolLM2-135M, one line per seed")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="plan_path", choices=("plan_path", "sudoku", "sokoban"))
    ap.add_argument("--size", type=int, default=5)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--n-train", type=int, default=64)
    ap.add_argument("--eval-tasks", type=int, default=16)
    ap.add_argument("--eval-every", type=int, default=0)
    ap.add_argument("--max-turns", type=int, default=2, help="the flow's max_turns (0: as shipped, 3)")
    ap.add_argument("--tool-tokens", type=int, default=128, help="the tool role's max_tokens (0: as shipped)")
    ap.add_argument("--planner-tokens", type=int, default=48, help="the planner's max_tokens (0: as shipped)")
    ap.add_argument("--temperature", type=float, default=0.7,
                    help="training sampling temperature of every role (the 135M model's planner writes a parseable "
                         "move list in 3 of 48 samples at 1.0, 6 of 48 at 0.7: benchmarks/planner_format.py)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    ap.add_argument("--engine", default="auto")
    ap.add_argument("--override", nargs="*", default=[], help="more dotted config overrides for every run")
    ap.add_argument("--out", default=str(ROOT / "runs" / "learning"))
    ap.add_argument("--resume", action="store_true", help="keep finished runs from <out>/results.json")
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    store = out / "results.json"
    results: list[dict] = json.loads(store.read_text()) if args.resume and store.exists() else []
    t0 = time.perf_counter()
    for arm in args.arms:
        for seed in (args.seeds[:1] if arm in ONE_SEED else args.seeds):
            if any(r["arm"] == arm and r["seed"] == seed for r in results):
                continue
            r = run_arm(arm, seed, args)
            results.append(r)
            store.write_text(json.dumps(results, indent=1))
            print(f"[{time.perf_counter() - t0:7.0f} s] {arm} seed {seed}: success {r['before']:.3f} -> "
                  f"{r['after']:.3f}, reward {r['reward_before']:.3f} -> {r['reward_after']:.3f} "
                  f"({r['wall_s']:.0f} s)", flush=True)
    rows = summarise(results)
    plot(results, PNG)
    cmd = " ".join(["benchmarks/learning.py", *sys.argv[1:]])
    text = (f"## learning\n\nMeasured with `.venv/bin/python {cmd}` ({args.task} on {args.size}x{args.size} "
            f"boards, max_turns {args.max_turns or 'as shipped'}, K = {args.samples}, {args.batch} tasks per step, "
            f"{args.steps} steps, lr {args.lr}, training temperature {args.temperature}, "
            f"{args.eval_tasks} eval boards, greedy; total {time.perf_counter() - t0:.0f} s in this invocation).\n\n"
            + table(rows) + "\n\n![learning curves](img/learning_curves.png)\n")
    print(text)
    if args.write_docs:
        update(DOC, replace_section, "learning", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
