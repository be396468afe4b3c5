"""The per-step line on a terminal (issue 43, item 4): rich's progress bar cut its description at
the terminal's width right after `entropy`, hiding the non-flat share, the cut and parse-fail
rates and the phase times, and the next phase's status replaced the last step's line. Each
step's line is now printed whole above the bar, wrapped between fields.

The console is a real rich console on a file that says it is a terminal, 80 columns wide."""

from __future__ import annotations

import io
import re

from rich.console import Console

from masdsl.training.display import Progress

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\r")
METRICS = {"time/rollout_s": 5.0, "time/update_s": 2.0, "time/sync_s": 0.4, "throughput/tokens_per_s": 80.0,
           "reward/coder/turn0/mean": 0.5, "reward/tester/turn0/mean": 0.25, "success/train": 0.25,
           "success/train/coder": 0.25, "success/train/tester": 0.5, "entropy/shared": 1.5, "kl_old/shared": 0.0012,
           "groups/nonflat_frac": 0.375, "cut/coder": 0.5, "cut/tester": 0.0, "parse_fail/tester": 0.25}


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def shown(steps: int, width: int = 80) -> list[str]:
    f = Terminal()
    console = Console(file=f, width=width, force_terminal=True, color_system=None)
    show = Progress(console, steps=steps)
    with show.live():
        for step in range(1, steps + 1):
            show.status(f"step {step}/{steps}: rollout")
            show.step(step, {**METRICS, "success/train": step / 10})
        show.status(f"evaluating (step {steps}) 0/4 episodes")  # the next phase, after the last step
    return [line.rstrip() for line in ANSI.sub("\n", f.getvalue()).splitlines() if line.strip()]


def test_every_field_of_every_step_shows_within_the_terminal_width():
    lines = shown(3)
    text = "\n".join(lines)
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    for step in (1, 2, 3):  # the last step's line too, though the bar has moved on to the evaluation
        head = next(i for i, line in enumerate(lines) if line.startswith(f"step {step}/3  elapsed"))
        block = " ".join(lines[head:head + 4])
        for field in ("rollout 5.0 s", "update 2.0 s", "sync 0.4 s", "80 tok/s", "coder/t0 0.50",
                      f"success 0.{step}0 (coder 0.25, tester 0.50)", "entropy shared 1.50", "kl-old shared 0.0012",
                      "non-flat 38 %", "cut coder 50 %", "parse-fail tester 25 %"):
            assert field in block, (field, block)
    assert text.count("non-flat 38 %") == 3  # once per step, never cut


def test_a_narrow_terminal_breaks_between_fields_only():
    lines = shown(1, width=44)
    head = next(i for i, line in enumerate(lines) if line.startswith("step 1/1  elapsed"))
    block = [line.strip() for line in lines[head:head + 8]]
    fields = [f for line in block for f in line.split("  ")]
    for field in ("non-flat 38 %", "cut coder 50 %", "parse-fail tester 25 %", "update 2.0 s"):
        assert field in fields, (field, block)  # whole, on one line


def test_judge_replies_that_restated_an_equation_warn_once_per_run():
    f = Terminal()
    show = Progress(Console(file=f, width=300, force_terminal=True, color_system=None), steps=3)
    judged = {"judge/calls": 8.0, "judge/unparsed": 2.0, "judge/restated": 2.0}
    with show.live():
        show.step(1, {**METRICS, "judge/calls": 8.0, "judge/restated": 0.0})
        show.step(2, {**METRICS, **judged})
        show.step(3, {**METRICS, **judged})
        show.evaluated(3, {"success/eval": 0.5, "judge/calls/eval": 4.0, "judge/restated/eval": 1.0})
    warnings = [line for line in ANSI.sub("\n", f.getvalue()).splitlines() if line.startswith("warning:")
                and "judge" in line]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("warning: 2 of 8 judge replies at step 2 restated an equation (like `1 + 6 = 7`)")
    assert "marked `restated` in `masdsl trace` and `masdsl view`" in warnings[0]
