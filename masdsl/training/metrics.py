"""Training and evaluation metrics, named as the MLflow dashboards group them.

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

from masdsl.runtime.executor import Rollout
from masdsl.runtime.judge import judge_metrics
from masdsl.runtime.records import StepRecord
from masdsl.training.skills import SkillCounts, skill_counts, skill_shares


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


def reply_counts(records: Iterable[StepRecord],
                 into: dict[str, list[int]] | None = None) -> dict[str, list[int]]:
    """role -> [replies, cut by max_tokens (`finish_reason` "length"), parse failed (`parse_ok` false)],
    added to `into` (a rollout that streams its records counts them as they come)."""
    out = {} if into is None else into
    for r in records:
        c = out.setdefault(r.role, [0, 0, 0])
        c[0] += 1
        c[1] += r.finish_reason == "length"
        c[2] += not r.parse_ok
    return out


def reply_shares(counts: Mapping[str, Sequence[int]], prefix: str = "") -> dict[str, float]:
    """`<prefix>cut/<role>` and `<prefix>parse_fail/<role>`: the shares of the role's replies cut
    by its `max_tokens` and whose parse failed (training: every candidate; `prefix` "eval_" for
    evaluations), rounded to 6.

    >>> reply_shares({"coder": [4, 2, 1]})
    {'cut/coder': 0.5, 'parse_fail/coder': 0.25}
    """
    out = {}
    for role, (n, cut, failed) in counts.items():
        out[f"{prefix}cut/{role}"] = round(cut / n, 6) if n else 0.0
        out[f"{prefix}parse_fail/{role}"] = round(failed / n, 6) if n else 0.0
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
    kept_groups: int | None = None,
    tokens: int,
    rollout_s: float,
    update_s: float,
    kl_on: bool,
) -> dict[str, float]:
    """Everything logged for one training step."""
    m = reward_metrics(records)
    m.update(reply_shares(reply_counts(records)))
    m["success/train"] = mean([float(e.success) for e in episodes])
    m["groups/count"] = float(groups.groups)
    m["groups/zero_variance_frac"] = groups.zero_variance_frac
    m["groups/nonflat_frac"] = 1.0 - groups.zero_variance_frac if groups.groups else 0.0
    m["groups/kept"] = float(groups.groups if kept_groups is None else kept_groups)
    for name, u in updates.items():
        m[f"loss/{name}"] = u.loss
        m[f"clip_frac/{name}"] = u.clip_frac
        m[f"dual_clip_frac/{name}"] = u.dual_clip_frac
        m[f"ratio_dev/{name}"] = u.ratio_dev
        m[f"optimizer_steps/{name}"] = float(u.optimizer_steps)
        if u.logprob_gap == u.logprob_gap:  # measured (not nan)
            m[f"logprob_gap/{name}"] = u.logprob_gap
        m[f"grad_norm/{name}"] = u.grad_norm
        if u.groups:  # prompt groups kept whole by `train.micro_batch_tokens` (update.split_groups)
            m[f"split_groups/{name}"] = u.split_groups / u.groups
            m[f"largest_group_tokens/{name}"] = float(u.largest_group_tokens)
        if kl_on:
            m[f"kl/{name}"] = u.kl
        m.update(policy_probes(name, u))
    m["tokens/generated"] = float(tokens)
    m["throughput/tokens_per_s"] = tokens / rollout_s if rollout_s > 0 else 0.0
    m["time/rollout_s"] = rollout_s
    m["time/update_s"] = update_s
    m["time/old_logprobs_s"] = sum(u.old_logprobs_s for u in updates.values())
    m["memory/peak_rss_gb"] = peak_rss_gb()
    return m


def policy_probes(name: str, u: Any) -> dict[str, float]:
    """What an update measured besides its loss (`masdsl.learner.update_metrics`), always, whatever
    `train.kl_coef`: `entropy/<policy>` (not when nothing was measured), `kl_old/<policy>`, and
    `clip_frac/<policy>/<role>` for each role the policy trains.

    >>> from types import SimpleNamespace as U
    >>> policy_probes("p", U(entropy=1.5, kl_old=0.01, role_clip_frac={"coder": 0.25}))
    {'entropy/p': 1.5, 'kl_old/p': 0.01, 'clip_frac/p/coder': 0.25}
    """
    out = {f"entropy/{name}": u.entropy} if u.entropy == u.entropy else {}  # nan: the engine gave no log-probs
    out[f"kl_old/{name}"] = u.kl_old
    out.update({f"clip_frac/{name}/{role}": v for role, v in u.role_clip_frac.items()})
    return out


def role_metrics(records: Sequence[StepRecord], episodes: Sequence[Any], groups: Sequence[Any],
                 advantages: Sequence[float]) -> dict[str, float]:
    """Per role of a training step:

    - `success/train/<role>`: the mean success of the episodes the role acted in;
    - `nonflat/<role>`: the share of the groups holding the role's candidates whose advantages are
      not all 0 (the groups it learns from; in `turn` and `trajectory` grouping a group may hold
      several roles and counts for each);
    - `adv_abs/<role>`: the mean |advantage| over all the role's candidates (flat groups' 0 included);
    - `same_reply/<role>`: the share of the role's groups of two or more candidates whose replies are
      token for token the same: a flat group because the policy samples one reply (its distribution
      collapsed on that prompt), not because different replies scored alike;
    - `skill/train/<role>/<name>[/turn<t>]`: the role's `metric` lines over every sampled candidate.

    >>> from types import SimpleNamespace as R
    >>> from masdsl.learner.grouping import Group
    >>> recs = [R(role=r, response_ids=ids) for r, ids in [("a", [1]), ("a", [2]), ("a", [3]), ("a", [3]), ("b", [4]), ("b", [5])]]
    >>> groups = [Group(("t0", "a", 0), ((0,), (1,)), (1.0, 0.0)), Group(("t1", "a", 0), ((2,), (3,)), (1.0, 1.0)),
    ...           Group(("t0", "b", 0), ((4,), (5,)), (0.0, 1.0))]
    >>> eps = [R(success=1.0, turns={"a": 1, "b": 1}), R(success=0.0, turns={"a": 1})]
    >>> role_metrics(recs, eps, groups, [0.7, -0.7, 0.0, 0.0, -0.7, 0.7])
    {'success/train/a': 0.5, 'success/train/b': 1.0, 'nonflat/a': 0.5, 'nonflat/b': 1.0, 'same_reply/a': 0.5, 'same_reply/b': 0.0, 'adv_abs/a': 0.35, 'adv_abs/b': 0.7}
    """
    roles = list(dict.fromkeys(r.role for r in records))
    out = {}
    for role in roles:
        took = [float(e.success) for e in episodes if e.turns.get(role, 0) > 0]
        if took:
            out[f"success/train/{role}"] = mean(took)
    counts: dict[str, list[int]] = {}
    same: dict[str, list[int]] = {}
    for g in groups:
        learns = any(advantages[i] != 0.0 for i in g.indices)
        replies = {tuple(records[i].response_ids) for i in g.indices}
        for role in dict.fromkeys(records[i].role for i in g.indices):
            c = counts.setdefault(role, [0, 0])
            c[0], c[1] = c[0] + 1, c[1] + learns
            if len(g.indices) > 1:
                s = same.setdefault(role, [0, 0])
                s[0], s[1] = s[0] + 1, s[1] + (len(replies) == 1)
    out.update({f"nonflat/{role}": k / n for role, (n, k) in counts.items()})
    out.update({f"same_reply/{role}": k / n for role, (n, k) in same.items()})
    for role in roles:
        out[f"adv_abs/{role}"] = mean([abs(a) for r, a in zip(records, advantages) if r.role == role])
    out.update(skill_shares(skill_counts(records), "train"))  # every sampled candidate
    return out


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimator (Chen et al. 2021): 1 - C(n-c, k) / C(n, k).

    The chance that at least one of k samples, drawn without replacement from n samples of
    which c are correct, is correct.

    >>> pass_at_k(5, 2, 1)   # 1 - C(3,1)/C(5,1) = 1 - 3/5
    0.4
    >>> pass_at_k(5, 2, 2)   # 1 - C(3,2)/C(5,2) = 1 - 3/10
    0.7
    >>> pass_at_k(10, 3, 4)  # 1 - C(7,4)/C(10,4) = 1 - 35/210
    0.833333
    >>> pass_at_k(4, 3, 2), pass_at_k(4, 0, 4), pass_at_k(1, 1, 1)   # n - c < k: a correct one is always drawn
    (1.0, 0.0, 1.0)
    >>> pass_at_k(2, 1, 3)
    Traceback (most recent call last):
    ...
    ValueError: pass@3 needs at least 3 samples per task, got 2
    """
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass@{k} needs at least {k} samples per task, got {n}")
    if n - c < k:
        return 1.0
    return round(1.0 - math.comb(n - c, k) / math.comb(n, k), 6)


