"""`train(plan, run_dir)`: AT-GRPO, read top to bottom like nanoGPT's train.py.

    rollout (tree sampling, K candidates per role step) -> group by (task, role, turn)
    -> advantages (optionally leaving out flat or low groups) -> per policy, PPO-clip
       mini-batch steps on its own roles' samples                    (training/step.py)
    -> sync the new weights into that policy's engine -> metrics, eval, checkpoint

The knobs are `masdsl.config.TrainConfig` (one comment per knob there). Everything random is
seeded from `train.seed`: sampling seeds are derived per (step, task, role, turn) by the
executor, and the data order per epoch from (seed, epoch); so the same seed on the same CPU
machine gives identical step records and final weights, and a resumed run continues exactly.

A rollout whose env call (or inference engine) still fails after its retries stops the run
(`StepFailed`): the trainer first saves a checkpoint of the last completed step, i.e. the
state from before the failed rollout (weights, optimizer, RNG, data cursor), so that `--resume`
redoes exactly that rollout (training/recovery.py). A failed evaluation saves the step it
follows, marked so that `--resume` evaluates it first.
"""

from __future__ import annotations

import json
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from masdsl.config import ConfigError
from masdsl.errors import StepFailed
from masdsl.learner.ahead import RESUME_REFUSED, Ahead
from masdsl.plan.run_plan import RunPlan
from masdsl.runtime.rundir import RunDir
from masdsl.tracking import Tracker, start_run
from masdsl.training import checkpoint as ckpt
from masdsl.training.display import Progress, print_summary
from masdsl.training.evaluation import evaluate, greedy_repeats_warning
from masdsl.training.export import export_final
from masdsl.training.interrupt import check, deferred, interruptible
from masdsl.training.recovery import Recovery, take_unfinished
from masdsl.training.session import TrainSession, open_session, start_state
from masdsl.training.significance import run_significance
from masdsl.training.step import sample_batch, train_step
from masdsl.training.viewpage import log_view


