"""A sweep's comparison: each finished trial summarised, then the arms compared over their seeds
(mean with a 95 % interval) and written as a markdown table. No effects.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Mapping, Sequence

from masdsl.sweep.grid import Trial

# Student's t at 97.5 % for 1..30 degrees of freedom (a 95 % two-sided interval of a mean)
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)
METRICS = ("final_success", "best_success", "eval_reward", "nonflat", "wall_s")  # the comparison's columns
HEADERS = {"final_success": "final eval success", "best_success": "best eval success",
           "eval_reward": "final eval reward", "nonflat": "non-flat groups", "wall_s": "wall time (s)"}


def summarise(result: Any, trial: Trial) -> dict[str, Any]:
    """A finished trial's row (JSON-ready) from its `TrainResult`: the comparison's numbers and
    its curves (`(step, value)` per metric)."""
    history, evals = result.history, result.evals
    groups = sum(h.get("groups/count", 0.0) for h in history)
    nonflat = sum(h.get("groups/nonflat_frac", 0.0) * h.get("groups/count", 0.0) for h in history)
    successes = [e["success/eval"] for e in evals if e.get("success/eval") is not None]
    after = result.eval_after or {}
    return {
        "id": trial.id, "arm": trial.arm, "seed": trial.seed, "overrides": trial.overrides,
        "run_dir": str(result.run_dir), "mlflow_run_id": result.mlflow_run_id,
        "final_success": after.get("success/eval"), "best_success": max(successes) if successes else None,
        "eval_reward": after.get("reward/eval"), "nonflat": nonflat / groups if groups else None,
        "wall_s": result.wall_s,
        "curves": {
            "success/eval": [(e["step"], e["success/eval"]) for e in evals if e.get("success/eval") is not None],
            "reward/eval": [(e["step"], e["reward/eval"]) for e in evals if e.get("reward/eval") is not None],
            "groups/nonflat_frac": [(i + 1, h["groups/nonflat_frac"]) for i, h in enumerate(history)
                                    if "groups/nonflat_frac" in h],
        },
    }


def mean_interval(values: Sequence[float]) -> tuple[float, float | None]:
    """The mean and the half-width of its 95 % interval (Student's t over seeds; None for one seed).

    >>> mean_interval([1.0])
    (1.0, None)
    >>> m, h = mean_interval([0.5, 0.7, 0.6]); round(m, 3), round(h, 3)
    (0.6, 0.248)
    """
    n = len(values)
    mean = statistics.fmean(values)
    if n < 2:
        return mean, None
    t = _T975[n - 2] if n - 2 < len(_T975) else 1.96
    return mean, t * statistics.stdev(values) / math.sqrt(n)


def compare(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One line per arm, in the order the arms first appear: for each metric of `METRICS` the mean
    over the arm's seeds and its interval half-width, and the seeds it holds.

    >>> rows = [{"arm": "a", "seed": 0, "final_success": 0.5, "best_success": 0.5, "eval_reward": 1.0, "nonflat": 0.2, "wall_s": 10.0},
    ...         {"arm": "a", "seed": 1, "final_success": 0.7, "best_success": 0.8, "eval_reward": 2.0, "nonflat": 0.4, "wall_s": 12.0}]
    >>> line = compare(rows)[0]
    >>> line["arm"], line["seeds"], round(line["final_success"][0], 3), line["wall_s"][0]
    ('a', [0, 1], 0.6, 11.0)
    """
    arms: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        arms.setdefault(row["arm"], []).append(row)
    out = []
    for arm, members in arms.items():
        line: dict[str, Any] = {"arm": arm or "base", "seeds": sorted(r["seed"] for r in members)}
        for metric in METRICS:
            values = [float(r[metric]) for r in members if r.get(metric) is not None]
            line[metric] = mean_interval(values) if values else (None, None)
        out.append(line)
    return out


def format_cell(metric: str, value: tuple[float | None, float | None]) -> str:
    """`0.600 ± 0.248`, a share as a percentage, `-` when missing.

    >>> format_cell("final_success", (0.6, 0.248)), format_cell("wall_s", (11.0, None)), format_cell("nonflat", (None, None))
    ('60.0 ± 24.8 %', '11', '-')
    """
    mean, half = value
    if mean is None:
        return "-"
    if metric in ("final_success", "best_success", "nonflat"):
        return f"{100 * mean:.1f} %" if half is None else f"{100 * mean:.1f} ± {100 * half:.1f} %"
    if metric == "wall_s":
        return f"{mean:.0f}" if half is None else f"{mean:.0f} ± {half:.0f}"
    return f"{mean:.3f}" if half is None else f"{mean:.3f} ± {half:.3f}"


def markdown_table(lines: Sequence[Mapping[str, Any]]) -> str:
    """The comparison as a Markdown table (what the parent MLflow run keeps as `artifacts/comparison.md`)."""
    head = ["arm", "seeds", *(HEADERS[m] for m in METRICS)]
    rows = [[f"`{line['arm']}`", ",".join(map(str, line["seeds"])), *(format_cell(m, line[m]) for m in METRICS)]
            for line in lines]
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
                      *("| " + " | ".join(r) + " |" for r in rows)]) + "\n"