def pass_ks(n: int) -> list[int]:
    """The k reported for n samples per task: 1, the powers of 2 below n, and n.

    >>> pass_ks(1), pass_ks(5), pass_ks(8)
    ([1], [1, 2, 4, 5], [1, 2, 4, 8])
    """
    ks, k = [], 1
    while k < n:
        ks.append(k)
        k *= 2
    return ks + [n]


def solved(success: Any) -> bool:
    """An episode counts as correct for pass@k when its success is 1 (true)."""
    return float(success) >= 1.0 - 1e-9


def eval_metrics(records: Sequence[StepRecord], episodes: Sequence[Any], rollout: Rollout | None = None,
                 replies: Mapping[str, Sequence[int]] | None = None,
                 skills: SkillCounts | None = None) -> dict[str, float]:
    """Evaluation summary, the one function `masdsl eval` and the trainer's evaluation share.

    - `success/eval`: mean success over all episodes (N episodes per task: that is mean@N);
      `reward/eval`: mean final reward; `eval_reward/<role>/turn<t>`: mean reward of the
      selected candidates by role and turn (from `records`, or the episodes without them);
    - `mean@N/eval`: mean over tasks of the mean success of their N episodes, and
      `pass@k/eval` for k in `pass_ks(N)`: the unbiased estimator averaged over tasks
      (an episode is correct when its success is 1). N is the number of episodes per task
      (the smallest, should tasks differ). The tracker logs `@` as `_` (MLflow's names).
    - `eval_cut/<role>`, `eval_parse_fail/<role>`: the shares of the role's replies cut by
      `max_tokens` and whose parse failed (`reply_shares`), from `records` or, for a rollout
      that streamed its records away, the `replies` counted on the way (`reply_counts`);
    - `skill/eval/<role>/<name>[/turn<t>]`: the roles' `metric` lines (`masdsl.training.skills`),
      from `records` or the `skills` counted on the way;
    - with `rollout` (an `executor.Rollout`): also the run's figures (`run_figures`).

    >>> from types import SimpleNamespace as E
    >>> eps = [E(task_id=t, success=s, team_reward=float(s), rewards_by_role_turn={("a", 0): float(s)})
    ...        for t, s in [("x", 1), ("x", 0), ("x", 0), ("x", 1), ("y", 0), ("y", 0), ("y", 0), ("y", 1)]]
    >>> m = eval_metrics([], eps)
    >>> m["success/eval"], m["mean@4/eval"], m["pass@1/eval"], m["pass@2/eval"], m["pass@4/eval"]
    (0.375, 0.375, 0.375, 0.666667, 1.0)
    >>> m["eval_reward/a/turn0"], m["reward/eval"]
    (0.375, 0.375)
    """
    rewards = [float(e.team_reward) if e.team_reward is not None else mean(list(e.rewards_by_role_turn.values()))
               for e in episodes]
    out = {"success/eval": mean([float(e.success) for e in episodes]), "reward/eval": mean(rewards)}
    if records:
        for (role, turn), (m, _) in reward_stats(records).items():
            out[f"eval_reward/{role}/turn{turn}"] = m
    else:
        by_key: dict[tuple[str, int], list[float]] = {}
        for e in episodes:
            for key, value in (getattr(e, "rewards_by_role_turn", None) or {}).items():
                by_key.setdefault(key, []).append(float(value))
        for (role, turn), values in by_key.items():
            out[f"eval_reward/{role}/turn{turn}"] = round(mean(values), 6)
    by_task: dict[str, list[float]] = {}
    for e in episodes:
        by_task.setdefault(str(e.task_id), []).append(float(e.success))
    if by_task:
        n = min(len(v) for v in by_task.values())
        out[f"mean@{n}/eval"] = round(mean([mean(v) for v in by_task.values()]), 6)
        for k in pass_ks(n):
            estimates = [pass_at_k(len(v), sum(solved(s) for s in v), k) for v in by_task.values()]
            out[f"pass@{k}/eval"] = round(mean(estimates), 6)
    if records or replies:
        out.update(reply_shares(replies if replies is not None else reply_counts(records), prefix="eval_"))
    out.update(skill_shares(skills if skills is not None else skill_counts(records), "eval"))
    if rollout is not None:
        out.update(run_figures(rollout))
    return out


def run_figures(ro: Rollout) -> dict[str, float]:
    """What a rollout cost: `episodes`, `tokens_generated`, `tokens_per_s` (over wall time),
    `wall_s`, `gen_s`, `env_s`, `truncated_episodes`, `truncated_prompts`, `expression_errors`, and
    `reward_errors` (those of them that were rewards: each scored 0), and `env_lost` (episodes
    ended by a failed env server, `env http`)."""
    return {
        "episodes": float(len(ro.episodes)), "tokens_generated": float(ro.tokens_generated),
        "tokens_per_s": ro.tokens_generated / ro.wall_s if ro.wall_s > 0 else 0.0,
        "wall_s": ro.wall_s, "gen_s": ro.gen_s, "env_s": ro.env_s,
        "truncated_episodes": float(sum(e.truncated for e in ro.episodes)),
        "truncated_prompts": float(ro.truncated_prompts), "expression_errors": float(sum(ro.errors.values())),
        "reward_errors": float(ro.reward_errors), "env_lost": float(ro.env_lost), **judge_metrics(ro),
    }
