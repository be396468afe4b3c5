"""What the Plan-Path helper alone scores: a planner that only parses the tool's printed plan.

    .venv/bin/python benchmarks/helper_alone.py                       # the helper's BFS, no model
    .venv/bin/python benchmarks/helper_alone.py --run runs/plan_path_helper/<stamp>

The `## learning` table's MAS rows are measured on `workflows/plan_path_helper.mas`, whose tool
may call `grid.shortest_path` (a complete breadth-first search). This script answers how much
of the MAS's score a planner with no skill at all gets there: on each of the first `--tasks`
eval boards (the boards `train.eval_tasks` evaluates), the planner's moves are `actions(...)`
of a tool's stdout, played by the env, scored with the workflow's planner reward.

- without `--run`: the tool is the one-line program `print(json.dumps(grid.shortest_path(board)))`
  run in the sandbox (the helper itself, no model);
- with `--run RUN`: the tool is the model's own greedy eval reply at every eval step the run
  recorded (`RUN/eval/step_N.jsonl`), so "the warm-started tool + a parsing planner" and
  "the trained tool + a parsing planner" are measured on the same boards.

Writes one JSON line per source to stdout.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import masdsl
from masdsl.config import SandboxConfig
from masdsl.envs.parsers import actions
from masdsl.runtime.inputs import load_split, make_env
from masdsl.runtime.records import read_records
from masdsl.runtime.rundir import eval_files

HELPER_PROGRAM = "import sys, json, grid\nprint(json.dumps(grid.shortest_path(sys.stdin.read())))\n"


def play(env, task: dict, code: str) -> tuple[bool, float, str]:
    """(solved, planner reward, tool stdout) of a planner that plays the parsed stdout of `code`."""
    state = env.apply(env.reset(task), "tool", {"code": code, "ok": True})
    stdout = env.view(state)["tool_output"]
    moves = actions(stdout)
    after = env.apply(state, "planner", {"moves": moves, "ok": moves is not None})
    # the workflow's planner reward is the sum of every reward term of its action
    return env.success(after), after.last_reward, stdout


def summary(source: str, env, tasks: list[dict], programs: dict[str, str]) -> dict:
    solved, reward, missing = 0, 0.0, 0
    for task in tasks:
        code = programs.get(task["id"])
        if code is None:
            missing += 1
            continue
        ok, r, _ = play(env, task, code)
        solved += ok
        reward += r
    n = len(tasks) - missing
    return {"source": source, "tasks": n, "solved": solved, "success": solved / n if n else None,
            "planner_reward_mean": round(reward / n, 6) if n else None, "missing": missing}


def tool_programs(records_file: Path) -> dict[str, str]:
    """The tool's parsed program per eval task (the first tool reply of each episode)."""
    out: dict[str, str] = {}
    for rec in read_records(records_file):
        if rec.role == "tool" and rec.turn == 0 and rec.task_id not in out:
            out[rec.task_id] = rec.fields.get("code") or ""
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workflow", default="workflows/plan_path_helper.mas")
    ap.add_argument("--tasks", type=int, default=24)
    ap.add_argument("--run", type=Path, help="a run folder: also score its tool's recorded eval programs")
    args = ap.parse_args()
    wf = masdsl.load(args.workflow)
    env = make_env(wf, SandboxConfig())
    tasks = load_split(wf, "eval")[: args.tasks]
    print(json.dumps(summary("helper: grid.shortest_path printed", env, tasks, {t["id"]: HELPER_PROGRAM for t in tasks})))
    if args.run is not None:
        for records_file in eval_files(args.run):
            programs = tool_programs(records_file)
            print(json.dumps(summary(f"tool of {args.run.name} at eval {records_file.stem}", env, tasks, programs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
