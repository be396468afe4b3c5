"""What each role can do before and after training, per run: the skill table of issue 28.

    .venv/bin/python benchmarks/skill_table.py RUN_OR_SWEEP... [--workflow FILE] [--json OUT] [--plot PNG]
                                               [--regrade] [--answers OUT.jsonl]
    .venv/bin/python benchmarks/skill_table.py --pair BEFORE.jsonl AFTER.jsonl --workflow FILE [...]

Each argument is a training run's folder (it holds `eval/step_N.jsonl`) or a sweep folder (every
`trials/*/` run in it). For each run, the first and the last evaluation are compared on the same
held-out tasks (one greedy episode per task):

- episode success: the rate with Wilson's 95 % interval over the distinct tasks, and McNemar's
  exact test of before vs after on the same tasks (`masdsl/stats.py`);
- each role's `metric` lines (`skill/<role>/<name>`), at its first turn (before it has seen any
  other role's answer) and over all its turns, with the same interval and test on turn 0;
- the tokens the run generated in training (the sum of its records' response lengths).

Episode success is each episode's stored `episode_success` unless `--regrade`: then the workflow's
`success` line (`--workflow` or the run's own) is evaluated again on the episode's final parsed
fields and the task, so a grader changed since the run applies to its rows (a success line that
reads the env's state cannot be recomputed and keeps the stored value; the rows count both).
`--answers OUT.jsonl` writes what a later regrade needs and nothing else: per eval episode, its
task, the stored success and each reply's (role, turn, parsed fields), one compact line each.

`--pair BEFORE AFTER` (repeatable) compares two evaluations of the same tasks that no training
run holds together, e.g. the untrained policy and a checkpoint each evaluated by `masdsl eval` on
new instances of the trained templates (the records of a `masdsl eval` run folder); `--answers`
keeps each such evaluation once, under its path.

Each row is also taken apart by kind of task (`by_kind`, the task id without its last part: per
generator for a `reasoning_gym([...])` mix): right before -> after, of the kind's tasks, for
episode success and each skill line at turn 0; printed after the main table when a row has more
than one kind, and stored in `--json` under `by_kind`.

A metric line that a record carries no value for (the record was written before the line
existed, e.g. `kills` on coder_tester's older runs) is evaluated again from the workflow
(`--workflow`, default: the run's own `workflow.mas`) on the record's parsed fields and the task. That covers metrics that read fields, `task` and
functions (as `math_arith.mas`'s do), not ones that read the env's state: those are reported
as missing.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import masdsl
from masdsl.config import SandboxConfig
from masdsl.lang.workflow import EvalContext
from masdsl.runtime.inputs import load_split, make_env
from masdsl.runtime.rundir import eval_files
from masdsl.stats import mcnemar, wilson


def run_folders(paths: list[str]) -> list[Path]:
    """The training runs named: run folders as given, sweeps expanded to their finished trials'
    runs (a trial still training, with one evaluation so far, is named on stderr and left out)."""
    out: list[Path] = []
    for p in map(Path, paths):
        if (p / "eval").is_dir():
            out.append(p)
        elif (p / "trials").is_dir():
            for t in sorted(t for t in (p / "trials").iterdir() if (t / "eval").is_dir()):
                if len(eval_files(t)) >= 2:
                    out.append(t)
                else:
                    print(f"{t}: left out, no evaluation after training yet", file=sys.stderr)
        else:
            raise SystemExit(f"{p}: neither a run folder (no eval/) nor a sweep folder (no trials/)")
    return out


def episodes(path: Path) -> dict[str, list[dict]]:
    """task id -> the records of its (one) eval episode, in order."""
    by_task: dict[str, list[dict]] = defaultdict(list)
    for line in path.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            by_task[r["task_id"]].append(r)
    return dict(by_task)


class Metrics:
    """A role's metric values for a record: stored ones, else its expressions evaluated again."""

    def __init__(self, workflow, tasks: dict[str, dict]) -> None:
        self.workflow, self.tasks = workflow, tasks
        self.limits = make_env(workflow, SandboxConfig()).limits

    def of(self, record: dict, fields: dict[str, dict]) -> dict[str, float | None]:
        out: dict[str, float | None] = dict(record.get("metrics") or {})
        role = self.workflow.roles.get(record["role"])
        for name, expr in (role.metrics if role else ()):
            if name in out:
                continue
            ctx = EvalContext(task=self.tasks[record["task_id"]], fields=fields, turn=record["turn"],
                              role=record["role"], limits=self.limits)
            try:
                out[name] = float(expr.evaluate(ctx))
            except Exception:  # noqa: BLE001 - a metric reading the env's state cannot be recomputed here
                out[name] = None
        return out


