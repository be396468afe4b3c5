"""Progress as plain lines, for a log file (stderr redirected, `nohup`, a cluster job), where a
rich progress bar draws nothing until the command ends. `masdsl run` in a log:

    evaluating (step 0): 4/4 episodes in 3.1 s
    eval at step 0/3  success 0.25  reward 0.40  a/t0 0.50
    step 1/3: rollout 8/8 episodes in 5.1 s
    step 1/3: update done in 2.0 s
    step 1/3  elapsed 0:00:12  rollout 5.1 s  update 2.0 s  sync 0.1 s  85 tok/s  a/t0 0.50  success 0.25
    step 2/3: rollout 3/8 episodes, 30 s so far

One line when a phase ends (a rollout, the update with its weight sync, an evaluation), one per
step (`log_step_line`: the bar's `step_line` with the elapsed time, the phases' times and the
sampling speed), one per evaluation (`eval_line`), and a heartbeat after every `HEARTBEAT_S`
(30 s) without a line while a phase runs (the last line above). Each line is written whole and
flushed at once; the console never wraps (`masdsl.commands.output.console` is wide on a file).
`masdsl.training.display.Progress` writes through `LogLines` when its console is not a terminal;
`masdsl eval` and `masdsl warm-start` do too.
"""

from __future__ import annotations

import re
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from masdsl.runtime.heartbeat import HEARTBEAT_S, Heartbeat

_TIME = re.compile(r"^time/(?P<phase>\w+)_s$")
_EVAL_REWARD = re.compile(r"^eval_reward/(?P<role>[^/]+)/turn(?P<turn>\d+)$")


def clock_text(seconds: float) -> str:
    """h:mm:ss.

    >>> clock_text(12.4), clock_text(3723)
    ('0:00:12', '1:02:03')
    """
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def log_step_line(line: str, metrics: Mapping[str, float], elapsed_s: float | None) -> str:
    """A step's `step_line` (`step N/M  ...`) with, after `step N/M`, the time since the run
    began (None: left out), each phase's time (`time/<phase>_s`) and the sampling speed.

    >>> log_step_line("step 1/3  success 0.25", {"time/rollout_s": 5.12, "time/update_s": 2.0,
    ...                                          "throughput/tokens_per_s": 85.4}, 12.0)
    'step 1/3  elapsed 0:00:12  rollout 5.1 s  update 2.0 s  85 tok/s  success 0.25'
    """
    head, _, rest = line.partition("  ")
    parts = [head] + ([] if elapsed_s is None else [f"elapsed {clock_text(elapsed_s)}"])
    parts += [f"{m['phase']} {v:.1f} s" for k, v in metrics.items() if (m := _TIME.match(k))]
    if "throughput/tokens_per_s" in metrics:
        parts.append(f"{metrics['throughput/tokens_per_s']:.0f} tok/s")
    return "  ".join(parts + ([rest] if rest else []))


def wrap_fields(line: str, width: int, indent: str = "    ") -> str:
    """`line`'s fields (parts joined by two spaces) on as many lines of at most `width` characters
    as they need, broken only between fields, the later lines indented: a terminal line cut at
    its width would hide the fields at its end.

    >>> print(wrap_fields("step 1/3  success 0.50  entropy p 1.23  non-flat 25 %  cut a 50 %", 32))
    step 1/3  success 0.50
        entropy p 1.23
        non-flat 25 %  cut a 50 %
    """
    lines: list[str] = []
    for field in line.split("  "):
        if lines and len(lines[-1]) + 2 + len(field) <= width:
            lines[-1] += "  " + field
        else:
            lines.append((indent if lines else "") + field)
    return "\n".join(lines)


