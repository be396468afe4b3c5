"""Soak: 300 training steps of a workflow with the `replay` engine and the sandbox; host RSS
sampled every step must stay flat (growth from step 50 to the last step under 5 %).

What runs each step is the trainer's loop (`masdsl.training.trainer.train`) minus the model
update, with the trainer's own functions: `next_batch` -> `collect` (tree-sampled rollout,
K candidates per role step, every candidate's code run against the task's tests in the
sandbox) -> `write_records` (appended to records.jsonl) -> `group_records` ->
`compute_advantages` -> `step_metrics` -> the tracker (`masdsl.tracking.start_run`, MLflow on
a local SQLite file) -> the per-step history the checkpoint keeps. Every task is distinct (its
own function and tests), so the sandbox runs fresh code every step instead of answering from
its cache.

The replay file gives each task's coder a wrong and a right candidate at turn 0 (right first
on half the tasks), and a right one at turn 1, so episodes take one or two turns and
`env.failures` feeds the second prompt.

Per step it samples the process's current RSS (psutil) and peak RSS (`ru_maxrss`), writes a
CSV and a PNG of the curve (docs/img/soak_rss.png), prints a table, and replaces the
`## reliability` soak block of docs/performance.md.

    .venv/bin/python benchmarks/soak.py                 # 300 steps, batch 4, K 2 (about 4 min)
    .venv/bin/python benchmarks/soak.py --ray           # env steps as Ray tasks (RayPool)
    .venv/bin/python benchmarks/soak.py --steps 60 --no-write
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

from perf_doc import replace_block, update

ROOT = Path(__file__).resolve().parent.parent
SECTION = "reliability"

WORKFLOW = '''workflow soak_coder "A coder refines small functions against their tests (soak)."
env code
data train "tasks.jsonl"
data eval  "tasks.jsonl"
policy shared { model: "smollm2-135m-instruct" }
role coder {
  policy shared
  system "You are a careful Python programmer."
  prompt """
    Complete this function. Reply with one ```python block.
    {{ task.prompt }}
    {% if turn > 0 %}Your last version failed: {{ env.failures }}{% endif %}
  """
  sample { temperature: 1.0, max_tokens: 64 }
  parse code = code_block(output, "python")
  reward pass_rate(code, task.tests)
}
flow {
  max_turns 2
  start -> coder
  coder -> end when passes(coder.code, task.tests)
  coder -> coder
}
team    pass_rate(coder.code, task.tests)
alpha   0.5
success passes(coder.code, task.tests)
'''


def write_inputs(folder: Path, n_tasks: int) -> tuple[Path, Path]:
    """The workflow, `n_tasks` distinct tasks, and a replay file of coder outputs."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "soak.mas").write_text(WORKFLOW)
    with open(folder / "tasks.jsonl", "w") as tasks, open(folder / "replay.jsonl", "w") as replay:
        for i in range(n_tasks):
            name = f"f{i}"
            tests = [f"assert {name}({a}, {b}) == {a * 3 + b + i}" for a, b in ((1, 2), (4, 0), (-2, 7))]
            right = f"def {name}(a, b):\n    return a * 3 + b + {i}\n"
            wrong = f"def {name}(a, b):\n    return a * 3 - b + {i}\n"  # passes only when b == 0
            tasks.write(json.dumps({"id": name, "prompt": f"def {name}(a, b):\n    \"\"\"Return 3a + b + {i}.\"\"\"\n",
                                    "tests": tests, "solution": right}) + "\n")
            block = lambda code: f"Here is my solution.\n```python\n{code}```\n"  # noqa: E731
            turn0 = [block(right), block(wrong)] if i % 2 == 0 else [block(wrong), block(wrong + "# v2\n")]
            replay.write(json.dumps({"task_id": name, "role": "coder", "turn": 0, "outputs": turn0}) + "\n")
            replay.write(json.dumps({"task_id": name, "role": "coder", "turn": 1,
                                     "outputs": [block(right), block(wrong)]}) + "\n")
    return folder / "soak.mas", folder / "replay.jsonl"


def rss_mb() -> tuple[float, float, float]:
    """(current RSS, peak RSS) of this process, and the RSS of it plus all its descendants
    (the sandbox zygote; with --ray the raylet, GCS and Ray workers), in MiB."""
    import psutil

    me = psutil.Process()
    cur = me.memory_info().rss / 2**20
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    tree = cur
    for child in me.children(recursive=True):
        try:
            tree += child.memory_info().rss / 2**20
        except psutil.Error:  # exited meanwhile
            pass
    return cur, peak, tree


def soak(steps: int, batch: int, samples: int, use_ray: bool, folder: Path, log_every: int = 25) -> dict:
    import masdsl
    from masdsl.config import resolve_config
    from masdsl.learner.advantages import compute_advantages
    from masdsl.learner.grouping import group_records
    from masdsl.plan.run_plan import resolve_run
    from masdsl.runtime.engine_factory import build_engines
    from masdsl.runtime.inputs import prepare
    from masdsl.runtime.records import write_records
    from masdsl.tracking import start_run
    from masdsl.training.metrics import step_metrics
    from masdsl.training.step import collect
    from masdsl.training.trainer import next_batch

    mas, replay = write_inputs(folder / "inputs", n_tasks=steps * batch)
    run_dir = folder / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    overrides = [
        "runtime.engine=replay", f"runtime.replay_file={replay}", f"runtime.ray={str(use_ray).lower()}",
        f"train.samples={samples}", f"train.batch={batch}", f"train.steps={steps}",
        f"tracking.uri=sqlite:///{folder / 'mlflow.db'}", "tracking.experiment=soak",
    ]
    workflow = masdsl.load(str(mas))
    cfg = resolve_config(workflow.train, None, overrides)
    env, data = prepare(workflow, cfg.sandbox)
    rows = data["train"]
    plan = resolve_run(workflow, cfg)
    engines = build_engines(plan)
    tracker = start_run(workflow, cfg, kind="run", run_dir=run_dir)
    history: list[dict] = []  # what TrainState.history keeps (it goes into every checkpoint)
    samples_out: list[dict] = []
    cursor, t_start = 0, time.perf_counter()
    try:
        for step in range(steps):
            t0 = time.perf_counter()
            idx, cursor = next_batch(len(rows), batch, cfg.train.seed, cursor)
            roll = collect(env, [rows[i] for i in idx], engines, plan, step)
            t_roll = time.perf_counter() - t0
            records = roll.records
            write_records(run_dir / "records.jsonl", records)
            adv, gstats = compute_advantages(group_records(records, cfg.train.grouping), len(records))
            metrics = step_metrics(records, roll.episodes, gstats, {}, tokens=roll.tokens_generated,
                                   rollout_s=t_roll, update_s=0.0, kl_on=False)
            history.append({"step": step + 1, **metrics})
            tracker.log_metrics(metrics, step=step + 1)
            n_records, n_errors = len(records), sum(roll.errors.values())
            del roll, records, adv, gstats
            cur, peak, tree = rss_mb()
            row = {"step": step + 1, "rss_mb": round(cur, 2), "peak_mb": round(peak, 2), "tree_mb": round(tree, 2),
                   "step_s": round(time.perf_counter() - t0, 3), "records": n_records, "errors": n_errors,
                   "success": metrics.get("success/train", metrics.get("success", float("nan")))}
            if (step + 1) % log_every == 0 or step == 0:
                row["gc_objects"] = len(gc.get_objects())
                print(f"step {step + 1:4d}  rss {cur:7.1f} MiB  peak {peak:7.1f} MiB  tree {tree:7.1f} MiB  "
                      f"{row['step_s']:.2f} s/step  objects {row['gc_objects']}", flush=True)
            samples_out.append(row)
    finally:
        tracker.finish("FINISHED")
        for e in {id(e): e for e in engines.values()}.values():
            e.close()
    wall = time.perf_counter() - t_start
    n_records = sum(1 for _ in open(run_dir / "records.jsonl"))
    return {"samples": samples_out, "wall_s": wall, "records_on_disk": n_records,
            "records_mb": (run_dir / "records.jsonl").stat().st_size / 2**20}


def growth(samples: list[dict], key: str, start: int) -> tuple[float, float, float]:
    """(value at `start`, value at the end, growth in %)."""
    a = next(s[key] for s in samples if s["step"] == start)
    b = samples[-1][key]
    return a, b, 100.0 * (b - a) / a


def sparkline(values: list[float], width: int = 60) -> str:
    """An ASCII sparkline, `width` buckets (max of each bucket), scaled to the values' range.

    >>> sparkline([1, 1, 2, 3], width=4)
    '▁▁▅█'
    """
    bars = "▁▂▃▄▅▆▇█"
    if not values:
        return ""
    step = max(1, len(values) // width)
    buckets = [max(values[i : i + step]) for i in range(0, len(values), step)][:width]
    lo, hi = min(buckets), max(buckets)
    span = hi - lo or 1.0
    return "".join(bars[min(len(bars) - 1, int((v - lo) / span * (len(bars) - 1) + 0.5))] for v in buckets)


def plot(samples: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [s["step"] for s in samples]
    fig, ax = plt.subplots(figsize=(7, 3.2), dpi=110)
    ax.plot(steps, [s["rss_mb"] for s in samples], label="RSS", lw=1.2)
    ax.plot(steps, [s["peak_mb"] for s in samples], label="peak RSS", lw=1.2, ls="--")
    ax.plot(steps, [s["tree_mb"] for s in samples], label="RSS with child processes", lw=1.2, ls="-.")
    ax.axvline(50, color="grey", lw=0.8, ls=":")
    ax.set_ylim(0, max(max(s["peak_mb"], s["tree_mb"]) for s in samples) * 1.15)
    ax.set_xlabel("training step")
    ax.set_ylabel("MiB")
    ax.set_title(title, fontsize=9)
    ax.legend(loc="center right", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def report(result: dict, args: argparse.Namespace, img: Path, docs: Path) -> str:
    s = result["samples"]
    start = min(50, s[-1]["step"])
    c0, c1, cg = growth(s, "rss_mb", start)
    p0, p1, pg = growth(s, "peak_mb", start)
    t0, t1, tg = growth(s, "tree_mb", start)
    verdict = "PASS" if max(pg, cg, tg) < 5.0 else "FAIL"
    pool = "Ray tasks (RayPool, local Ray)" if args.ray else "in-process threads (LocalPool)"
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    rows = [r for r in s if r["step"] in (1, 10, 25, 50, 100, 150, 200, 250, 300) or r is s[-1]]
    table = ["| step | RSS MiB | peak RSS MiB | RSS with children MiB | s/step |", "|---:|---:|---:|---:|---:|"]
    seen = set()
    for r in rows:
        if r["step"] not in seen:
            seen.add(r["step"])
            table.append(f"| {r['step']} | {r['rss_mb']:.1f} | {r['peak_mb']:.1f} | {r['tree_mb']:.1f} | {r['step_s']:.2f} |")
    errors = sum(r["errors"] for r in s)
    return "\n".join([
        f"### soak ({'ray' if args.ray else 'local'}): {verdict}",
        "",
        f"- {when}, {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}: "
        f"{s[-1]['step']} steps, batch {args.batch}, K {args.samples}, replay engine, code env in the "
        f"sandbox, env steps in {pool}, MLflow on SQLite. Wall {result['wall_s']:.0f} s "
        f"({result['wall_s'] / len(s):.2f} s/step); {result['records_on_disk']} step records streamed to "
        f"records.jsonl ({result['records_mb']:.1f} MiB on disk); {errors} failed env steps.",
        f"- RSS step {start} -> {s[-1]['step']}: {c0:.1f} -> {c1:.1f} MiB (**{cg:+.2f} %**); peak RSS "
        f"{p0:.1f} -> {p1:.1f} MiB (**{pg:+.2f} %**); RSS of the process and its children "
        f"({'Ray raylet, GCS, workers' if args.ray else 'sandbox zygote'}) {t0:.1f} -> {t1:.1f} MiB "
        f"(**{tg:+.2f} %**). Goal: each under 5 %.",
        f"- RSS, steps 1..{s[-1]['step']}: `{sparkline([r['rss_mb'] for r in s])}` "
        f"({min(r['rss_mb'] for r in s):.0f}..{max(r['rss_mb'] for r in s):.0f} MiB); "
        f"curve: [{img.relative_to(docs)}]({img.relative_to(docs)})",
        f"- Command: `.venv/bin/python benchmarks/soak.py{' --ray' if args.ray else ''}`",
        "",
        *table,
        "",
    ])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--ray", action="store_true", help="env steps as Ray tasks (local Ray instance)")
    ap.add_argument("--no-write", action="store_true", help="print only; leave docs/ alone")
    ap.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (default: a temp dir)")
    ap.add_argument("--docs", metavar="DIR", default=str(ROOT / "docs"),
                    help="the docs folder to write performance.md and img/ into (default: this checkout's)")
    args = ap.parse_args()
    if args.ray:
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="masdsl-soak-"))
    result = soak(args.steps, args.batch, args.samples, args.ray, folder)
    key = "ray" if args.ray else "local"
    (folder / "rss.csv").write_text("step,rss_mb,peak_mb,tree_mb,step_s\n" + "".join(
        f"{r['step']},{r['rss_mb']},{r['peak_mb']},{r['tree_mb']},{r['step_s']}\n" for r in result["samples"]))
    docs = Path(args.docs).resolve()
    img = docs / "img" / f"soak_rss_{key}.png"
    text = report(result, args, img, docs)
    print(text)
    if not args.no_write:
        plot(result["samples"], img, f"soak ({key}): RSS per step, replay engine + sandbox")
        update(docs / "performance.md", replace_block, SECTION, f"<!-- soak:{key}:begin -->", f"<!-- soak:{key}:end -->", text)
        print(f"wrote {docs / 'performance.md'} ## {SECTION} and {img}")
    print(f"work folder: {folder}")
    if args.ray:
        import ray

        ray.shutdown()
    return 0 if "PASS" in text.splitlines()[0] else 1


if __name__ == "__main__":
    sys.exit(main())
