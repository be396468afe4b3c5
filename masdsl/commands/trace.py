"""`masdsl trace RUN_DIR [--task ID] [--role R]`: readable transcripts of a run's episodes.

For each episode (task): every step in order with role, turn, node, the prompt, each
candidate's output, parsed fields and reward parts; the selected candidate is marked `*`.
RUN_DIR is a run folder (`runs/<workflow>/<timestamp>`) or `runs/<workflow>` (its newest run).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from typing import Iterable, Iterator

from masdsl.errors import UserError
from masdsl.runtime.records import StepRecord
from masdsl.runtime.rundir import open_run


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", help="a run folder (runs/<workflow>/<timestamp>) or runs/<workflow>")
    p.add_argument("--task", metavar="ID", help="only this task")
    p.add_argument("--role", metavar="R", help="only this role's steps")
    p.add_argument("--step", type=int, metavar="S", help="only this training step (-1: evaluation)")
    p.add_argument("--selected", action="store_true", help="only the selected candidate of each step")
    p.add_argument("--no-prompt", action="store_true", help="leave prompts out")


def _indent(text: str, pad: str = "    ") -> str:
    return "\n".join(pad + line for line in (text.splitlines() or [""]))


def _fields(fields: dict) -> str:
    return ", ".join(f"{k}={json.dumps(v)[:200]}" for k, v in fields.items())


def render_step(group: list[StepRecord], *, prompt: bool = True, selected_only: bool = False) -> Iterator[str]:
    """The lines of one (task, role, turn) step: header, prompt, then each candidate."""
    head = group[0]
    where = f" (line {head.source_line})" if head.source_line else ""
    yield f"── {head.role} · turn {head.turn} · node {head.node}{where} · policy {head.policy}"
    if prompt:
        cut = " [prompt truncated]" if head.truncated_prompt else ""
        yield f"  prompt ({len(head.prompt_ids)} tokens){cut}:"
        yield _indent(head.prompt_text)
    for r in group:
        if selected_only and not r.selected:
            continue
        mark = "*" if r.selected else " "
        yield (f" {mark} candidate {r.candidate}: reward {r.reward:.4f} (team {r.reward_team:.4f}, local "
               f"{r.reward_local:.4f}) · {len(r.response_ids)} tokens · {r.finish_reason}"
               f"{'' if r.parse_ok else ' · PARSE FAILED'}")
        yield _indent(r.response_text, "      ")
        yield f"      fields: {_fields(r.fields)}"


def render(records: Iterable[StepRecord], *, task: str | None = None, role: str | None = None,
           step: int | None = None, prompt: bool = True, selected_only: bool = False) -> Iterator[str]:
    """Transcript lines, episode by episode, steps in the order they were taken."""
    episodes: dict[tuple[int, int, str], dict[tuple[str, int], list[StepRecord]]] = defaultdict(dict)
    for r in records:
        if (task is not None and r.task_id != task) or (step is not None and r.step != step):
            continue
        ep = episodes[(r.step, r.episode, r.task_id)]
        ep.setdefault((r.role, r.turn), []).append(r)
    if not episodes:
        raise UserError("no records match" + (f" task `{task}`" if task else "") + (f" step {step}" if step is not None else ""))
    for (s, index, task_id), steps in episodes.items():
        first = next(iter(steps.values()))[0]
        success = "?" if first.episode_success is None else f"{first.episode_success:g}"
        final = "?" if first.episode_reward is None else f"{first.episode_reward:.4f}"
        label = "eval" if s < 0 else f"step {s}"
        yield f"══ task {task_id} · episode {index} · {label} · success {success} · final reward {final}"
        for (r_role, _), group in steps.items():
            if role is None or r_role == role:
                yield from render_step(sorted(group, key=lambda r: r.candidate), prompt=prompt, selected_only=selected_only)
        yield ""


def main(args: argparse.Namespace) -> int:
    if not os.path.exists(args.run_dir):
        raise UserError(f"{args.run_dir}: no such run folder")
    run = open_run(args.run_dir)
    try:
        for line in render(run.records(), task=args.task, role=args.role, step=args.step,
                           prompt=not args.no_prompt, selected_only=args.selected):
            print(line)
        sys.stdout.flush()
    except BrokenPipeError:  # `masdsl trace RUN | head`: the reader has had enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0
