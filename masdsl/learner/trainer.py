"""`train(workflow, cfg)`: AT-GRPO, read top to bottom like nanoGPT's train.py.

    rollout (tree sampling, K candidates per role step) -> group by (task, role, turn)
    -> advantages (optionally leaving out flat or low groups) -> per policy, PPO-clip
       mini-batch steps on its own roles' samples
    -> sync the new weights into that policy's engine -> metrics, eval, checkpoint

The knobs are `masdsl.config.TrainConfig` (one comment per knob there). Everything random is
seeded from `train.seed`: sampling seeds are derived per (step, task, role, turn) by the
executor, and the data order per epoch from (seed, epoch); so the same seed on the same CPU
machine gives identical step records and final weights, and a resumed run continues exactly.

A rollout whose env call (or inference engine) still fails after its retries stops the run
(`StepFailed`): the trainer first saves a checkpoint of the last completed step, i.e. the
state from before the failed rollout (weights, optimizer, RNG, data cursor), so that `--resume`
redoes exactly that rollout. A failed evaluation saves the step it follows, marked so that
`--resume` evaluates it first.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from masdsl.config import ConfigError, to_yaml
from masdsl.errors import StepFailed
from masdsl.learner import checkpoint as ckpt
from masdsl.learner.advantages import compute_advantages, select_groups
from masdsl.learner.config import validate
from masdsl.learner.display import Progress, summary_table
from masdsl.learner.grouping import group_records
from masdsl.learner.metrics import eval_metrics, step_metrics
from masdsl.learner.policies import describe, iter_trainable, load_policies
from masdsl.learner.update import UpdateStats, update_policy
from masdsl.runtime.records import StepRecord, write_records
from masdsl.runtime.rundir import RECORDS


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


def seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def next_batch(n: int, batch: int, seed: int, cursor: int) -> tuple[list[int], int]:
    """Row indices of the next batch and the new cursor (tasks consumed so far).

    Each epoch is a fresh permutation seeded by (seed, epoch); an epoch's last partial batch
    is dropped, so a batch never holds the same task twice (groups are keyed by task id).

    >>> next_batch(5, 2, seed=0, cursor=0)[1], next_batch(5, 2, seed=0, cursor=2)[1]
    (2, 4)
    >>> a, _ = next_batch(5, 2, 0, 4); b, _ = next_batch(5, 2, 0, 0); len(set(a)), a == b   # epoch 2
    (2, False)
    """
    import numpy as np

    if batch > n:
        raise ConfigError(f"`train.batch` ({batch}) is larger than the train split ({n} tasks)")
    per_epoch = (n // batch) * batch
    epoch, pos = divmod(cursor, per_epoch)
    order = np.random.default_rng([seed, epoch]).permutation(n)
    return [int(i) for i in order[pos : pos + batch]], cursor + batch


def collect(workflow, env, tasks, engines, cfg, step: int, on_records=None, progress=None) -> Any:
    """The training rollout. `trajectory` grouping (vanilla GRPO) needs K independent episodes
    per task instead of tree sampling: K rollouts of one sample, with different seeds."""
    from masdsl.runtime.executor import rollout

    tc = cfg.train
    if tc.grouping != "trajectory":
        return rollout(workflow, env, tasks, engines, mode="train", samples=tc.samples, step=step,
                       seed=tc.seed, cfg=cfg, on_records=on_records, progress=progress)
    parts = []
    for k in range(tc.samples):
        part = rollout(workflow, env, tasks, engines, mode="train", samples=1, step=step,
                       seed=tc.seed + 1_000_003 * k, cfg=cfg, progress=progress)
        for r in part.records:
            r.episode += k * len(tasks)  # distinct episodes of the same task
        if on_records is not None:
            on_records(part.records)
        parts.append(part)
    merged = parts[0]
    for p in parts[1:]:
        merged.records += p.records
        merged.episodes += p.episodes
        merged.tokens_generated += p.tokens_generated
        merged.wall_s += p.wall_s
    return merged


def evaluate(workflow, env, tasks, engines, cfg, step: int, run_dir: Path, tracker: Any, progress=None) -> dict[str, float]:
    """Plain sampling (one candidate, `train.eval_temperature`) on the eval tasks, `train.eval_samples`
    independent episodes per task (mean@N and pass@k when N > 1)."""
    from masdsl.runtime.executor import rollout

    roll = rollout(workflow, env, tasks, engines, mode="eval", samples=1, step=step, seed=cfg.train.seed, cfg=cfg,
                   progress=progress, repeats=cfg.train.eval_samples)
    write_records(_eval_dir(run_dir) / f"step_{step:06d}.jsonl", roll.records)
    result = {"step": step, **eval_metrics(roll.records, roll.episodes)}
    tracker.log_metrics({k: v for k, v in result.items() if k != "step"}, step=step)
    tracker.log_text(_transcript(roll.records[:40]), f"traces/eval_step{step:06d}.md")
    return result


def build_optimizer(params: Sequence[Any], tc: Any) -> Any:
    """AdamW (`train.lr`, `train.weight_decay`), fused where torch has the kernel: on CPU one
    step of SmolLM2-135M takes 0.14 s fused vs 0.70 s for the default per-tensor loop."""
    import torch

    params = list(params)
    fusable = all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)
    return torch.optim.AdamW(params, lr=tc.lr, weight_decay=tc.weight_decay, fused=fusable or None)


def sync(policy: Any, engine: Any) -> None:
    """Make `engine` sample from `policy`'s current weights before the next rollout.

    An hf engine holding the very model object trains in place (nothing to copy); any other
    engine (vllm, or a copy) receives the weights, or only the adapter, by `update_weights`.
    """
    if getattr(engine, "model", None) is policy.model:
        return
    state = policy.state_dict()
    if policy.compute_dtype != "float32" and policy.adapter is None:  # fp32 master weights: send what the engine holds
        import torch

        dtype, cast = getattr(torch, policy.compute_dtype), {}
        state = {k: cast.setdefault(v.data_ptr(), v.to(dtype)) if v.is_floating_point() else v  # tied stay tied
                 for k, v in state.items()}
    engine.update_weights(state)


def train(workflow: Any, cfg: Any, *, run_dir: str | Path, resume: str | Path | None = None,
          console: Any = None, on_step: Callable[[int, dict], None] | None = None) -> TrainResult:
    """Train `workflow` with AT-GRPO; write records, metrics and checkpoints under `run_dir`."""
    import torch

    from masdsl.learner.policies import build_engines, close_engines
    from masdsl.runtime.session import prepare
    from masdsl.tracking import start_run

    t_start = time.perf_counter()
    tc = cfg.train
    run_dir = Path(run_dir)
    validate(workflow, cfg)  # 0. every config mistake, before anything heavy
    seed_everything(tc.seed)
    show = Progress(console, tc.steps)
    for line in describe(workflow, cfg.policy):
        show.log(line)
    from masdsl.commands.eval import greedy_repeats_warning

    warning = greedy_repeats_warning(cfg)
    if warning:
        show.log(warning)

    # 1. data and env, models, engines, optimizers
    env, data = prepare(workflow, cfg)
    train_rows, eval_rows = data["train"], data["eval"][: tc.eval_tasks or None]
    next_batch(len(train_rows), tc.batch, tc.seed, 0)  # batch > split size: fail now
    policies = load_policies(workflow, cfg)
    engines = build_engines(policies, cfg)
    optimizers = {p.name: build_optimizer(p.parameters(), tc) for p in iter_trainable(policies)}
    references = _references(policies, cfg) if tc.kl_coef > 0 else {}
    if tc.gradient_checkpointing:
        for p in iter_trainable(policies):
            p.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})

    # 2. fresh start, or resume from the newest complete checkpoint
    state = ckpt.TrainState(step=0, cursor=0, workflow=workflow.name, workflow_hash=workflow.file_hash)
    if resume is not None:
        path = ckpt.find(resume)
        state = ckpt.read_state(path, workflow.file_hash)
        ckpt.restore(path, policies=policies, optimizers=optimizers)
        for p in policies.values():
            sync(p, engines[p.name])
        show.log(f"resumed from {path} at step {state.step}")
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(to_yaml(cfg))
    _truncate_records(run_dir / RECORDS, state.step)
    tracker = start_run(workflow, cfg, kind="run", run_dir=run_dir)
    saved: list[Path] = []
    status = "FAILED"
    # what runs now, and what a StepFailed there saves: (label, RNG before it, step unfinished)
    attempt: tuple[str, Any, bool] = ("evaluation before training", ckpt.rng_state(), False)
    unfinished = bool(state.extra.pop(UNFINISHED, False))  # a failed run left this step's eval/checkpoint
    try:
        with show.live():
            if not state.evals:  # 3. evaluation before any update
                state.evals.append(evaluate(workflow, env, eval_rows, engines, cfg, 0, run_dir, tracker,
                                            show.counter("evaluating (step 0)", len(eval_rows) * tc.eval_samples)))
            while state.step < tc.steps or unfinished:  # 4. the loop
                if not unfinished:
                    step = state.step
                    idx, cursor = next_batch(len(train_rows), tc.batch, tc.seed, state.cursor)
                    tasks = [train_rows[i] for i in idx]
                    attempt = (f"step {step + 1}/{tc.steps}", ckpt.rng_state(), False)
                    t0 = time.perf_counter()
                    n_episodes = len(tasks) * (tc.samples if tc.grouping == "trajectory" else 1)
                    roll = collect(workflow, env, tasks, engines, cfg, step,
                                   progress=show.counter(f"step {step + 1}/{tc.steps}: rollout", n_episodes))
                    t_roll = time.perf_counter() - t0
                    records = roll.records
                    write_records(run_dir / RECORDS, records)
                    # 4a. group and score: (task, role, turn) groups, advantages within each group
                    groups = group_records(records, tc.grouping)
                    adv, gstats = compute_advantages(groups, len(records))
                    kept = select_groups(groups, drop_flat=tc.drop_flat_groups, drop_lowest=tc.drop_lowest_groups)
                    keep = [False] * len(records)
                    for g in kept:
                        for i in g.indices:
                            keep[i] = True
                    # 4b. update each policy on its own roles' samples
                    show.status(f"step {step + 1}/{tc.steps}: update")
                    t0 = time.perf_counter()
                    updates: dict[str, UpdateStats] = {}
                    for p in iter_trainable(policies):
                        updates[p.name] = update_policy(p, optimizers[p.name], records, adv, tc, references.get(p.name),
                                                        keep=keep)
                    metrics = step_metrics(records, roll.episodes, gstats, updates, kept_groups=len(kept),
                                           tokens=roll.tokens_generated,
                                           rollout_s=t_roll, update_s=time.perf_counter() - t0, kl_on=tc.kl_coef > 0)
                    state.step, state.cursor = step + 1, cursor
                    state.history.append({"step": state.step, **metrics})
                    # 4c. sync each policy's engine (from here on, a failure saves the updated step)
                    attempt = (f"step {state.step}/{tc.steps} (weight sync)", ckpt.rng_state(), True)
                    for p in iter_trainable(policies):
                        sync(p, engines[p.name])
                    metrics["time/update_s"] = state.history[-1]["time/update_s"] = time.perf_counter() - t0
                    tracker.log_metrics(metrics, step=state.step)
                    show.step(state.step, metrics)
                unfinished = False
                # 4d. evaluate every N steps (and at the end); checkpoint every M (and at the end)
                if _due(state.step, tc.eval_every, tc.steps):
                    attempt = (f"evaluation at step {state.step}/{tc.steps}", ckpt.rng_state(), True)
                    state.evals.append(evaluate(workflow, env, eval_rows, engines, cfg, state.step, run_dir, tracker,
                                                show.counter(f"evaluating (step {state.step})",
                                                             len(eval_rows) * tc.eval_samples)))
                if _due(state.step, tc.checkpoint_every, tc.steps):
                    saved.append(ckpt.save(run_dir, state, policies=policies, optimizers=optimizers,
                                           config_yaml=to_yaml(cfg)))
                if on_step is not None:
                    on_step(state.step, _strip(state.history[-1]))
        if cfg.tracking.log_weights and saved:  # the final weights or adapters, when asked
            tracker.log_artifact(saved[-1] / "policies", "weights")
        status = "FINISHED"
    except StepFailed as exc:  # 5. an env or engine failed for good: save, say how to continue
        label, rng, step_unfinished = attempt
        ckpt.set_rng_state(rng)
        state.extra[UNFINISHED] = step_unfinished
        path = ckpt.save(run_dir, state, policies=policies, optimizers=optimizers, config_yaml=to_yaml(cfg))
        file = workflow.path if workflow.path is not None else f"{workflow.name}.mas"
        raise StepFailed(f"{label} failed: {exc}. Saved checkpoint {path}; continue with: "
                         f"masdsl run {file} --resume {run_dir}", role=exc.role, task_id=exc.task_id, turn=exc.turn,
                         error=exc.error, checkpoint=path) from None
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        tracker.finish(status)
        close_engines(engines)
    result = TrainResult(
        workflow.name, run_dir, state.step, _strip(state.evals[0]), _strip(state.evals[-1]),
        [p for p in ckpt.list_complete(run_dir)], state.history, state.evals,
        getattr(tracker, "run_id", None), tracker.ui_command(), time.perf_counter() - t_start,
    )
    if console is not None:
        console.print(summary_table(result))
    return result


UNFINISHED = "unfinished"  # TrainState.extra key: the step's evaluation/checkpoint/on_step did not run


def _due(step: int, every: int, last: int) -> bool:
    """Whether an every-N-steps event (eval, checkpoint) happens after `step`: every `every`
    steps (0: never) and always after the last one.

    >>> [s for s in range(1, 8) if _due(s, 3, 7)], [s for s in range(1, 4) if _due(s, 0, 3)]
    ([3, 6, 7], [3])
    """
    return step == last or bool(every and step % every == 0)


def _strip(ev: dict[str, Any]) -> dict[str, float]:
    return {k: v for k, v in ev.items() if k != "step"}


def _eval_dir(run_dir: Path) -> Path:
    d = Path(run_dir) / "eval"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _truncate_records(path: Path, step: int) -> None:
    """Drop records of steps >= `step` (written after the checkpoint a run resumes from).

    Streams line by line into a temporary file that replaces the old one (a kill here never
    loses the records the checkpoint covers; memory stays flat however long the run was).
    A line that does not parse is the torn last write of a killed run: it is dropped.
    """
    import json
    import os

    if not path.is_file():
        return
    tmp = path.with_name(f".{path.name}.tmp")
    with open(path, encoding="utf-8") as src, open(tmp, "w", encoding="utf-8") as dst:
        for line in src:
            try:
                keep = json.loads(line)["step"] < step
            except (ValueError, KeyError, TypeError):  # blank or torn
                continue
            if keep:
                dst.write(line if line.endswith("\n") else line + "\n")
        dst.flush()
        os.fsync(dst.fileno())
    os.replace(tmp, path)


def _references(policies: dict[str, Any], cfg: Any) -> dict[str, Any]:
    """Frozen reference models for the KL term: a fresh load of the starting weights (so a
    resumed run keeps the same reference), or for LoRA the shared base with adapters off."""
    from masdsl.runtime.models import load_model

    refs: dict[str, Any] = {}
    for p in iter_trainable(policies):
        if p.adapter is not None:
            refs[p.name] = "base"
            continue
        model, _ = load_model(p.model_path, dtype=cfg.runtime.dtype, device=cfg.runtime.device)
        refs[p.name] = model.requires_grad_(False)
    return refs


def _transcript(records: Sequence[StepRecord]) -> str:
    """A readable transcript of evaluation episodes (markdown)."""
    lines = []
    for r in records:
        lines += [f"### task `{r.task_id}` · {r.role} · turn {r.turn} · reward {r.reward:.3f}",
                  "", "```", r.prompt_text.strip(), "```", "", "```", r.response_text.strip(), "```", ""]
    return "\n".join(lines)