def regraded(metrics: Metrics, task_id: str, fields: dict[str, dict]) -> int | None:
    """The workflow's `success` line evaluated again on an episode's final parsed fields (None:
    the workflow has none, or it reads the env's state, which records do not keep)."""
    expr = metrics.workflow.success
    if expr is None:
        return None
    ctx = EvalContext(task=metrics.tasks[task_id], fields=fields, limits=metrics.limits)
    try:
        return int(float(expr.evaluate(ctx)) >= 1.0 - 1e-9)
    except Exception:  # noqa: BLE001 - e.g. `env.x` or an env-bound function: no state in the records
        return None


def answers(path: Path) -> list[dict]:
    """One compact line per eval episode: enough to regrade it later (`--answers`)."""
    out = []
    for task, recs in episodes(path).items():
        out.append({"eval": path.stem, "task": task, "success": float(recs[-1].get("episode_success") or 0.0),
                    "replies": [{"role": r["role"], "turn": r["turn"], "fields": r["fields"]} for r in recs]})
    return out


def evaluation(path: Path, metrics: Metrics, regrade: bool = False) -> dict:
    """Per task: success (stored, or `regrade`d), and each role's metric values at turn 0 and
    over all turns."""
    success: dict[str, int] = {}
    grading = {"regraded": 0, "stored": 0, "changed": 0}
    first: dict[str, dict[str, float]] = defaultdict(dict)  # "role/name" -> task -> value at turn 0
    every: dict[str, list[float]] = defaultdict(list)       # "role/name" -> values over all turns
    given: dict[str, list[float]] = defaultdict(list)       # "role/name | other right|wrong" -> values
    tokens = 0
    for task, recs in episodes(path).items():
        success[task] = stored = int(float(recs[-1].get("episode_success") or 0.0) >= 1.0 - 1e-9)
        if regrade:
            final: dict[str, dict] = {}
            for r in recs:
                final[r["role"]] = {**r["fields"], "output": r["response_text"]}
            again = regraded(metrics, task, final)
            grading["stored" if again is None else "regraded"] += 1
            if again is not None:
                grading["changed"] += int(again != stored)
                success[task] = again
        fields: dict[str, dict] = {}
        acted: list[Activation] = []
        for r in recs:
            tokens += len(r["response_ids"])
            fields = {**fields, r["role"]: {**r["fields"], "output": r["response_text"]}}
            values = metrics.of(r, fields)
            acted.append((r["role"], (r["turn"], r.get("node", "")), values))
            for name, value in values.items():
                if value is None:
                    continue
                every[f"{r['role']}/{name}"].append(value)
                if r["turn"] == 0:
                    first[f"{r['role']}/{name}"][task] = value
        for key, value in given_other(acted):
            given[key].append(value)
    return {"success": success, "first": first, "every": every, "given": given, "tokens": tokens, "grading": grading}


Activation = tuple[str, tuple[int, str], dict[str, "float | None"]]  # role, (turn, node), its metric values


def given_other(acted: list[Activation]) -> list[tuple[str, float]]:
    """A role's `correct`, keyed by whether the answer it was shown was right: each other role's
    newest `correct` from an earlier activation. Roles of one parallel group act on the same state,
    so they see each other's answers only at the next turn; in a chain `tool -> reasoner` the
    reasoner sees the tool's answer of its own turn.

    >>> side_by_side = [("tool", (0, "tool&reasoner"), {"correct": 1.0}), ("reasoner", (0, "tool&reasoner"), {"correct": 0.0}),
    ...                 ("reasoner", (1, "tool&reasoner"), {"correct": 1.0})]
    >>> given_other(side_by_side)
    [('reasoner/correct, shown a right tool answer', 1.0)]
    >>> given_other([("tool", (0, "tool"), {"correct": 0.0}), ("reasoner", (0, "reasoner"), {"correct": 0.0})])
    [('reasoner/correct, shown a wrong tool answer', 0.0)]
    """
    out = []
    shown: dict[str, float] = {}    # role -> its `correct` in an activation already over
    current: dict[str, float] = {}  # the same, for the activation under way
    activation = None
    for role, key, values in acted:
        if key != activation:
            shown.update(current)
            current, activation = {}, key
        mine = values.get("correct")
        if mine is not None:
            for other, seen in shown.items():
                if other != role:
                    out.append((f"{role}/correct, shown a {'right' if seen >= 1 else 'wrong'} {other} answer", float(mine)))
            current[role] = mine
    return out


