"""What a person sees during `masdsl run`: a live progress line (on a terminal; plain lines in a
log file, `loglines.py`), a final summary table, and a warning when a role's replies are often
cut by its `max_tokens` (`cut_warnings`).

>>> step_line(3, 10, {"reward/namer/turn0/mean": 0.5, "success/train": 0.25, "loss/p": 0.1})
'step 3/10  namer/t0 0.50  success 0.25'
>>> step_line(1, 3, {"success/train": 0.0, "groups/nonflat_frac": 0.25})
'step 1/3  success 0.00  non-flat 25 %'
>>> step_line(2, 3, {"success/train": 0.5, "cut/coder": 0.5, "cut/tester": 0.0, "parse_fail/tester": 0.25})
'step 2/3  success 0.50  cut coder 50 %  parse-fail tester 25 %'

Per role and policy, what the step measured besides (each when the metrics hold it):

>>> step_line(4, 9, {"success/train": 0.5, "success/train/a": 1.0, "success/train/b": 0.25,
...                  "entropy/p": 1.234, "kl/p": 0.0012, "kl_old/p": 0.0003})
'step 4/9  success 0.50 (a 1.00, b 0.25)  entropy p 1.23  kl p 0.0012  kl-old p 0.0003'
"""

from __future__ import annotations

import re
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Callable, Iterator, Mapping, Sequence

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress as Bar, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from masdsl.plan.run_plan import RunPlan
from masdsl.training.loglines import LogLines, eval_line, log_step_line, wrap_fields
from masdsl.training.significance import success_rows
from masdsl.training.skills import skill_rows

if TYPE_CHECKING:  # the trainer imports this module
    from masdsl.training.trainer import TrainResult

Metrics = Sequence[Mapping[str, float]]  # one mapping per step (history) or per evaluation

_REWARD = re.compile(r"^reward/(?P<role>[^/]+)/turn(?P<turn>\d+)/mean$")
CUT_WARN = 0.2  # a role with more than this share of its replies cut by max_tokens gets a warning


def step_line(step: int, steps: int, metrics: Mapping[str, float]) -> str:
    """Reward by role and turn, the train success rate, the share of non-flat groups and the roles
    whose replies were cut by `max_tokens` or failed to parse, in one short line."""
    parts = [f"step {step}/{steps}"]
    for key, value in metrics.items():
        m = _REWARD.match(key)
        if m:
            parts.append(f"{m['role']}/t{m['turn']} {value:.2f}")
    if "success/train" in metrics:
        per_role = ", ".join(f"{r} {v:.2f}" for r, v in role_shares(metrics, "success/train").items())
        parts.append(f"success {metrics['success/train']:.2f}" + (f" ({per_role})" if per_role else ""))
    for what, label, digits in (("entropy", "entropy", 2), ("kl", "kl", 4), ("kl_old", "kl-old", 4)):
        values = role_shares(metrics, what)  # per policy
        if values:
            parts.append(f"{label} " + ", ".join(f"{name} {v:.{digits}f}" for name, v in values.items()))
    if "groups/nonflat_frac" in metrics:  # the share of groups that carry a gradient
        parts.append(f"non-flat {100 * metrics['groups/nonflat_frac']:.0f} %")
    for what, label in (("cut", "cut"), ("parse_fail", "parse-fail")):  # only the roles it happened to
        shares = [f"{role} {100 * v:.0f} %" for role, v in role_shares(metrics, what).items() if v > 0]
        if shares:
            parts.append(f"{label} " + ", ".join(shares))
    return "  ".join(parts)


def role_shares(metrics: Mapping[str, float], what: str) -> dict[str, float]:
    """role -> value of the metrics `<what>/<role>` (e.g. `cut`, `eval_parse_fail`).

    >>> role_shares({"cut/a": 0.5, "eval_cut/a": 1.0, "cut/b/x": 2.0}, "cut")
    {'a': 0.5}
    """
    head = f"{what}/"
    return {k[len(head):]: v for k, v in metrics.items() if k.startswith(head) and "/" not in k[len(head):]}


