"""A single-agent task for `vs_trl.py`: eight fixed prompts and a text-only reward that both
trainers compute identically (no env state, no sandbox)."""

from __future__ import annotations

from masdsl.envs.registry import data_source, env, function

PROMPTS = [
    "Write a Python function that returns the sum of a list of numbers.",
    "Explain in two sentences why the sky is blue.",
    "Write a Python function that reverses a string.",
    "List three uses of a hash map.",
    "Write a haiku about autumn.",
    "What is 12 times 7? Explain your steps.",
    "Write a Python function that checks whether a number is prime.",
    "Describe the water cycle briefly.",
]


def length_score(text: str, cap: int = 256) -> float:
    """The shared reward: longer answers score higher, up to `cap` characters.

    >>> length_score("ab"), length_score("x" * 1000), length_score("x" * 1000, cap=2000)
    (0.0078125, 1.0, 0.5)
    """
    return min(len(text.strip()), cap) / cap


@data_source("bench_prompts", fields=("id", "prompt"))
def bench_prompts(split: str) -> list[dict]:
    return [{"id": f"{split}-{i}", "prompt": p} for i, p in enumerate(PROMPTS)]


@function("length_score", returns="number")
def _length_score(text: str, cap: float = 256) -> float:
    return length_score(text, int(cap))


@env("bench_prompts")
class BenchPrompts:
    limits = None  # the sandbox defaults for any code this env runs (masdsl.envs.base.Env)
    def __init__(self, **kwargs) -> None:
        pass

    def reset(self, task):
        return ()

    def apply(self, state, role, fields):
        return state

    def view(self, state):
        return {}

    def success(self, state):
        return False
