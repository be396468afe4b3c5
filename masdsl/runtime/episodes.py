"""What a rollout keeps while it runs, and what it returns (see `executor.rollout`).

`RunState` is one rollout's settings, engines, worker pool and tallies; an `Episode` is one
task's walk through the flow; a `RoleStep` is one role's turn in one tick (its request, its
candidates, their parsed fields and scored outcomes). `Rollout` and `EpisodeResult` are the
results handed back.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping

from masdsl.envs.base import Env
from masdsl.lang.workflow import RoleSpec, SampleSpec, Workflow
from masdsl.plan.run_plan import RunPlan
from masdsl.runtime.backends.base import Candidate, Engine, GenRequest
from masdsl.runtime.records import StepRecord
from masdsl.runtime.sampling import Outcome

log = logging.getLogger("masdsl.runtime.executor")

MAX_STEPS = 10_000  # per episode: a safety net for flows the checker let through without max_turns


@dataclass
class EpisodeResult:
    task_id: str
    success: float
    team_reward: float | None
    turns: dict[str, int]  # how many times each role acted
    truncated: bool  # ended by max_turns rather than by reaching `end`
    rewards_by_role_turn: dict[tuple[str, int], float]  # reward of the selected candidate
    sample: int = 0  # which of the independent episodes of this task (0-based; `masdsl.plan.shape`)
    lost: str | None = None  # why the env lost this episode (`masdsl.envs.base.lost`), if it did


@dataclass
class Rollout:
    records: list[StepRecord]
    episodes: list[EpisodeResult]
    tokens_generated: int
    wall_s: float
    gen_s: float
    env_s: float
    truncated_prompts: int
    errors: dict[str, int] = field(default_factory=dict)  # failing expression / env step -> count
    reward_errors: int = 0  # rewards (and team rewards) that raised and scored 0
    env_lost: int = 0  # episodes ended because their env was lost (an env server failed)
    judge_calls: int = 0  # judge replies sampled (`judge(...)` in a reward: masdsl.runtime.judge)
    judge_tokens: int = 0  # tokens of those replies (not in `tokens_generated`)
    judge_s: float = 0.0  # time the judges' engine calls took (not in `gen_s`, the policies')
    judge_unparsed: int = 0  # judge replies with no score: each scored the judge's `default`


def merge_rollouts(parts: list[Rollout]) -> Rollout:
    """One `Rollout` of several, in order, every tally summed; episode indices renumbered so that
    the episodes of different parts stay apart (`StepRecord.episode` is unique in the result).

    >>> a = Rollout([], [EpisodeResult("t0", 1.0, None, {}, False, {})], 5, 1.0, 0.5, 0.2, 0, {"x": 1})
    >>> b = Rollout([], [EpisodeResult("t1", 0.0, None, {}, False, {})], 3, 2.0, 1.0, 0.1, 1, {"x": 2})
    >>> m = merge_rollouts([a, b])
    >>> [e.task_id for e in m.episodes], m.tokens_generated, m.wall_s, m.truncated_prompts, m.errors
    (['t0', 't1'], 8, 3.0, 1, {'x': 3})
    """
    records: list[StepRecord] = []
    errors: Counter = Counter()
    offset = 0
    for part in parts:
        top = -1
        for r in part.records:
            r.episode += offset
            top = max(top, r.episode)
        records += part.records
        offset = max(offset + len(part.episodes), top + 1)
        errors.update(part.errors)
    return Rollout(records, [e for p in parts for e in p.episodes], sum(p.tokens_generated for p in parts),
                   sum(p.wall_s for p in parts), sum(p.gen_s for p in parts), sum(p.env_s for p in parts),
                   sum(p.truncated_prompts for p in parts), dict(errors), sum(p.reward_errors for p in parts),
                   sum(p.env_lost for p in parts), sum(p.judge_calls for p in parts), sum(p.judge_tokens for p in parts),
                   sum(p.judge_s for p in parts), sum(p.judge_unparsed for p in parts))


@dataclass
class Episode:
    index: int
    task: Mapping[str, Any]
    task_id: str
    state: Any
    fields: dict[str, dict[str, Any]]
    node: str = "start"
    turns: dict[str, int] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    records: list[StepRecord] = field(default_factory=list)
    rewards: dict[tuple[str, int], float] = field(default_factory=dict)
    locals: list[float] = field(default_factory=list)
    last_turn: int = 0
    steps: int = 0
    done: bool = False
    truncated: bool = False
    repeat: int = 0  # which independent episode of this task (the plan's episodes per task)
    lost: str | None = None  # the env lost the episode: it ended there


@dataclass
class RoleStep:
    episode: Episode
    role: RoleSpec
    node: str
    turn: int
    request: GenRequest
    prompt_text: str
    truncated: bool
    candidates: list[Candidate] = field(default_factory=list)
    fields: list[dict[str, Any]] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    gen_s: float = 0.0
    winner: int = 0
    judge_replies: list[list[dict[str, Any]]] = field(default_factory=list)  # per candidate: its judges' replies


@dataclass
class RunState:
    workflow: Workflow
    env: Env
    engines: Mapping[str, Engine]
    plan: RunPlan
    mode: str
    k: int
    step: int
    seed: int
    pool: Any
    tokens: int = 0
    gen_s: float = 0.0
    env_s: float = 0.0
    truncated_prompts: int = 0
    errors: Counter = field(default_factory=Counter)
    reward_errors: int = 0  # rewards (and team rewards) that raised: `Rollout.reward_errors`
    env_lost: int = 0  # episodes whose env was lost: `Rollout.env_lost`
    judge_calls: int = 0  # `Rollout.judge_calls`, `judge_tokens`, `judge_s`, `judge_unparsed` (runtime.judge)
    judge_tokens: int = 0
    judge_s: float = 0.0
    judge_unparsed: int = 0
    fail_on_env: bool = False  # an env call failing after its retries raises StepFailed
    samples: dict[str, SampleSpec] = field(default_factory=dict)  # role -> effective `sample { }`
    chat_kwargs: dict[str, dict[str, Any]] = field(default_factory=dict)  # policy -> chat_template_kwargs

    def k_of(self, role: str) -> int:
        """Candidates per step of `role`: its own `samples` (K) in a training rollout, else `k`."""
        own = self.samples[role].samples if self.mode == "train" and role in self.samples else None
        return self.k if own is None else int(own)

    def error(self, message: str) -> None:
        """Tally a failing expression or env step (logged the first time it is seen)."""
        if message not in self.errors:
            log.warning("%s", message)
        self.errors[message] += 1