def judge_warning(metrics: Mapping[str, float], suffix: str = "", when: str = "") -> list[str]:
    """A warning when judge replies restated an equation (`judge/restated<suffix>`): a score read
    from `1 + 6 = 7` may be an operand (`parse="number"`, a parser), and under `auto` its numbers
    were passed over, so the reply may hold no score at all.

    >>> judge_warning({"judge/calls": 8.0, "judge/restated": 2.0}, when=" at step 3")[0][:72]
    'warning: 2 of 8 judge replies at step 3 restated an equation (like `1 + '
    >>> judge_warning({"judge/calls": 8.0, "judge/restated": 0.0})
    []
    """
    count = metrics.get(f"judge/restated{suffix}", 0.0)
    if not count:
        return []
    return [f"warning: {count:.0f} of {metrics.get(f'judge/calls{suffix}', 0.0):.0f} judge replies{when} restated an "
            "equation (like `1 + 6 = 7`): a score read from it may be an operand, not the judge's verdict; each is "
            "marked `restated` in `masdsl trace` and `masdsl view`; ask the judge to answer `\\boxed{SCORE}` or "
            "`Score: N` (read first by parse=\"auto\")"]


def role_budgets(plan: RunPlan) -> dict[str, int]:
    """role -> its `max_tokens` after the config's `sample."*"` and `sample.<role>` overrides."""
    return {name: plan.max_tokens(name) for name in plan.samples}


def cut_warnings(metrics: Mapping[str, float], budgets: Mapping[str, int], warned: set[str] | None = None,
                 *, what: str = "cut", when: str = "") -> list[str]:
    """A warning for each role whose share of replies cut by `max_tokens` (`<what>/<role>`) is
    above `CUT_WARN` (a fifth): the role, the share, its budget and the override that raises it.
    Roles in `warned` are skipped and the warned ones added (once per role per run).

    >>> cut_warnings({"cut/coder": 0.25, "cut/tester": 0.2}, {"coder": 192}, when=" at step 3")
    ["warning: 25 % of role `coder`'s replies at step 3 were cut at max_tokens=192; raise its budget with `sample.coder.max_tokens=384`"]
    """
    out = []
    for role, share in role_shares(metrics, what).items():
        if share <= CUT_WARN or (warned is not None and role in warned):
            continue
        if warned is not None:
            warned.add(role)
        budget = budgets.get(role)
        out.append(f"warning: {100 * share:.0f} % of role `{role}`'s replies{when} were cut at "
                   f"max_tokens={budget or '?'}; raise its budget with `sample.{role}.max_tokens="
                   f"{2 * budget if budget else 'N'}`")
    return out


def split_warnings(metrics: Mapping[str, float], budget: int, warned: set[str] | None = None, *, when: str = "") -> list[str]:
    """A warning for each policy whose prompt groups (a prompt and its K replies) did not fit
    `train.micro_batch_tokens` (`split_groups/<policy>` above 0): their prompt ran once per
    micro-batch instead of once, and the budget that keeps the largest whole. Once per policy
    per run (`warned`), like `cut_warnings`.

    >>> split_warnings({"split_groups/p": 0.75, "largest_group_tokens/p": 812.0}, 512, when=" at step 1")[0][:95]
    "warning: 75 % of policy `p`'s prompt groups at step 1 did not fit train.micro_batch_tokens=512 "
    >>> split_warnings({"split_groups/p": 0.0, "largest_group_tokens/p": 812.0}, 1024)
    []
    """
    out = []
    for policy, share in role_shares(metrics, "split_groups").items():
        if share <= 0 or (warned is not None and policy in warned):
            continue
        if warned is not None:
            warned.add(policy)
        largest = int(metrics.get(f"largest_group_tokens/{policy}", 0))
        whole = 1 << max(0, largest - 1).bit_length()  # the next power of two
        out.append(f"warning: {100 * share:.0f} % of policy `{policy}`'s prompt groups{when} did not fit "
                   f"train.micro_batch_tokens={budget} (the largest, a prompt and its replies: {largest:,} tokens), "
                   f"so their prompt ran once per micro-batch instead of once; `train.micro_batch_tokens={whole}` "
                   f"keeps them whole (a faster update; its peak memory grows with the budget: "
                   f"docs/performance.md `## step memory`)")
    return out


