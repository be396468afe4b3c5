"""What a person sees during `masdsl run`: a live progress line and a final summary table.

>>> step_line(3, 10, {"reward/namer/turn0/mean": 0.5, "success/train": 0.25, "loss/p": 0.1})
'step 3/10  namer/t0 0.50  success 0.25'
>>> step_line(1, 3, {"success/train": 0.0, "groups/nonflat_frac": 0.25})
'step 1/3  success 0.00  non-flat 25 %'
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Any, Iterator, Mapping

from rich.progress import BarColumn, MofNCompleteColumn, Progress as Bar, TextColumn, TimeElapsedColumn
from rich.table import Table

_REWARD = re.compile(r"^reward/(?P<role>[^/]+)/turn(?P<turn>\d+)/mean$")


def step_line(step: int, steps: int, metrics: Mapping[str, float]) -> str:
    """Reward by role and turn, then the train success rate, in one short line."""
    parts = [f"step {step}/{steps}"]
    for key, value in metrics.items():
        m = _REWARD.match(key)
        if m:
            parts.append(f"{m['role']}/t{m['turn']} {value:.2f}")
    if "success/train" in metrics:
        parts.append(f"success {metrics['success/train']:.2f}")
    if "groups/nonflat_frac" in metrics:  # the share of groups that carry a gradient
        parts.append(f"non-flat {100 * metrics['groups/nonflat_frac']:.0f} %")
    return "  ".join(parts)


class Progress:
    """A rich progress bar whose description is the latest `step_line` (quiet when console=None)."""

    def __init__(self, console: Any, steps: int, start: int = 0) -> None:
        self.console, self.steps = console, steps
        self._bar = None
        if console is not None:

            self._bar = Bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), console=console, transient=False)
            self._task = self._bar.add_task("training", total=steps, completed=start)

    @contextmanager
    def live(self) -> Iterator["Progress"]:
        if self._bar is None:
            yield self
            return
        with self._bar:
            yield self

    def status(self, text: str) -> None:
        if self._bar is not None:
            self._bar.update(self._task, description=text)

    def counter(self, what: str, total: int) -> Any:
        """A `progress(n)` callback for a rollout: shows `what: done/total episodes`."""
        done = [0]
        self.status(f"{what} 0/{total} episodes")

        def advance(n: int) -> None:
            done[0] += n
            self.status(f"{what} {done[0]}/{total} episodes")

        return advance

    def step(self, step: int, metrics: Mapping[str, float]) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=step, description=step_line(step, self.steps, metrics))

    def log(self, text: str) -> None:
        if self.console is not None:
            (self._bar.console if self._bar is not None else self.console).print(text, highlight=False)


def summary_table(result: Any) -> Any:
    """The end-of-run table: eval success before vs after, where everything is."""

    table = Table(title=f"masdsl run: {result.workflow}", show_header=True, header_style="bold")
    table.add_column("")
    table.add_column("value", overflow="fold")
    before, after = result.eval_before or {}, result.eval_after or {}
    for key in ("success/eval", "reward/eval"):
        if key in before or key in after:
            b, a = before.get(key), after.get(key)
            fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
            table.add_row(f"{key} (before -> after)", f"{fmt(b)} -> {fmt(a)}")
    for label, value in learning_rows(result.history):
        table.add_row(label, value)
    table.add_row("steps", f"{result.steps}")
    table.add_row("wall time", f"{result.wall_s:.1f} s")
    table.add_row("run folder", str(result.run_dir))
    table.add_row("checkpoints", "\n".join(str(p) for p in result.checkpoints) or "-")
    if result.mlflow_run_id:
        table.add_row("MLflow run", result.mlflow_run_id)
    if result.ui_command:
        table.add_row("dashboard", result.ui_command)
    return table


def learning_rows(history: Any) -> list[tuple[str, str]]:
    """Whether the run could learn, at a glance: the share of (task, role, turn) groups whose
    candidates got different rewards (only those carry a gradient), and the training reward.

    >>> learning_rows([{"groups/nonflat_frac": 0.25, "groups/count": 8, "reward/a/turn0/mean": 0.5},
    ...                {"groups/nonflat_frac": 0.5, "groups/count": 8, "reward/a/turn0/mean": 1.0}])
    [('non-flat groups (learnable)', '37.5 % of 16 (per step: 25 %, 50 %)'), ('train reward (first -> last step)', '0.500 -> 1.000')]
    """
    if not history:
        return []
    total = sum(h.get("groups/count", 0.0) for h in history)
    nonflat = sum(h.get("groups/nonflat_frac", 0.0) * h.get("groups/count", 0.0) for h in history)
    per_step = ", ".join(f"{100 * h.get('groups/nonflat_frac', 0.0):.0f} %" for h in history)
    rows = [("non-flat groups (learnable)", f"{100 * nonflat / total if total else 0.0:.1f} % of {total:.0f} "
                                            f"(per step: {per_step})")]

    def reward(h: Any) -> float:
        vals = [v for k, v in h.items() if _REWARD.match(k)]
        return sum(vals) / len(vals) if vals else 0.0

    rows.append(("train reward (first -> last step)", f"{reward(history[0]):.3f} -> {reward(history[-1]):.3f}"))
    return rows
