"""Base rates before any training: how often each role already succeeds when sampled K times.

    .venv/bin/python benchmarks/base_rates.py WORKFLOW [--tasks 8] [--samples 4] [overrides ...]
                                              [--label NAME] [--write-docs]

Runs one training-mode rollout (tree sampling: K candidates per (task, role, turn), the best
continues) of the untrained policies on the first `--tasks` train tasks, updates nothing, and
prints per role and turn: candidates, the share that parsed, the share cut by `max_tokens`, the
share that acted (in the games: a reward other than the -2 of no action or a failed tool
program, i.e. a planner or a tool program that produced a parseable move list), the share with a
positive reward (in math: a correct answer or a program printing one), the mean reward and the share of non-flat groups (groups
whose K rewards differ: the only groups AT-GRPO learns from), then the episodes' success. A
setting where every group is flat cannot learn, whatever the algorithm.

With `--write-docs` the table is appended to docs/performance.md `## base rates` under `--label`.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

from perf_doc import DOC, append_line, machine, update

ROOT = Path(__file__).resolve().parent.parent
NO_ACTION = -2.0  # the games' reward for no action, and for a tool program that failed or printed none


def measure(workflow: str, overrides: list[str], tasks: int, samples: int, show: int = 0) -> tuple[list[dict], dict]:
    """Per (role, turn) rows and the episodes' summary of one untrained training rollout."""
    from masdsl.api import config_of, workflow_of
    from masdsl.plan.run_plan import resolve_rollout
    from masdsl.runtime.engine_factory import build_engines, close_engines
    from masdsl.runtime.executor import rollout
    from masdsl.plan.inputs import load_split, make_env

    wf = workflow_of(workflow)
    cfg = config_of(wf, ["tracking.enabled=false", *overrides])
    rows = load_split(wf, "train")[:tasks]
    env = make_env(wf, cfg.sandbox)
    plan = resolve_rollout(wf, cfg)
    engines = build_engines(plan)
    t0 = time.perf_counter()
    try:
        ro = rollout(wf, env, rows, engines, mode="train", samples=samples, step=0, seed=cfg.train.seed, plan=plan)
    finally:
        close_engines(engines)
    wall = time.perf_counter() - t0
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
                "tokens": ro.tokens_generated, "wall_s": wall}
    return table, episodes


def render(table: list[dict], episodes: dict) -> str:
    out = ["| role | turn | candidates | parsed % | cut % | acted % | reward > 0 % | mean reward | non-flat groups |",
           "|---|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for r in table:
        out.append(f"| {r['role']} | {r['turn']} | {r['n']} | {100 * r['parsed']:.0f} | {100 * r['cut']:.0f} | "
                   f"{100 * r['acted']:.0f} | {100 * r['rewarded']:.0f} | {r['reward']:.3f} | {round(r['nonflat'] * r['groups'])}/{r['groups']} |")
    out.append(f"\nepisodes {episodes['episodes']}, success (the best candidate continues) "
               f"{100 * episodes['success']:.0f} %, {episodes['tokens']} tokens in {episodes['wall_s']:.0f} s")
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
    args = ap.parse_intermixed_args()
    table, episodes = measure(args.workflow, args.overrides, args.tasks, args.samples, args.show)
    text = render(table, episodes)
    print(text, flush=True)
    if args.write_docs:
        cmd = " ".join(["benchmarks/base_rates.py", *sys.argv[1:]])
        block = f"\n**{args.label or args.workflow}** (`.venv/bin/python {cmd}`; {machine()})\n\n{text}\n"
        update(DOC, append_line, "base rates", block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
