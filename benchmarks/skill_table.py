"""What each role can do before and after training, per run: the skill table of issue 28.

    .venv/bin/python benchmarks/skill_table.py RUN_OR_SWEEP... [--workflow FILE] [--json OUT] [--markdown]

Each argument is a training run's folder (it holds `eval/step_N.jsonl`) or a sweep folder (every
`trials/*/` run in it). For each run, the first and the last evaluation are compared on the same
held-out tasks (one greedy episode per task):

- episode success: the rate with Wilson's 95 % interval over the distinct tasks, and McNemar's
  exact test of before vs after on the same tasks (`benchmarks/stats.py`);
- each role's `metric` lines (`skill/<role>/<name>`), at its first turn (before it has seen any
  other role's answer) and over all its turns, with the same interval and test on turn 0;
- the tokens the run generated in training (the sum of its records' response lengths).

Records written before `metric` lines existed carry no values; then the workflow's metric
expressions (`--workflow`, default: the run's own `workflow.mas`) are evaluated again on each
record's parsed fields and the task. That covers metrics that read fields, `task` and
functions (as `math_arith.mas`'s do), not ones that read the env's state: those are reported
as missing.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from stats import mcnemar, wilson

import masdsl
from masdsl.config import SandboxConfig
from masdsl.lang.workflow import EvalContext
from masdsl.runtime.inputs import load_split, make_env
from masdsl.runtime.rundir import eval_files


def run_folders(paths: list[str]) -> list[Path]:
    """The training runs named: run folders as given, sweeps expanded to their trials' runs."""
    out: list[Path] = []
    for p in map(Path, paths):
        if (p / "eval").is_dir():
            out.append(p)
        elif (p / "trials").is_dir():
            out += sorted(t for t in (p / "trials").iterdir() if (t / "eval").is_dir())
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
        if record.get("metrics"):
            return record["metrics"]
        role = self.workflow.roles.get(record["role"])
        out: dict[str, float | None] = {}
        for name, expr in (role.metrics if role else ()):
            ctx = EvalContext(task=self.tasks[record["task_id"]], fields=fields, turn=record["turn"],
                              role=record["role"], limits=self.limits)
            try:
                out[name] = float(expr.evaluate(ctx))
            except Exception:  # noqa: BLE001 - a metric reading the env's state cannot be recomputed here
                out[name] = None
        return out


def evaluation(path: Path, metrics: Metrics) -> dict:
    """Per task: success, and each role's metric values at turn 0 and over all turns."""
    success: dict[str, int] = {}
    first: dict[str, dict[str, float]] = defaultdict(dict)  # "role/name" -> task -> value at turn 0
    every: dict[str, list[float]] = defaultdict(list)       # "role/name" -> values over all turns
    tokens = 0
    for task, recs in episodes(path).items():
        success[task] = int(float(recs[-1].get("episode_success") or 0.0) >= 1.0 - 1e-9)
        fields: dict[str, dict] = {}
        for r in recs:
            tokens += len(r["response_ids"])
            fields = {**fields, r["role"]: {**r["fields"], "output": r["response_text"]}}
            for name, value in metrics.of(r, fields).items():
                if value is None:
                    continue
                every[f"{r['role']}/{name}"].append(value)
                if r["turn"] == 0:
                    first[f"{r['role']}/{name}"][task] = value
    return {"success": success, "first": first, "every": every, "tokens": tokens}


def rate(values: dict[str, float] | list[float]) -> dict:
    xs = list(values.values()) if isinstance(values, dict) else list(values)
    n = len(xs)
    r = sum(xs) / n if n else 0.0
    return {"rate": r, "n": n, "ci": wilson(sum(xs), n) if n else (0.0, 0.0)}


def train_tokens(run: Path) -> int:
    path = run / "records.jsonl"
    if not path.exists():
        return 0
    return sum(len(json.loads(line)["response_ids"]) for line in path.read_text().splitlines() if line.strip())


def compare(run: Path, workflow_file: str | None) -> dict:
    files = eval_files(run)
    if len(files) < 2:
        raise SystemExit(f"{run}: needs an evaluation before and after training, found {len(files)}")
    wf = masdsl.load(workflow_file or run / "workflow.mas")
    tasks = {t["id"]: t for t in load_split(wf, "eval")}
    metrics = Metrics(wf, tasks)
    before, after = evaluation(files[0], metrics), evaluation(files[-1], metrics)
    row = {"run": str(run), "steps": [files[0].stem, files[-1].stem], "tasks": len(before["success"]),
           "train_tokens": train_tokens(run),
           "success": {"before": rate(before["success"]), "after": rate(after["success"]),
                       "mcnemar": mcnemar(before["success"], after["success"])},
           "skills": {}}
    for key in sorted(set(before["first"]) | set(after["first"])):
        b, a = before["first"].get(key, {}), after["first"].get(key, {})
        common = sorted(set(b) & set(a))
        row["skills"][key] = {
            "turn0": {"before": rate(b), "after": rate(a),
                      "mcnemar": mcnemar({t: int(b[t] >= 1) for t in common}, {t: int(a[t] >= 1) for t in common})},
            "all_turns": {"before": rate(before["every"].get(key, [])), "after": rate(after["every"].get(key, []))}}
    return row


def pct(r: dict) -> str:
    lo, hi = r["ci"]
    return f"{100 * r['rate']:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]"


def markdown(rows: list[dict]) -> str:
    head = "| run | tasks | train tokens | what | before | after | McNemar p (b, c) |\n|---|--:|--:|---|--:|--:|--:|\n"
    lines = []
    for row in rows:
        name = Path(row["run"]).name
        s = row["success"]
        lines.append(f"| {name} | {row['tasks']} | {row['train_tokens']:,} | episode success | {pct(s['before'])} | "
                     f"{pct(s['after'])} | {s['mcnemar']['p']:.3g} ({s['mcnemar']['b']}, {s['mcnemar']['c']}) |")
        for key, v in row["skills"].items():
            t0, every = v["turn0"], v["all_turns"]
            lines.append(f"| | | | {key}, turn 0 | {pct(t0['before'])} | {pct(t0['after'])} | "
                         f"{t0['mcnemar']['p']:.3g} ({t0['mcnemar']['b']}, {t0['mcnemar']['c']}) |")
            lines.append(f"| | | | {key}, all turns ({every['before']['n']} -> {every['after']['n']} replies) | "
                         f"{pct(every['before'])} | {pct(every['after'])} | |")
    return head + "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--workflow", help="the .mas whose metric lines to evaluate again (default: the run's own)")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    rows = [compare(run, args.workflow) for run in run_folders(args.runs)]
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