def on_terminal(console: Console) -> bool:
    """Whether `console` writes to a terminal (not a file or pipe, whatever colours it was told to use)."""
    try:
        return bool(console.file.isatty())
    except (AttributeError, ValueError):  # a closed or fake stream
        return False


class Progress:
    """What a person sees while a run trains (nothing when console=None): on a terminal, a rich
    progress bar whose description is what runs now, with each step's line (`log_step_line`:
    phase times, success, non-flat share, cut and parse-fail rates) printed above it, wrapped
    between fields (`wrap_fields`); on a file or pipe, plain lines (`loglines.LogLines`: one per
    phase, step and evaluation, a heartbeat in a long phase)."""

    def __init__(self, console: Console | None, steps: int, start: int = 0) -> None:
        self.console, self.steps = console, steps
        self.budgets: dict[str, int] = {}  # role -> max_tokens (`role_budgets`), for the cut warnings
        self.micro_batch_tokens = 0  # `train.micro_batch_tokens`, for the split-group warnings (0: none)
        self._split_warned: set[str] = set()  # policies warned about (once per run)
        self._warned: set[str] = set()  # roles warned about (once per run)
        self._judge_warned = False  # restated equations in judge replies: warned once per run
        self._t0 = time.monotonic()
        self._bar = None
        self._lines = LogLines(console) if console is not None and not on_terminal(console) else None
        if console is not None and self._lines is None:
            self._bar = Bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), console=console, transient=False)
            self._task = self._bar.add_task("training", total=steps, completed=start)

    @contextmanager
    def live(self) -> Iterator["Progress"]:
        if self._lines is not None:
            with self._lines.live():
                yield self
            return
        if self._bar is None:
            yield self
            return
        with self._bar:
            yield self

    def status(self, text: str) -> None:
        """What runs now (`step 2/3: update`); in a log, a phase whose line comes when it ends."""
        if self._lines is not None:
            self._lines.begin(text)
        elif self._bar is not None:
            self._bar.update(self._task, description=text)

    def counter(self, what: str, total: int) -> Callable[[int], None]:
        """A `progress(n)` callback for a rollout: shows `what: done/total episodes`."""
        if self._lines is not None:
            lines, phase = self._lines, self._lines.begin(what, total)
            return lambda n: lines.advance(phase, n)
        done = [0]
        self.status(f"{what} 0/{total} episodes")

        def advance(n: int) -> None:
            done[0] += n
            self.status(f"{what} {done[0]}/{total} episodes")

        return advance

    def step(self, step: int, metrics: Mapping[str, float]) -> None:
        if self._lines is not None:
            self._lines.step(step_line(step, self.steps, metrics), metrics)
        elif self._bar is not None:
            # each step's line printed above the bar, whole (wrapped between fields at the terminal's
            # width), so that the last one stays when the bar moves on to the evaluation
            line = log_step_line(step_line(step, self.steps, metrics), metrics, time.monotonic() - self._t0)
            self._bar.console.print(Text(wrap_fields(line, max(self._bar.console.width, 40))), highlight=False)
            self._bar.update(self._task, completed=step, description=f"step {step}/{self.steps}")
        for line in cut_warnings(metrics, self.budgets, self._warned, when=f" at step {step}"):
            self.log(line)
        if self.micro_batch_tokens:
            for line in split_warnings(metrics, self.micro_batch_tokens, self._split_warned, when=f" at step {step}"):
                self.log(line)
        self._warn_judges(metrics, "", f" at step {step}")

    def _warn_judges(self, metrics: Mapping[str, float], suffix: str, when: str) -> None:
        """Judge replies that restated an equation: one warning per run (`judge_warning`)."""
        if not self._judge_warned:
            for line in judge_warning(metrics, suffix, when):
                self._judge_warned = True
                self.log(line)

    def evaluated(self, step: int, metrics: Mapping[str, float]) -> None:
        """An evaluation's result, in a log (`eval_line`); the terminal shows it in the final table."""
        if self._lines is not None:
            self._lines.say(eval_line(step, self.steps, metrics))
        self._warn_judges(metrics, "/eval", f" in the evaluation at step {step}")

    def log(self, text: str) -> None:
        if self._lines is not None:
            self._lines.say(text)
        elif self.console is not None:
            (self._bar.console if self._bar is not None else self.console).print(text, highlight=False)