def rate(values: dict[str, float] | list[float]) -> dict:
    xs = list(values.values()) if isinstance(values, dict) else list(values)
    n = len(xs)
    r = sum(xs) / n if n else 0.0
    out = {"rate": r, "n": n, "ci": wilson(sum(xs), n) if n else (0.0, 0.0)}
    if isinstance(values, dict):
        out["per_task"] = dict(values)
    return out


def train_tokens(run: Path) -> int:
    path = run / "records.jsonl"
    if not path.exists():
        return 0
    return sum(len(json.loads(line)["response_ids"]) for line in path.read_text().splitlines() if line.strip())


def compare(run: Path, workflow_file: str | None, regrade: bool = False) -> dict:
    files = eval_files(run)
    if len(files) < 2:
        raise SystemExit(f"{run}: needs an evaluation before and after training, found {len(files)}")
    row = compare_files(files[0], files[-1], workflow_file or run / "workflow.mas", regrade)
    return {**row, "run": str(run), "steps": [files[0].stem, files[-1].stem], "train_tokens": train_tokens(run),
            "adapter_change": adapter_change(run)}


def compare_files(before_file: Path, after_file: Path, workflow_file: str | Path, regrade: bool = False) -> dict:
    """Two evaluations' records of the same eval tasks, side by side (`--pair`: e.g. the untrained
    policy and a checkpoint, each evaluated with `masdsl eval` on another `data eval` line)."""
    wf = masdsl.load(workflow_file)
    tasks = {t["id"]: t for t in load_split(wf, "eval")}
    metrics = Metrics(wf, tasks)
    before, after = evaluation(before_file, metrics, regrade), evaluation(after_file, metrics, regrade)
    if set(before["success"]) != set(after["success"]):
        raise SystemExit(f"{before_file} and {after_file} evaluated different tasks: a paired test needs the same ones")
    row = {"run": pair_name(before_file, after_file), "steps": [str(before_file), str(after_file)],
           "tasks": len(before["success"]), "train_tokens": 0, "adapter_change": {},
           "success": {"before": rate(before["success"]), "after": rate(after["success"]),
                       "mcnemar": mcnemar(before["success"], after["success"])},
           "grading": {"before": before["grading"], "after": after["grading"]} if regrade else "stored",
           "skills": {}}
    for key in sorted(set(before["first"]) | set(after["first"])):
        b, a = before["first"].get(key, {}), after["first"].get(key, {})
        common = sorted(set(b) & set(a))
        row["skills"][key] = {
            "turn0": {"before": rate(b), "after": rate(a),
                      "mcnemar": mcnemar({t: int(b[t] >= 1) for t in common}, {t: int(a[t] >= 1) for t in common})},
            "all_turns": {"before": rate(before["every"].get(key, [])), "after": rate(after["every"].get(key, []))}}
    row["given"] = {key: {"before": rate(before["given"].get(key, [])), "after": rate(after["given"].get(key, []))}
                    for key in sorted(set(before["given"]) | set(after["given"]))}
    return row


def pair_name(before: Path, after: Path) -> str:
    """The first folder in which two evaluations' paths differ, for the table.

    >>> pair_name(Path("evals/base/math_gsm/20261206-2045/records.jsonl"),
    ...           Path("evals/tool_binary/math_gsm_tool_binary/20261206-2051/records.jsonl"))
    'base->tool_binary'
    """
    for x, y in zip(before.parts, after.parts):
        if x != y:
            return f"{x}->{y}"
    return f"{before}->{after}"