@dataclass
class TrainResult:
    workflow: str
    run_dir: Path
    steps: int  # optimizer steps completed
    eval_before: dict[str, float] | None
    eval_after: dict[str, float] | None
    checkpoints: list[Path]
    history: list[dict[str, float]] = field(default_factory=list)  # per-step metrics
    evals: list[dict[str, float]] = field(default_factory=list)  # every evaluation, with "step"
    mlflow_run_id: str | None = None
    ui_command: str = ""
    wall_s: float = 0.0
    # the first and the last evaluation compared task by task: intervals and McNemar's test
    # (`masdsl.training.significance`); None without two evaluations of the same tasks
    significance: dict[str, Any] | None = None

    def summary(self) -> dict[str, Any]:
        """The run folder's `summary.json` (`masdsl run --json` prints it with `run_dir`)."""
        return {"workflow": self.workflow, "steps": self.steps, "eval_before": self.eval_before,
                "eval_after": self.eval_after, "checkpoints": [str(p) for p in self.checkpoints],
                "mlflow_run_id": self.mlflow_run_id, "wall_s": round(self.wall_s, 2), "significance": self.significance}


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def next_batch(n: int, batch: int, seed: int, cursor: int) -> tuple[list[int], int]:
    """Row indices of the next batch and the new cursor (tasks consumed so far).

    Each epoch is a fresh permutation seeded by (seed, epoch); an epoch's last partial batch
    is dropped, so a batch never holds the same task twice (groups are keyed by task id).
    `batch <= n`: the plan checked it when the data loaded (`RunPlan.check_train_split`).

    >>> next_batch(5, 2, seed=0, cursor=0)[1], next_batch(5, 2, seed=0, cursor=2)[1]
    (2, 4)
    >>> a, _ = next_batch(5, 2, 0, 4); b, _ = next_batch(5, 2, 0, 0); len(set(a)), a == b   # epoch 2
    (2, False)
    """
    per_epoch = (n // batch) * batch
    epoch, pos = divmod(cursor, per_epoch)
    order = np.random.default_rng([seed, epoch]).permutation(n)
    return [int(i) for i in order[pos : pos + batch]], cursor + batch


def train(plan: RunPlan, run_dir: RunDir, *, resume: str | Path | None = None,
          console: Any = None, on_step: Callable[[int, dict], None] | None = None) -> TrainResult:
    """Train the plan's workflow with AT-GRPO; records, evaluations, checkpoints and at the end
    `summary.json` go into `run_dir` (the caller opened it: `RunDir.open(plan, ...)`). The caller
    resolved `plan` (`masdsl.plan.run_plan.resolve_run`), once, so every config mistake is refused
    before this."""
    t_start = time.perf_counter()
    workflow = plan.workflow
    if resume is not None and plan.train.async_rollout:
        raise ConfigError(RESUME_REFUSED)
    seed_everything(plan.train.seed)
    show = Progress(console, plan.train.steps)
    for line in [*plan.placement.lines(), greedy_repeats_warning(plan.train)]:
        if line:
            show.log(line)
    session = open_session(plan, run_dir, show)  # 1. data and env, models, engines, optimizers
    tracker, status = None, "FAILED"
    try:
        state = start_state(session, resume)  # 2. fresh start, or the newest complete checkpoint
        run_dir.truncate_records(state.step)
        tracker = start_run(workflow, plan.record(), kind="run", run_dir=run_dir.path, resume=resume is not None)
        for point in [*state.history, *state.evals]:  # resumed: the plot at the end draws the whole run
            tracker.remember({k: v for k, v in point.items() if k != "step"}, step=point["step"])
        with show.live(), interruptible():
            saved = _loop(session, state, tracker, on_step)  # 3. evaluate, then step until train.steps
        if tracker.wants_models and saved:  # tracking.log_models / register: HF folders of the final policies
            tracker.log_models(export_final(plan, run_dir.path, state.step), step=state.step)
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        if tracker is not None:
            log_view(run_dir.path, tracker, plan.train.grouping, plan.advantages)  # the artifact view/view.html
            tracker.finish(status, checkpoint=ckpt.latest(run_dir.path))
        session.close()
    result = TrainResult(
        workflow.name, run_dir.path, state.step, _strip(state.evals[0]), _strip(state.evals[-1]),
        [p for p in ckpt.list_complete(run_dir.path)], state.history, state.evals,
        getattr(tracker, "run_id", None), tracker.ui_command(), time.perf_counter() - t_start,
        run_significance(run_dir),
    )
    run_dir.write_summary(result.summary())
    if console is not None:
        print_summary(console, result)
    return result


def _loop(session: TrainSession, state: ckpt.TrainState, tracker: Tracker,
          on_step: Callable[[int, dict], None] | None) -> list[Path]:
    """The evaluation before training, then steps, evaluations and checkpoints; the checkpoints saved.

    A `StepFailed` anywhere saves what `Recovery` says and stops the run with how to continue."""
    tc, show = session.plan.train, session.show
    saved: list[Path] = []
    recovery = Recovery("evaluation before training")
    unfinished = take_unfinished(state)  # a failed run left this step's eval/checkpoint
    draw = _draw_for(session)
    # train.async_rollout=1: the next step's rollout samples during each update (learner/ahead.py)
    ahead = Ahead(lambda step, cursor: sample_batch(session, step, draw, cursor)) if tc.async_rollout else None
    try:
        if not state.evals:  # evaluation before any update
            state.evals.append(_evaluate(session, 0, tracker))
        while (state.step < tc.steps and not budget_spent(state, tc.token_budget)) or unfinished:
            check()  # a Ctrl-C that a library swallowed (training/interrupt.py)
            fresh, t_step = not unfinished, time.perf_counter()
            if not unfinished:
                recovery.begin(f"step {state.step + 1}/{tc.steps}")
                metrics = train_step(session, state, draw, ahead)
                # from here on, a failure saves the updated step
                recovery.begin(f"step {state.step}/{tc.steps} (weight sync)", updated=True)
                t0 = time.perf_counter()
                session.sync_all()
                metrics["time/sync_s"] = time.perf_counter() - t0
                metrics["time/update_s"] += metrics["time/sync_s"]  # the update's time includes its sync
                state.history[-1].update({k: metrics[k] for k in ("time/update_s", "time/sync_s")})
                t0 = time.perf_counter()
                with deferred():  # an interrupt inside MLflow's store would leave it locked
                    tracker.log_metrics(metrics, step=state.step)
                metrics["time/tracking_s"] = time.perf_counter() - t0
                show.step(state.step, metrics)
            unfinished = False
            last = state.step if budget_spent(state, tc.token_budget) else tc.steps
            if fresh and last < tc.steps:
                show.log(f"step {state.step}/{tc.steps}: the token budget is spent "
                         f"({_generated(state):,.0f} of train.token_budget={tc.token_budget:,}); this is the last step")
            t_eval = time.perf_counter()
            if _due(state.step, tc.eval_every, last):  # evaluate every N steps (and at the end)
                recovery.begin(f"evaluation at step {state.step}/{tc.steps}", updated=True)
                state.evals.append(_evaluate(session, state.step, tracker))
            t_ckpt = time.perf_counter()
            if _due(state.step, tc.checkpoint_every, last):  # checkpoint every M (and at the end)
                saved.append(session.save_checkpoint(state))
            if fresh:
                _log_phase_times(tracker, state, metrics, (t_step, t_eval, t_ckpt))
            if on_step is not None:
                on_step(state.step, _strip(state.history[-1]))
        check()
    except StepFailed as exc:  # an env or engine failed for good: save, say how to continue
        recovery.save_and_raise(exc, session, state)
    return saved


def _log_phase_times(tracker: Tracker, state: ckpt.TrainState, metrics: dict[str, float],
                     started: tuple[float, float, float]) -> None:
    """The step's phases after its metrics were logged: `time/eval_s` and `time/checkpoint_s` (~0
    when there was none), the logging itself (`time/tracking_s`) and the whole step
    (`time/step_s`). Known only now, so logged at the same step after the others, and added to
    the step's history. `started`: when the step, its evaluation and its checkpoint began."""
    t_step, t_eval, t_ckpt = started
    now = time.perf_counter()
    times = {"time/eval_s": t_ckpt - t_eval, "time/checkpoint_s": now - t_ckpt,
             "time/tracking_s": metrics["time/tracking_s"], "time/step_s": now - t_step}
    metrics.update(times)
    state.history[-1].update(times)
    with deferred():
        tracker.log_metrics(times, step=state.step)


def _draw_for(session: TrainSession) -> Callable[[int], tuple[list[dict], int]]:
    """The run's data order as `train_step` draws from it: cursor -> (tasks, cursor after them)."""
    return lambda cursor: _draw(session, cursor)


def _draw(session: TrainSession, cursor: int) -> tuple[list[dict], int]:
    """The next batch of train tasks in the run's data order, and the cursor after it."""
    tc = session.plan.train
    idx, cursor = next_batch(len(session.train_rows), tc.batch, tc.seed, cursor)
    return [session.train_rows[i] for i in idx], cursor


def _evaluate(session: TrainSession, step: int, tracker: Tracker) -> dict[str, float]:
    n = len(session.eval_rows) * session.plan.train.eval_samples
    result = evaluate(session.env, session.eval_rows, session.engines, session.plan, step,
                      session.run_dir, tracker, session.show.counter(f"evaluating (step {step})", n))
    session.show.evaluated(step, result)  # in a log file, a line with the result
    return result


def _due(step: int, every: int, last: int) -> bool:
    """Whether an every-N-steps event (eval, checkpoint) happens after `step`: every `every`
    steps (0: never) and always after the last one.

    >>> [s for s in range(1, 8) if _due(s, 3, 7)], [s for s in range(1, 4) if _due(s, 0, 3)]
    ([3, 6, 7], [3])
    """
    return step == last or bool(every and step % every == 0)


def budget_spent(state: ckpt.TrainState, budget: int) -> bool:
    """Whether the training rollouts so far generated `budget` tokens or more (0: no budget).

    >>> s = ckpt.TrainState(2, 0, "w", "h", history=[{"tokens/generated": 60.0}, {"tokens/generated": 50.0}])
    >>> budget_spent(s, 100), budget_spent(s, 200), budget_spent(s, 0)
    (True, False, False)
    """
    return budget > 0 and _generated(state) >= budget


def _generated(state: ckpt.TrainState) -> float:
    return sum(h.get("tokens/generated", 0.0) for h in state.history)


def _strip(ev: dict[str, Any]) -> dict[str, float]:
    return {k: v for k, v in ev.items() if k != "step"}