def summary_table(result: TrainResult) -> Table:
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
    sig = getattr(result, "significance", None)
    skills = sig["skills"] if sig else {}
    for label, value in success_rows(sig) + learning_rows(result.history) + role_rows(result.history, before, after) \
            + skill_rows(before, after, skills) + reply_rows(result.history, before, after):
        table.add_row(label, value)
    table.add_row(*reward_error_row(result.history, getattr(result, "evals", None) or []))
    for row in judge_rows(result.history, getattr(result, "evals", None) or []):
        table.add_row(*row)
    table.add_row("steps", f"{result.steps}")
    table.add_row("wall time", f"{result.wall_s:.1f} s")
    table.add_row("run folder", str(result.run_dir))
    table.add_row("checkpoints", "\n".join(str(p) for p in result.checkpoints) or "-")
    if result.mlflow_run_id:
        table.add_row("MLflow run", result.mlflow_run_id)
    return table


def print_summary(console: Console, result: TrainResult) -> None:
    """The end-of-run table, then the command that opens the dashboard on a line of its own,
    never wrapped: a table folds a long value to the screen's width, and a command broken in
    two cannot be pasted. (A `Text`, so that `--quiet`'s console keeps it with the table.)"""
    console.print(summary_table(result))
    if result.ui_command:
        console.print(Text(f"dashboard: {result.ui_command}"), soft_wrap=True)


def reward_error_row(history: Metrics, evals: Metrics) -> tuple[str, str]:
    """How many rewards raised (each scored 0: `train.fail_on_reward_error` stops the run instead).

    >>> reward_error_row([{"reward_errors": 2.0}, {"reward_errors": 1.0}], [{"reward_errors/eval": 0.0}])
    ('reward errors (scored 0)', '3 in training, 0 in evaluations')
    """
    train = sum(h.get("reward_errors", 0.0) for h in history)
    evaluation = sum(e.get("reward_errors/eval", 0.0) for e in evals)
    return "reward errors (scored 0)", f"{train:.0f} in training, {evaluation:.0f} in evaluations"


def judge_rows(history: Metrics, evals: Metrics) -> list[tuple[str, str]]:
    """What the `judge(...)` rewards cost and how often their replies held no score (each scored
    the judge's `default`); nothing for a workflow without a judge.

    >>> judge_rows([{"judge/calls": 8.0, "judge/tokens": 80.0, "judge/unparsed": 2.0, "time/judge_s": 1.5}], [])
    [('judge replies', '8 in training (80 tokens, 1.5 s), 0 in evaluations; unparsed (scored the default): 2 in training, 0 in evaluations')]
    """
    calls = sum(h.get("judge/calls", 0.0) for h in history)
    eval_calls = sum(e.get("judge/calls/eval", 0.0) for e in evals)
    if not calls and not eval_calls:
        return []
    tokens, seconds = sum(h.get("judge/tokens", 0.0) for h in history), sum(h.get("time/judge_s", 0.0) for h in history)
    unparsed = sum(h.get("judge/unparsed", 0.0) for h in history)
    eval_unparsed = sum(e.get("judge/unparsed/eval", 0.0) for e in evals)
    restated = sum(h.get("judge/restated", 0.0) for h in history), sum(e.get("judge/restated/eval", 0.0) for e in evals)
    return [("judge replies", f"{calls:.0f} in training ({tokens:.0f} tokens, {seconds:.1f} s), {eval_calls:.0f} in "
                              f"evaluations; unparsed (scored the default): {unparsed:.0f} in training, "
                              f"{eval_unparsed:.0f} in evaluations"
                              + (f"; restated an equation: {restated[0]:.0f} in training, {restated[1]:.0f} in "
                                 "evaluations (masdsl trace)" if any(restated) else ""))]