def arm_of(run: Path) -> tuple[str, int | None]:
    """A sweep trial's arm and seed from its folder name (`train.grouping=at,seed=1`); another
    run is its own arm, seed unknown.

    >>> arm_of(Path("trials/train.grouping=at,seed=1")), arm_of(Path("runs/single"))
    (('train.grouping=at', 1), ('single', None))
    >>> arm_of(Path("base,seed=0->base,seed=1"))  # a `--pair` of two seeds' evaluations
    ('base,seed=0->base,seed=1', None)
    """
    parts = run.name.split(",")
    if "->" in run.name or not all(x.split("=", 1)[1].isdigit() for x in parts if x.startswith("seed=")):
        return run.name, None
    seeds = [int(x.split("=", 1)[1]) for x in parts if x.startswith("seed=")]
    arm = ",".join(x for x in parts if not x.startswith("seed=")) or run.name
    return arm, (seeds[0] if seeds else None)


def arms(rows: list[dict]) -> list[dict]:
    """Per arm, its seeds' episode success after training, their mean and spread, and one
    Wilson interval over the distinct tasks (each task's success averaged over the seeds, so n
    is the number of tasks, never tasks x seeds)."""
    grouped: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        grouped[arm_of(Path(row["run"]))[0]].append(row)
    out = []
    for arm, runs in grouped.items():
        out.append({"arm": arm, "seeds": [arm_of(Path(r["run"]))[1] for r in runs],
                    "before": pooled([r["success"]["before"]["per_task"] for r in runs]),
                    "after": pooled([r["success"]["after"]["per_task"] for r in runs]),
                    "after_per_seed": [r["success"]["after"]["rate"] for r in runs],
                    "train_tokens": [r["train_tokens"] for r in runs]})
    return out


def pooled(per_seed: list[dict[str, float]]) -> dict:
    """Each task's mean over seeds, then the rate and a Wilson interval with n = the tasks.

    >>> r = pooled([{"a": 1, "b": 0}, {"a": 1, "b": 1}]); r["rate"], r["n"]
    (0.75, 2)
    """
    tasks = sorted(set().union(*per_seed))
    means = [sum(s.get(t, 0) for s in per_seed) / len(per_seed) for t in tasks]
    return {"rate": sum(means) / len(tasks), "n": len(tasks), "ci": wilson(sum(means), len(tasks))}


def arms_markdown(summary: list[dict]) -> str:
    head = ("| arm | seeds | train tokens per seed | episode success before | after (pooled over seeds, n = tasks) "
            "| after, per seed | spread |\n|---|---|--:|--:|--:|---|--:|\n")
    lines = []
    for a in summary:
        per_seed = a["after_per_seed"]
        seeds = ", ".join("?" if s is None else str(s) for s in a["seeds"])  # a run outside a sweep names none
        lines.append(f"| {a['arm']} | {seeds} | "
                     f"{', '.join(f'{t:,}' for t in a['train_tokens'])} | {pct(a['before'])} | {pct(a['after'])} | "
                     f"{', '.join(f'{100 * x:.1f}' for x in per_seed)} | {100 * (max(per_seed) - min(per_seed)):.1f} |")
    return head + "\n".join(lines)


def curve_label(run: Path, runs: list[Path]) -> str:
    """The run's folder name, or with its sweep's name where two sweeps' trials share one (every
    sweep of one arm names its trial `base,seed=0`).

    >>> runs = [Path("a/trials/base,seed=0"), Path("b/trials/base,seed=0"), Path("runs/c")]
    >>> [curve_label(r, runs) for r in runs]
    ['a/base,seed=0', 'b/base,seed=0', 'c']
    """
    if sum(r.name == run.name for r in runs) < 2:
        return run.name
    sweep = run.parent.parent if run.parent.name == "trials" else run.parent
    return f"{sweep.name}/{run.name}"