def eval_line(step: int, steps: int, metrics: Mapping[str, float]) -> str:
    """An evaluation's result: success, mean reward, each role's reward by turn, and each role's
    skill metrics over its turns (`skill/eval/<role>/<name>`: its `metric` lines).

    >>> eval_line(0, 3, {"success/eval": 0.25, "reward/eval": 0.4, "eval_reward/a/turn0": 0.5, "pass@1/eval": 0.25,
    ...                  "skill/eval/a/correct": 0.5, "skill/eval/a/correct/turn0": 0.4})
    'eval at step 0/3  success 0.25  reward 0.40  a/t0 0.50  skill a/correct 0.50'
    """
    parts = [f"eval at step {step}/{steps}"]
    for key, label in (("success/eval", "success"), ("reward/eval", "reward")):
        if key in metrics:
            parts.append(f"{label} {metrics[key]:.2f}")
    parts += [f"{m['role']}/t{m['turn']} {v:.2f}" for k, v in metrics.items() if (m := _EVAL_REWARD.match(k))]
    parts += [f"skill {k[len('skill/eval/'):]} {v:.2f}" for k, v in metrics.items()
              if k.startswith("skill/eval/") and k.count("/") == 3]
    return "  ".join(parts)


@dataclass
class Phase:
    """A phase running now: `label` (`step 2/3: rollout`), `done` of `total` `unit`s so far."""

    label: str
    total: int | None
    unit: str
    t0: float
    done: int = 0
    note: str = ""  # shown in the heartbeat (the warm start's loss)

    def ended(self, now: float) -> str:
        """The line when it ends.

        >>> Phase("step 1/3: rollout", 8, "episodes", 0.0, done=8).ended(5.12), Phase("step 1/3: update", None, "", 0.0).ended(2.0)
        ('step 1/3: rollout 8/8 episodes in 5.1 s', 'step 1/3: update done in 2.0 s')
        """
        if self.total is None:
            return f"{self.label} done in {now - self.t0:.1f} s"
        return f"{self.label} {self.done}/{self.total} {self.unit} in {now - self.t0:.1f} s"

    def running(self, now: float) -> str:
        """The heartbeat line while it runs.

        >>> Phase("step 2/3: rollout", 8, "episodes", 0.0, done=3).running(30.2), Phase("update", None, "", 0.0).running(61)
        ('step 2/3: rollout 3/8 episodes, 30 s so far', 'update, 61 s so far')
        """
        count = f" {self.done}/{self.total} {self.unit}" if self.total is not None else ""
        note = f", {self.note}" if self.note else ""
        return f"{self.label}{count}{note}, {now - self.t0:.0f} s so far"


class LogLines:
    """Plain progress lines on a rich `console` (see the module docstring). Thread-safe: the
    heartbeat writes from its own thread while `live()` runs."""

    def __init__(self, console: Any, every: float = HEARTBEAT_S) -> None:
        self.console = console
        self.t0 = time.monotonic()
        self._lock = threading.RLock()
        self._phase: Phase | None = None
        self._beat = Heartbeat(self.say, self._heartbeat, every)

    @contextmanager
    def live(self) -> Iterator["LogLines"]:
        """The heartbeat runs inside; a phase still open at the end gets its line."""
        with self._beat:
            try:
                yield self
            finally:
                self.end()

    def say(self, text: str) -> None:
        """One line, whole and flushed."""
        with self._lock:
            self.console.print(text, highlight=False, markup=False, soft_wrap=True)
            flush = getattr(getattr(self.console, "file", None), "flush", None)
            if flush is not None:
                flush()
            self._beat.spoke()

    def begin(self, label: str, total: int | None = None, unit: str = "episodes") -> Phase:
        """A new phase (the one running gets its line first)."""
        with self._lock:
            self.end()
            self._phase = Phase(label, total, unit, time.monotonic())
            return self._phase

    def advance(self, phase: Phase, n: int = 1, note: str = "") -> None:
        """`n` more done; the phase's line comes when all `total` are."""
        with self._lock:
            phase.done += n
            phase.note = note or phase.note
            if phase is self._phase and phase.total is not None and phase.done >= phase.total:
                self.end()

    def end(self) -> None:
        """The running phase's line (none running: nothing)."""
        with self._lock:
            phase, self._phase = self._phase, None
            if phase is not None:
                self.say(phase.ended(time.monotonic()))

    def step(self, line: str, metrics: Mapping[str, float]) -> None:
        """A step's line (`log_step_line`), after the line of the phase it ends."""
        with self._lock:
            self.end()
            self.say(log_step_line(line, metrics, time.monotonic() - self.t0))

    def _heartbeat(self) -> str | None:
        with self._lock:
            return self._phase.running(time.monotonic()) if self._phase is not None else None