def role_rows(history: Metrics, before: Mapping[str, float], after: Mapping[str, float]) -> list[tuple[str, str]]:
    """What each role could learn and what moved: the share of its groups that carried a
    gradient (`nonflat/<role>`), the share whose K replies were one and the same reply
    (`same_reply/<role>`, first -> last step: a policy that stopped exploring there), and its eval
    reward per turn, before -> after. A role whose groups were all flat received no gradient at
    all, whatever its reward did.

    >>> role_rows([{"nonflat/tool": 0.0, "nonflat/planner": 0.5}, {"nonflat/tool": 0.0, "nonflat/planner": 1.0}],
    ...           {"eval_reward/tool/turn0": 5.8, "eval_reward/planner/turn0": 3.2},
    ...           {"eval_reward/tool/turn0": 5.8, "eval_reward/planner/turn0": 5.8})
    [('role planner', 'non-flat groups 75 %; eval reward turn 0 3.200 -> 5.800'), ('role tool', 'no gradient (every group flat); eval reward turn 0 5.800 -> 5.800')]
    >>> role_rows([{"nonflat/tester": 0.75, "same_reply/tester": 0.125}, {"nonflat/tester": 0.25, "same_reply/tester": 0.5}], {}, {})
    [('role tester', 'non-flat groups 50 %; groups of one repeated reply 12 % -> 50 % (first -> last step)')]
    """
    roles = sorted({k.split("/", 1)[1] for h in history for k in h if k.startswith("nonflat/")})
    rows = []
    for role in roles:
        shares = [h[f"nonflat/{role}"] for h in history if f"nonflat/{role}" in h]
        share = sum(shares) / len(shares) if shares else 0.0
        text = "no gradient (every group flat)" if share == 0 else f"non-flat groups {100 * share:.0f} %"
        same = [h[f"same_reply/{role}"] for h in history if f"same_reply/{role}" in h]
        if same:
            text += f"; groups of one repeated reply {100 * same[0]:.0f} % -> {100 * same[-1]:.0f} % (first -> last step)"
        turns = sorted({k for k in {**before, **after} if k.startswith(f"eval_reward/{role}/turn")})
        for key in turns:
            b, a = before.get(key), after.get(key)
            fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
            text += f"; eval reward turn {key.rsplit('turn', 1)[1]} {fmt(b)} -> {fmt(a)}"
        rows.append((f"role {role}", text))
    return rows


def learning_rows(history: Metrics) -> list[tuple[str, str]]:
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

    def reward(h: Mapping[str, float]) -> float:
        vals = [v for k, v in h.items() if _REWARD.match(k)]
        return sum(vals) / len(vals) if vals else 0.0

    rows.append(("train reward (first -> last step)", f"{reward(history[0]):.3f} -> {reward(history[-1]):.3f}"))
    return rows


def reply_rows(history: Metrics, before: Mapping[str, float], after: Mapping[str, float]) -> list[tuple[str, str]]:
    """Per role, the shares of replies cut by `max_tokens` and whose parse failed: training's
    first and last step, the evaluations before and after training.

    >>> for row in reply_rows([{"cut/a": 0.5, "parse_fail/a": 0.0}, {"cut/a": 0.25, "parse_fail/a": 0.0}],
    ...                       {"eval_cut/a": 0.0}, {"eval_cut/a": 1.0}):
    ...     print(row)
    ('replies cut at max_tokens, train (first -> last step)', 'a 50 % -> 25 %')
    ('replies whose parse failed, train (first -> last step)', 'a 0 % -> 0 %')
    ('replies cut at max_tokens, eval (before -> after)', 'a 0 % -> 100 %')
    """
    phases = (("train (first -> last step)", "", history[0] if history else {}, history[-1] if history else {}),
              ("eval (before -> after)", "eval_", before or {}, after or {}))
    pct = lambda v: "-" if v is None else f"{100 * v:.0f} %"  # noqa: E731
    rows = []
    for phase, prefix, first, last in phases:
        for what, label in (("cut", "replies cut at max_tokens"), ("parse_fail", "replies whose parse failed")):
            a, b = role_shares(first, prefix + what), role_shares(last, prefix + what)
            if a or b:
                rows.append((f"{label}, {phase}", ", ".join(f"{r} {pct(a.get(r))} -> {pct(b.get(r))}"
                                                            for r in dict.fromkeys([*a, *b]))))
    return rows