def curves(runs: list[Path], out: Path) -> None:
    """One panel per training metric worth watching (each role's skill metrics at turn 0, the
    non-flat share per role, the train success) and the held-out success at each evaluation;
    one line per run. Read from each run's newest checkpoint (its `state.json` history)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from masdsl.training.checkpoint import latest

    states = {}
    for run in runs:
        newest = latest(run)
        if newest is not None:
            states[curve_label(run, runs)] = json.loads((newest / "state.json").read_text())
    keys = sorted({k for st in states.values() for h in st["history"] for k in h
                   if (k.startswith("skill/train/") and k.endswith("/turn0")) or k.startswith("nonflat/")})
    keys += ["success/train", "success/eval"]
    cols = 3
    fig, axes = plt.subplots((len(keys) + cols - 1) // cols, cols, figsize=(4.2 * cols, 3.0 * ((len(keys) + cols - 1) // cols)),
                             squeeze=False)
    for ax, key in zip(axes.flat, keys):
        for i, st in enumerate(states.values()):
            points = ([(e["step"], e["success/eval"]) for e in st["evals"]] if key == "success/eval" else
                      [(h["step"], h[key]) for h in st["history"] if key in h])
            if points:  # one colour per run in every panel: matplotlib's cycle restarts per panel
                ax.plot(*zip(*points), marker="o", color=f"C{i % 10}")
        ax.set_title(key.replace("skill/train/", "train ").replace("/turn0", ", turn 0"), fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(keys):]:
        ax.axis("off")
    from matplotlib.lines import Line2D
    fig.legend([Line2D([], [], color=f"C{i % 10}", marker="o") for i in range(len(states))], list(states),
               loc="lower right", fontsize=8)  # every run, also those missing from the first panel
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def adapter_change(run: Path) -> dict[str, float]:
    """Per LoRA policy, how far training moved it: ||dW||_F over all its adapted modules, where
    dW = (alpha / r) B A is what the adapter adds to a base weight (B starts at zero, so this is
    the change since step 0). Read from the newest checkpoint; full-weight policies are left out
    (their change needs the starting weights)."""
    import yaml
    from safetensors.torch import load_file

    from masdsl.training.checkpoint import latest

    newest = latest(run)
    if newest is None:
        return {}
    cfg = yaml.safe_load((newest / "config.yaml").read_text()) or {}
    out = {}
    for path in sorted((newest / "policies").glob("*.safetensors")):
        sd = load_file(str(path))
        pairs = [(k, k.replace("lora_A", "lora_B")) for k in sd if ".lora_A." in k]
        if not pairs:
            continue
        block = ((cfg.get("policy") or {}).get(path.stem) or (cfg.get("policy") or {}).get("*") or {}).get("lora") or {}
        total = 0.0
        for a, b in pairs:
            r = sd[a].shape[0]
            scale = float(block.get("alpha", 2 * r)) / r
            total += float((scale * sd[b].float() @ sd[a].float()).pow(2).sum())
        out[path.stem] = total ** 0.5
    return out


def pct(r: dict) -> str:
    lo, hi = r["ci"]
    return f"{100 * r['rate']:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]"


def markdown(rows: list[dict]) -> str:
    head = "| run | tasks | train tokens | what | before | after | McNemar p (b, c) |\n|---|--:|--:|---|--:|--:|--:|\n"
    lines = []
    for row in rows:
        name = Path(row["run"]).name
        s = row["success"]
        if isinstance(row.get("grading"), dict):
            g = row["grading"]
            lines.append(f"| {name} | | | success regraded (before, after): "
                         f"{g['before']['regraded']}, {g['after']['regraded']} episodes, changed "
                         f"{g['before']['changed']}, {g['after']['changed']} | | | |")
        lines.append(f"| {name} | {row['tasks']} | {row['train_tokens']:,} | episode success | {pct(s['before'])} | "
                     f"{pct(s['after'])} | {s['mcnemar']['p']:.3g} ({s['mcnemar']['b']}, {s['mcnemar']['c']}) |")
        for policy, change in row.get("adapter_change", {}).items():
            lines.append(f"| | | | policy {policy}: adapter change, \u2016(alpha/r)\u00b7BA\u2016_F | 0 | {change:.3g} | |")
        for key, v in row["skills"].items():
            t0, every = v["turn0"], v["all_turns"]
            lines.append(f"| | | | {key}, turn 0 | {pct(t0['before'])} | {pct(t0['after'])} | "
                         f"{t0['mcnemar']['p']:.3g} ({t0['mcnemar']['b']}, {t0['mcnemar']['c']}) |")
            lines.append(f"| | | | {key}, all turns ({every['before']['n']} -> {every['after']['n']} replies) | "
                         f"{pct(every['before'])} | {pct(every['after'])} | |")
        for key, v in row.get("given", {}).items():
            lines.append(f"| | | | {key} ({v['before']['n']} -> {v['after']['n']} replies) | "
                         f"{pct(v['before'])} | {pct(v['after'])} | |")
    return head + "\n".join(lines)


def kind_of(task_id: str) -> str:
    """A task's kind: its id without the last part (`rg/lcm/eval/3` -> `lcm/eval` under
    `reasoning_gym(...)`: its generator, the problem type).

    >>> kind_of("rg/lcm/eval/3"), kind_of("HumanEval/12"), kind_of("plain")
    ('rg/lcm/eval', 'HumanEval', 'plain')
    """
    return task_id.rsplit("/", 1)[0]


def by_kind(row: dict) -> dict[str, dict[str, list[int]]]:
    """Per kind of task (`kind_of`): [right before, right after, tasks] for episode success and
    each skill line at turn 0, from one row's per-task values; what a gain is made of."""
    out: dict[str, dict[str, list[int]]] = defaultdict(dict)
    lines = {"episode success": row["success"]}
    lines.update({f"{key}, turn 0": v["turn0"] for key, v in row["skills"].items()})
    for what, v in lines.items():
        before, after = v["before"].get("per_task", {}), v["after"].get("per_task", {})
        for task in sorted(set(before) & set(after)):
            counts = out[kind_of(task)].setdefault(what, [0, 0, 0])
            counts[0] += int(before[task] >= 1)
            counts[1] += int(after[task] >= 1)
            counts[2] += 1
    return dict(out)


