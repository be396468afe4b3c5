"""Base rates before any training: how often each role already succeeds when sampled K times.

    .venv/bin/python benchmarks/base_rates.py WORKFLOW [--tasks 8] [--samples 4] [overrides ...]
                                              [--split train] [--records FILE] [--label NAME] [--write-docs]

Runs one training-mode rollout (tree sampling: K candidates per (task, role, turn), the best
continues) of the untrained policies on the first `--tasks` tasks of `--split` (default train:
`eval` measures held-out problems, e.g. `reasoning_gym(...)`'s unseen templates), updates nothing, and
prints per role and turn: candidates, the share that parsed, the share cut by `max_tokens`, the
share that acted (in the games: a reward other than the -2 of no action or a failed tool
program, i.e. a planner or a tool program that produced a parseable move list), the share with a
positive reward (in math: a correct answer or a program printing one), the mean reward and the share of non-flat groups (groups
whose K rewards differ: the only groups AT-GRPO learns from), then the episodes' success. A
setting where every group is flat cannot learn, whatever the algorithm.

`--records FILE` writes each candidate's task, role, turn, reward and skill `metric` values
(JSONL), for rates the table does not give. With `--write-docs` the table is appended to
docs/performance.md `## base rates` under `--label`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

from perf_doc import DOC, append_line, machine, update

from masdsl.stats import wilson

ROOT = Path(__file__).resolve().parent.parent
NO_ACTION = -2.0  # the games' reward for no action, and for a tool program that failed or printed none


def measure(workflow: str, overrides: list[str], tasks: int, samples: int, show: int = 0, split: str = "train",
            records: str = "") -> tuple[list[dict], dict]:
    """Per (role, turn) rows and the episodes' summary of one untrained training rollout."""
    from masdsl.api import config_of, workflow_of
    from masdsl.plan.run_plan import resolve_rollout
    from masdsl.runtime.engine_factory import build_engines, close_engines
    from masdsl.runtime.executor import rollout
    from masdsl.runtime.inputs import load_split, make_env

    wf = workflow_of(workflow)
    cfg = config_of(wf, ["tracking.enabled=false", *overrides, f"train.samples={samples}"])  # K: the plan's
    rows = load_split(wf, split)[:tasks]
    env = make_env(wf, cfg.sandbox)
    plan = resolve_rollout(wf, cfg)
    engines = build_engines(plan)
    t0 = time.perf_counter()
    try:
        ro = rollout(plan, env, rows, engines, mode="train", step=0)
    finally:
        close_engines(engines)
    wall = time.perf_counter() - t0
    if records:
        Path(records).write_text("".join(json.dumps({"task_id": r.task_id, "role": r.role, "turn": r.turn, "candidate": r.candidate,
                                                     "reward": r.reward, "metrics": r.metrics}) + "\n" for r in ro.records))
    for role in wf.roles:  # a few replies per role, to see why they fail
        for r in [r for r in ro.records if r.role == role][:show]:
            print(f"--- {role} turn {r.turn} reward {r.reward:.3f} finish {r.finish_reason}\n{r.response_text}", flush=True)
    by_group: dict[tuple, list] = defaultdict(list)
    for r in ro.records:
        by_group[(r.role, r.turn, r.task_id)].append(r)
    stats: dict[tuple, dict] = defaultdict(lambda: defaultdict(float))
    for (role, turn, _), recs in by_group.items():
        s = stats[(role, turn)]
        s["groups"] += 1
        s["nonflat"] += len({round(r.reward, 9) for r in recs}) > 1
        for r in recs:
            s["n"] += 1
            s["parsed"] += r.parse_ok
            s["cut"] += r.finish_reason == "length"
            s["acted"] += r.reward != NO_ACTION
            s["rewarded"] += r.reward > 0
            s["reward"] += r.reward
    table = [{"role": role, "turn": turn, "n": int(s["n"]), "parsed": s["parsed"] / s["n"],
              "cut": s["cut"] / s["n"], "acted": s["acted"] / s["n"], "rewarded": s["rewarded"] / s["n"], "reward": s["reward"] / s["n"],
              "groups": int(s["groups"]), "nonflat": s["nonflat"] / s["groups"]}
             for (role, turn), s in sorted(stats.items(), key=lambda kv: (kv[0][1], kv[0][0]))]
    episodes = {"episodes": len(ro.episodes), "success": sum(e.success for e in ro.episodes) / max(1, len(ro.episodes)),
                "tokens": ro.tokens_generated, "wall_s": wall, "metrics": metric_rates(ro.records)}
    return table, episodes


