"""Evaluation inside a run: the eval split, plain sampling, one metrics function for both commands.

`masdsl eval` and the evaluations of `masdsl run` compute their numbers with the same
`metrics.eval_metrics`; this module adds what the trainer does around it (records under
`<run_dir>/eval/`, MLflow metrics, a transcript) and the warning both commands print for
greedy repeats.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from masdsl.config import Config
from masdsl.lang.workflow import Workflow
from masdsl.learner.metrics import eval_metrics
from masdsl.runtime.backends.base import Engine
from masdsl.runtime.executor import rollout
from masdsl.runtime.records import StepRecord, write_records


def evaluate(workflow: Workflow, env: Any, tasks: Sequence[dict], engines: Mapping[str, Engine], cfg: Config,
             step: int, run_dir: Path, tracker: Any,
             progress: Callable[[int], None] | None = None) -> dict[str, float]:
    """Plain sampling (one candidate, `train.eval_temperature`) on the eval tasks, `train.eval_samples`
    independent episodes per task (mean@N and pass@k when N > 1)."""
    roll = rollout(workflow, env, tasks, engines, mode="eval", samples=1, step=step, seed=cfg.train.seed, cfg=cfg,
                   progress=progress, repeats=cfg.train.eval_samples)
    write_records(eval_dir(run_dir) / f"step_{step:06d}.jsonl", roll.records)
    result = {"step": step, **eval_metrics(roll.records, roll.episodes)}
    tracker.log_metrics({k: v for k, v in result.items() if k != "step"}, step=step)
    tracker.log_text(transcript(roll.records[:40]), f"traces/eval_step{step:06d}.md")
    return result


def greedy_repeats_warning(cfg: Config) -> str | None:
    """The warning for N > 1 episodes per task at temperature 0 (they would all be the same).

    >>> from masdsl.config import resolve_config
    >>> greedy_repeats_warning(resolve_config(overrides=["train.eval_samples=4"]))[:38]
    'warning: 4 samples per task at train.e'
    >>> greedy_repeats_warning(resolve_config(overrides=["train.eval_samples=4", "train.eval_temperature=0.6"]))
    """
    n, t = cfg.train.eval_samples, cfg.train.eval_temperature
    if n > 1 and t <= 0:
        return (f"warning: {n} samples per task at train.eval_temperature=0 (greedy) are {n} identical episodes; "
                "pass --temperature 0.6 (or set train.eval_temperature) for pass@k")
    return None


def eval_dir(run_dir: Path) -> Path:
    d = Path(run_dir) / "eval"
    d.mkdir(parents=True, exist_ok=True)
    return d


def transcript(records: Sequence[StepRecord]) -> str:
    """A readable transcript of evaluation episodes (markdown)."""
    lines = []
    for r in records:
        lines += [f"### task `{r.task_id}` · {r.role} · turn {r.turn} · reward {r.reward:.3f}",
                  "", "```", r.prompt_text.strip(), "```", "", "```", r.response_text.strip(), "```", ""]
    return "\n".join(lines)
