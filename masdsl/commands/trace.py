"""`masdsl trace RUN_DIR [--task ID] [--role R] [--step S]`: readable transcripts of a run's episodes.

For each episode (task): its success, final reward and the task's reference answer, then every
step in order with role, turn, node, the prompt, each candidate's output, parsed fields and
reward parts, and what each judge of its reward replied and scored (a reply with no score, or a
score read from a restated equation, is marked); the selected candidate is marked `*`.
RUN_DIR is a run folder (`runs/<workflow>/<timestamp>`) or `runs/<workflow>` (its newest run).

Without `--step`: the episodes of `records.jsonl` (a training run's rollouts, or the episodes
of a `masdsl eval` run). `--step N`: the rollout of training step N. `--step -1`: the
evaluations: those of a `masdsl eval` run, and a training run's `eval/step_N.jsonl` (labelled
`eval at step N`: the evaluation after N steps, 0 being the one before training). A `--step`,
`--task` or `--role` that the records do not have is refused (exit 2) with the nearest one
("did you mean") and the ones there are.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from typing import Any, Iterable, Iterator

from masdsl.errors import UserError, did_you_mean
from masdsl.runtime.records import StepRecord
from masdsl.runtime.rundir import EVAL_DIR, eval_files, open_run


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", help="a run folder (runs/<workflow>/<timestamp>) or runs/<workflow>")
    p.add_argument("--task", metavar="ID", help="only this task")
    p.add_argument("--role", metavar="R", help="only this role's steps")
    p.add_argument("--step", type=int, metavar="S", help="only this training step's rollout (-1: the evaluations)")
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
        for j in r.judge:
            yield from judge_lines(j)


def judge_lines(j: dict) -> Iterator[str]:
    """A judge's reply to one candidate: its score, whether the reply held one, and whether the
    score came from (or passed over) a restated equation."""
    line = f" (line {j['line']})" if j.get("line") else ""
    how = "parsed" if j.get("parsed") else "NO SCORE in the reply: the judge's default"
    yield f"      judge {j.get('policy', '?')}{line}: score {float(j.get('score', 0.0)):g} ({how})"
    if j.get("restated"):
        yield f"        RESTATED `{j['restated']}`: {restated_note(j)}"
    yield _indent(str(j.get("reply", "")), "        > ")


def restated_note(j: dict) -> str:
    """What a restated equation did to a judge's score (`masdsl.lang.judge.restated`)."""
    if not j.get("parsed"):
        return "its numbers are not read as a score, and the reply holds no other"
    if j.get("parse") == "auto":
        return f"its numbers were passed over; the score {float(j.get('score', 0.0)):g} is the first number outside it"
    return f"the score {float(j.get('score', 0.0)):g} is one of its numbers, maybe not the judge's verdict"


def render(records: Iterable[StepRecord], *, task: str | None = None, role: str | None = None,
           step: int | None = None, prompt: bool = True, selected_only: bool = False) -> Iterator[str]:
    """Transcript lines, episode by episode, steps in the order they were taken."""
    return render_labelled(((r, None) for r in records if step is None or r.step == step), task=task, role=role,
                           step=step, prompt=prompt, selected_only=selected_only)


def render_labelled(pairs: Iterable[tuple[StepRecord, str | None]], *, task: str | None = None,
                    role: str | None = None, step: int | None = None, prompt: bool = True,
                    selected_only: bool = False) -> Iterator[str]:
    """`render` of (record, label) pairs: the label names where an episode comes from (None:
    `step N`, or `eval` for step -1). A task or role that no record has is a UserError with a
    "did you mean"."""
    episodes: dict[tuple[str, int, int, str], dict[tuple[str, int], list[StepRecord]]] = defaultdict(dict)
    seen: dict[str, set] = {"task": set(), "role": set()}
    for r, label in pairs:
        seen["task"].add(r.task_id)
        seen["role"].add(r.role)
        if task is not None and r.task_id != task:
            continue
        ep = episodes[(label or _label(r.step), r.step, r.episode, r.task_id)]
        ep.setdefault((r.role, r.turn), []).append(r)
    _check_filters(seen, task, role)
    if not episodes:
        raise UserError("no records match" + (f" task `{task}`" if task else "") + (f" step {step}" if step is not None else ""))
    for (label, _, index, task_id), steps in episodes.items():
        if role is not None and all(r_role != role for r_role, _ in steps):
            continue
        first = next(iter(steps.values()))[0]
        success = "?" if first.episode_success is None else f"{first.episode_success:g}"
        final = "?" if first.episode_reward is None else f"{first.episode_reward:.4f}"
        reference = f" · reference {_fields(first.reference)}" if first.reference else ""
        yield f"══ task {task_id} · episode {index} · {label} · success {success} · final reward {final}{reference}"
        for (r_role, _), group in steps.items():
            if role is None or r_role == role:
                yield from render_step(sorted(group, key=lambda r: r.candidate), prompt=prompt, selected_only=selected_only)
        yield ""


def _label(step: int) -> str:
    return "eval" if step < 0 else f"step {step}"


def _check_filters(seen: dict[str, set], task: str | None, role: str | None) -> None:
    """A `--task` or `--role` that no record of the run has: refused, with the nearest name."""
    for what, value in (("task", task), ("role", role)):
        if value is None or value in seen[what] or not seen[what]:
            continue
        hint = did_you_mean(value, seen[what])
        names = sorted(seen[what])
        listed = ", ".join(names[:12]) + (f", ... ({len(names)} in all)" if len(names) > 12 else "")
        raise UserError(f"no {what} `{value}` in these records" + (f" ({hint})" if hint else "")
                        + f"; {what}s: {listed}")


def steps_of(run: Any) -> list[int]:
    """The steps `--step` may name: those of records.jsonl, and -1 when there are evaluations."""
    steps = {r.step for r in run.records()}
    if eval_files(run.path):
        steps.add(-1)
    return sorted(steps, key=lambda s: (s < 0, s))  # the training steps, then -1


def check_step(run: Any, step: int) -> None:
    """A `--step` the run does not have: refused, with the nearest step and the ones it has."""
    steps = steps_of(run)
    if step in steps:
        return
    if step == -1:
        raise UserError(f"{run.path}: no evaluation records (no {EVAL_DIR}/step_N.jsonl, no step -1 records)")
    hint = did_you_mean(str(step), [str(s) for s in steps], "{}")
    shown = ", ".join("-1 (evaluation)" if s < 0 else str(s) for s in steps) or "none"
    raise UserError(f"{run.path}: no step {step}" + (f" ({hint})" if hint else "") + f"; steps: {shown}")


def selected_records(run: Any, step: int | None) -> Iterator[tuple[StepRecord, str | None]]:
    """(record, label) to show: records.jsonl (of `step`, if given); for `--step -1` also every
    evaluation of a training run (`eval/step_N.jsonl`, labelled `eval at step N`)."""
    for r in run.records():
        if step is None or r.step == step:
            yield r, None
    if step == -1:
        yield from run.evaluations()


def main(args: argparse.Namespace) -> int:
    if not os.path.exists(args.run_dir):
        raise UserError(f"{args.run_dir}: no such run folder")
    run = open_run(args.run_dir)
    if args.step is not None:
        check_step(run, args.step)
    lines = render_labelled(selected_records(run, args.step), task=args.task, role=args.role, step=args.step,
                            prompt=not args.no_prompt, selected_only=args.selected)
    try:
        for line in lines:
            print(line)
        sys.stdout.flush()
    except BrokenPipeError:  # `masdsl trace RUN | head`: the reader has had enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0
