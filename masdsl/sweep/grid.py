"""Sweeps: the arms of an ablation, each trained on several seeds, then compared (`masdsl sweep`).

A paper's table is a sweep: a grid of overrides (`train.grouping=at,trajectory`) crossed with
seeds. This module holds what a sweep *is*, with no effects: its trials and their stable ids.
`masdsl.sweep.compare` summarises finished trials and compares the arms, `masdsl.sweep.runner`
runs the trials (Ray tasks) and `masdsl.sweep.parent_run` records them (MLflow).

>>> ts = trials([["train.lr=1e-5"], ["train.lr=2e-5"]], seeds=[0, 1])
>>> [t.id for t in ts]
['train.lr=1e-5,seed=0', 'train.lr=1e-5,seed=1', 'train.lr=2e-5,seed=0', 'train.lr=2e-5,seed=1']
>>> ts[1].overrides, ts[1].arm
(['train.lr=1e-5', 'train.seed=1'], 'train.lr=1e-5')
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

from masdsl.config import expand_sweep
from masdsl.errors import UserError

SEED_KEY = "train.seed"

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
