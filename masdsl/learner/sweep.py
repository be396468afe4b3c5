"""Sweeps: the arms of an ablation, each trained on several seeds, then compared (`masdsl sweep`).

A paper's table is a sweep: a grid of overrides (`train.grouping=at,trajectory`) crossed with
seeds. This module holds what a sweep *is*, with no effects: its trials, their stable ids, the
summary of a finished trial, and the comparison across arms (mean over seeds with a 95 %
interval). `masdsl.learner.sweep_runner` runs the trials (Ray tasks) and records them (MLflow).

>>> ts = trials([["train.lr=1e-5"], ["train.lr=2e-5"]], seeds=[0, 1])
>>> [t.id for t in ts]
['train.lr=1e-5,seed=0', 'train.lr=1e-5,seed=1', 'train.lr=2e-5,seed=0', 'train.lr=2e-5,seed=1']
>>> ts[1].overrides, ts[1].arm
(['train.lr=1e-5', 'train.seed=1'], 'train.lr=1e-5')
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from masdsl.config import expand_sweep
from masdsl.errors import UserError

SEED_KEY = "train.seed"
# Student's t at 97.5 % for 1..30 degrees of freedom (a 95 % two-sided interval of a mean)
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)
METRICS = ("final_success", "best_success", "eval_reward", "nonflat", "wall_s")  # the comparison's columns
HEADERS = {"final_success": "final eval success", "best_success": "best eval success",
           "eval_reward": "final eval reward", "nonflat": "non-flat groups", "wall_s": "wall time (s)"}


@dataclass(frozen=True)
class Trial:
    arm: str  # the arm's overrides, joined: what the comparison groups by
    seed: int
    overrides: list[str] = field(default_factory=list)  # the arm's overrides plus train.seed

    @property
    def id(self) -> str:
        """A stable name: the same grid gives the same ids, so a restarted sweep skips what finished."""
        return f"{self.arm or 'base'},seed={self.seed}"

    @property
    def folder(self) -> str:
        """`id` as a folder name (no `/`, no spaces)."""
        return re.sub(r"[^A-Za-z0-9_.,=+-]", "_", self.id)


def trials(arms: Sequence[Sequence[str]], seeds: Sequence[int], common: Sequence[str] = ()) -> list[Trial]:
    """Every arm (a list of `key=value` overrides) on every seed, arms first; each trial's
    overrides are `common`, then its arm's, then its seed."""
    if not seeds:
        raise UserError("a sweep needs at least one seed (--seeds 0,1,2)")
    for ov in [*common, *(o for arm in arms for o in arm)]:
        if ov.split("=", 1)[0].lstrip("+~") == SEED_KEY:
            raise UserError(f"`{ov}`: give the seeds with --seeds, not as `{SEED_KEY}`")
    out = [Trial(",".join(arm), int(seed), [*common, *arm, f"{SEED_KEY}={int(seed)}"]) for arm in arms for seed in seeds]
    if len({t.id for t in out}) != len(out):
        raise UserError("the sweep repeats a trial (the same value twice in one list, or a seed twice?)")
    return out


def expand(overrides: Sequence[str]) -> tuple[list[str], list[list[str]]]:
    """A sweep's overrides as (those every arm gets, the arms), from Hydra's basic-sweeper grammar
    (`masdsl.config.expand_sweep`: `key=a,b`, `range(...)`, `choice(...)`); each arm holds only
    the overrides that vary (what names it), first key slowest.

    >>> common, arms = expand(["train.lr=1e-5,2e-5", "train.steps=4", "train.grouping=at,trajectory"])
    >>> common, arms[:2]
    (['train.steps=4'], [['train.lr=1e-5', 'train.grouping=at'], ['train.lr=1e-5', 'train.grouping=trajectory']])
    >>> len(expand(["a=1,2", "b=x,y,z"])[1]), expand(["a=1"])
    (6, (['a=1'], [[]]))
    """
    runs = expand_sweep(list(overrides))
    varying = [i for i in range(len(overrides)) if len({run[i] for run in runs}) > 1]
    common = [runs[0][i] for i in range(len(overrides)) if i not in varying]
    return common, [[run[i] for i in varying] for run in runs]


def parse_seeds(text: str) -> list[int]:
    """`--seeds 0,1,2` (or `0-2`).

    >>> parse_seeds("0,1,2"), parse_seeds("3-5"), parse_seeds("7")
    ([0, 1, 2], [3, 4, 5], [7])
    """
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)-(\d+)", part)
        try:
            out.extend(range(int(m[1]), int(m[2]) + 1) if m else [int(part)])
        except ValueError:
            raise UserError(f"--seeds: `{part}` is not a seed (give integers: 0,1,2 or 0-2)") from None
    return out


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
