"""Per-step training metrics, named as the MLflow dashboards group them (issue 6, item 2).

Pure functions over step records and rollout summaries:

>>> from masdsl.learner.grouping import _demo_records
>>> rs = reward_stats(_demo_records())
>>> rs[("namer", 0)], rs[("copier", 0)]
((0.25, 0.433013), (0.75, 0.25))
>>> sorted(reward_metrics(_demo_records()))[:2]
['reward/copier/turn0/mean', 'reward/copier/turn0/std']
"""

from __future__ import annotations

import math
import resource
import sys
from typing import Any, Iterable, Mapping, Sequence

from masdsl.runtime.records import StepRecord


def reward_stats(records: Iterable[StepRecord]) -> dict[tuple[str, int], tuple[float, float]]:
    """(role, turn) -> (mean, population std) of the rewards of all candidates, rounded to 6."""
    buckets: dict[tuple[str, int], list[float]] = {}
    for r in records:
        buckets.setdefault((r.role, r.turn), []).append(float(r.reward))
    out = {}
    for key, values in buckets.items():
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
        out[key] = (round(mean, 6), round(std, 6))
    return out


def reward_metrics(records: Iterable[StepRecord]) -> dict[str, float]:
    out = {}
    for (role, turn), (mean, std) in reward_stats(records).items():
        out[f"reward/{role}/turn{turn}/mean"] = mean
        out[f"reward/{role}/turn{turn}/std"] = std
    return out


def mean(values: Sequence[float]) -> float:
    """The mean, 0 for no values.

    >>> mean([]), mean([1, 0])
    (0.0, 0.5)
    """
    return sum(values) / len(values) if values else 0.0


def peak_rss_gb() -> float:
    """Peak resident memory of this process (ru_maxrss: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (2**30 if sys.platform == "darwin" else 2**20)


def step_metrics(
    records: Sequence[StepRecord],
    episodes: Sequence[Any],
    groups: Any,
    updates: Mapping[str, Any],
    *,
    tokens: int,
    rollout_s: float,
    update_s: float,
    kl_on: bool,
) -> dict[str, float]:
    """Everything logged for one training step."""
    m = reward_metrics(records)
    m["success/train"] = mean([float(e.success) for e in episodes])
    m["groups/count"] = float(groups.groups)
    m["groups/zero_variance_frac"] = groups.zero_variance_frac
    for name, u in updates.items():
        m[f"loss/{name}"] = u.loss
        m[f"clip_frac/{name}"] = u.clip_frac
        m[f"grad_norm/{name}"] = u.grad_norm
        if kl_on:
            m[f"kl/{name}"] = u.kl
    m["tokens/generated"] = float(tokens)
    m["throughput/tokens_per_s"] = tokens / rollout_s if rollout_s > 0 else 0.0
    m["time/rollout_s"] = rollout_s
    m["time/update_s"] = update_s
    m["memory/peak_rss_gb"] = peak_rss_gb()
    return m


def eval_metrics(records: Sequence[StepRecord], episodes: Sequence[Any]) -> dict[str, float]:
    """Evaluation summary: success rate, mean final reward, and reward by role and turn."""
    rewards = [float(e.team_reward) if e.team_reward is not None else mean(list(e.rewards_by_role_turn.values()))
               for e in episodes]
    out = {"success/eval": mean([float(e.success) for e in episodes]), "reward/eval": mean(rewards)}
    for (role, turn), (m, _) in reward_stats(records).items():
        out[f"eval_reward/{role}/turn{turn}"] = m
    return out
