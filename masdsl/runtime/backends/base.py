"""The inference-engine interface: token ids in, sampled candidates out.

The executor applies the chat template and tokenises; engines never see text prompts, so the
ids the learner trains on are exactly the ids that were sampled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class GenRequest:
    prompt_ids: list[int]
    n: int = 1  # candidates from this prompt (K in training, 1 in evaluation)
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 256
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    top_k: int = 0  # 0 or -1: off
    min_p: float = 0.0  # 0: off
    repetition_penalty: float = 1.0  # 1: off; > 1 discourages tokens already in the prompt or output
    key: tuple[str, str, int] | None = None  # (task_id, role, turn): used by the replay engine


@dataclass
class Candidate:
    token_ids: list[int]
    text: str
    logprobs: list[float]  # one per token id, under the sampling distribution's model
    finish_reason: str  # "stop" | "length" | "replay"


class Engine(Protocol):
    tokenizer: Any  # a Hugging Face tokenizer (None for replay)

    def generate(self, requests: list[GenRequest]) -> list[list[Candidate]]:
        """One list of `request.n` candidates per request, in request order."""

    def update_weights(self, state_dict: dict[str, Any]) -> None:
        """Load new weights (or a LoRA adapter's weights) so the next generate is on-policy."""

    def close(self) -> None: ...
