"""`StepRecord`: one sampled candidate of one role step. The contract with the learner.

The runtime writes records as JSONL (one object per line) under the run folder; the learner
groups them by (task_id, role, turn); `masdsl trace` prints them for a person.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator


@dataclass
class StepRecord:
    step: int  # the update this rollout feeds (1 = the first); an eval's step (0: before training); -1: `masdsl eval`
    episode: int  # index of the episode within the rollout batch
    task_id: str
    role: str
    turn: int  # how many times this role acted before in the episode (0-based)
    node: str  # graph node that activated the role ("coder" or "coder&tester")
    candidate: int  # 0..K-1 within the (task_id, role, turn) group
    selected: bool  # the candidate that continued the episode (argmax, ties to lowest index)
    policy: str
    prompt_ids: list[int]
    response_ids: list[int]  # exactly the sampled ids, never re-tokenised
    logprobs: list[float]  # sampling log-prob of each response id; [] where the rollout did not ask (masdsl.plan.old_logprobs)
    reward: float  # alpha * team + local
    reward_team: float
    reward_local: float
    finish_reason: str  # "stop" | "length" | "replay"
    parse_ok: bool
    fields: dict[str, Any] = field(default_factory=dict)  # parsed fields (JSON-safe)
    prompt_text: str = ""
    response_text: str = ""
    episode_success: float | None = None  # filled when the episode ends
    episode_reward: float | None = None  # final team (or mean local) reward, for `trajectory`
    truncated_prompt: bool = False
    source_line: int | None = None  # .mas line of the node, for error messages
    gen_s: float = 0.0
    env_s: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)  # the role's `metric NAME = expr` values
    judge: list[dict[str, Any]] = field(default_factory=list)  # its reward's judges: prompt, reply, parsed, score[, restated]
    # the weights that sampled it, as the number of updates they had: a training record's is `step - 1`,
    # or `step - 2` from step 2 on under `train.async_rollout=1` (staleness `step - 1 - weights_step`);
    # an evaluation's is its step; None: `masdsl eval`
    weights_step: int | None = None
    reference: dict[str, Any] = field(default_factory=dict)  # the task's reference answer (masdsl.runtime.reference)

    def to_json(self) -> str:
        return json.dumps(asdict(self), default=str)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "StepRecord":
        return cls(**d)


def write_records(path: Path, records: Iterable[StepRecord]) -> int:
    """Append records to a JSONL file; returns how many were written."""
    n = 0
    with open(path, "a", encoding="utf-8") as f:
        for r in records:
            f.write(r.to_json() + "\n")
            n += 1
    return n


def read_records(path: Path) -> Iterator[StepRecord]:
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield StepRecord.from_dict(json.loads(line))