def metric_rates(records: list) -> list[dict]:
    """Per (role, turn, skill metric): candidates where it is 1 (a right program, a right answer),
    and tasks where at least one of the K is; `split`: groups holding both a 1 and a 0, the groups
    that differ on the skill itself (a reward may differ on something else, a program failing)."""
    groups: dict[tuple, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        for name, value in (r.metrics or {}).items():
            groups[(r.role, r.turn, name)][r.task_id].append(value >= 1)
    out = []
    for (role, turn, name), by_task in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0], kv[0][2])):
        hits = [v for vs in by_task.values() for v in vs]
        out.append({"role": role, "turn": turn, "metric": name, "k": sum(hits), "n": len(hits),
                    "tasks_any": sum(any(vs) for vs in by_task.values()), "tasks": len(by_task),
                    "split": sum(0 < sum(vs) < len(vs) for vs in by_task.values())})
    return out


def render(table: list[dict], episodes: dict) -> str:
    out = ["| role | turn | candidates | parsed % | cut % | acted % | reward > 0 % | mean reward | non-flat groups |",
           "|---|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for r in table:
        out.append(f"| {r['role']} | {r['turn']} | {r['n']} | {100 * r['parsed']:.0f} | {100 * r['cut']:.0f} | "
                   f"{100 * r['acted']:.0f} | {100 * r['rewarded']:.0f} | {r['reward']:.3f} | {round(r['nonflat'] * r['groups'])}/{r['groups']} |")
    out.append(f"\nepisodes {episodes['episodes']}, success (the best candidate continues) "
               f"{100 * episodes['success']:.0f} %, {episodes['tokens']} tokens in {episodes['wall_s']:.0f} s")
    if episodes.get("metrics"):
        out += ["\n| role | turn | metric = 1: candidates [Wilson 95 %] | tasks with one of K [Wilson 95 %] | groups split 1/0 |",
                "|---|--:|--:|--:|--:|"]
        for m in episodes["metrics"]:
            (lo, hi), (tlo, thi) = wilson(m["k"], m["n"]), wilson(m["tasks_any"], m["tasks"])
            out.append(f"| {m['role']} {m['metric']} | {m['turn']} | {m['k']}/{m['n']} = {100 * m['k'] / m['n']:.1f} % "
                       f"[{100 * lo:.1f}, {100 * hi:.1f}] | {m['tasks_any']}/{m['tasks']} [{100 * tlo:.1f}, {100 * thi:.1f}] | "
                       f"{m['split']}/{m['tasks']} |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workflow")
    ap.add_argument("overrides", nargs="*")
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--label", default="")
    ap.add_argument("--show", type=int, default=0, help="print this many replies of each role")
    ap.add_argument("--write-docs", action="store_true")
    ap.add_argument("--split", default="train", help="the tasks' split (eval: held-out problems)")
    ap.add_argument("--records", default="", help="write each candidate's reward and metrics here (JSONL)")
    args = ap.parse_intermixed_args()
    table, episodes = measure(args.workflow, args.overrides, args.tasks, args.samples, args.show, args.split, args.records)
    text = render(table, episodes)
    print(text, flush=True)
    if args.write_docs:
        cmd = " ".join(["benchmarks/base_rates.py", *sys.argv[1:]])
        block = f"\n**{args.label or args.workflow}** (`.venv/bin/python {cmd}`; {machine()})\n\n{text}\n"
        update(DOC, append_line, "base rates", block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