def kinds_markdown(rows: list[dict]) -> str:
    """Each row's per-kind counts, a table per row (right before -> after, of tasks)."""
    tables = []
    for row in rows:
        kinds = row.get("by_kind", {})
        if len(kinds) < 2:
            continue
        whats = list(next(iter(kinds.values())))
        head = f"| {Path(row['run']).name}: kind | " + " | ".join(whats) + " |\n|---|" + "--:|" * len(whats) + "\n"
        body = "\n".join(f"| {kind} | " + " | ".join(
            f"{c[0]} -> {c[1]} of {c[2]}" if (c := counts.get(w)) else "" for w in whats) + " |"
            for kind, counts in sorted(kinds.items()))
        tables.append(head + body)
    return "\n\n".join(tables)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="*")
    ap.add_argument("--pair", nargs=2, metavar=("BEFORE", "AFTER"), action="append", default=[],
                    help="two evaluations' records of the same tasks (eval/step_N.jsonl, or a `masdsl eval` run "
                         "folder's records.jsonl); needs --workflow")
    ap.add_argument("--workflow", help="the .mas whose metric lines to evaluate again (default: the run's own)")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--plot", help="draw each run's training curves into this image (.png)")
    ap.add_argument("--regrade", action="store_true", help="evaluate the workflow's success line again on each episode")
    ap.add_argument("--answers", help="write each eval episode's parsed fields here (JSONL), for a later regrade")
    args = ap.parse_args()
    if args.pair and not args.workflow:
        ap.error("--pair needs --workflow: the .mas whose eval split and metric lines the records are of")
    if not args.runs and not args.pair:
        ap.error("name a run or sweep folder, or --pair BEFORE AFTER")
    missing = [f for pair in args.pair for f in pair if not Path(f).is_file()]
    if missing:
        ap.error(f"--pair: no records file {', '.join(missing)} (an evaluation's eval/step_NNNNNN.jsonl, or a `masdsl eval` run's records.jsonl)")
    runs = run_folders(args.runs)
    rows = [compare(run, args.workflow, args.regrade) for run in runs]
    rows += [compare_files(Path(b), Path(a), args.workflow, args.regrade) for b, a in args.pair]
    for row in rows:
        row["by_kind"] = by_kind(row)
    if args.answers:
        with open(args.answers, "w") as out:
            for run in runs:
                files = eval_files(run)
                for path in (files[0], files[-1]):
                    for line in answers(path):
                        out.write(json.dumps({"run": run.name, **line}) + "\n")
            evaluations = dict.fromkeys(p for pair in args.pair for p in pair)  # a shared "before" once
            for path in evaluations:
                for line in answers(Path(path)):
                    out.write(json.dumps({**line, "eval": path}) + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": rows, "arms": arms(rows)}, indent=1))
    if args.plot:
        curves(runs, Path(args.plot))
    print(arms_markdown(arms(rows)) + "\n")
    print(markdown(rows))
    kinds = kinds_markdown(rows)
    if kinds:
        print("\n" + kinds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
