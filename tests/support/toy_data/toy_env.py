"""A toy environment for the learner's tests: one role names a hidden digit, the other copies it.

Registered names (used by `toy_digits.mas`): env `toy_digits`, data source `toy_digits`, parser
`digit`, functions `digit_score` and `same`. A tiny random model starts far below chance at
saying the right digit (most of its 512 tokens are not digits); AT-GRPO must teach both roles.
"""

from __future__ import annotations

from masdsl.envs.registry import data_source, env, function, parser


@data_source("toy_digits", fields=("id", "target"))
def toy_digits(split: str, n: int = 20) -> list[dict]:
    """Rows `{"id", "target"}`; ids differ between splits, every digit appears in both.

    >>> [r["target"] for r in toy_digits("train", 12)][:12]
    ['0', '1', '2', '3', '4', '5', '6', '7', '8', '9', '0', '1']
    >>> toy_digits("eval", 2)[1]
    {'id': 'eval-1', 'target': '1'}
    """
    return [{"id": f"{split}-{i}", "target": str(i % 10)} for i in range(int(n))]


@parser("digit", returns="str", empty="")
def digit(output: str) -> str | None:
    """The first non-space character when it is a digit, else None (a failed parse).

    >>> digit(" 7"), digit("x7")
    ('7', None)
    """
    s = output.strip()
    return s[0] if s[:1].isdigit() else None


@function("same", returns="bool")
def same(a: str, b: str) -> bool:
    """Both non-empty and equal.

    >>> same("3", "3"), same("", "")
    (True, False)
    """
    return bool(a) and a == b


@env("toy_digits", fields=("said",))
class ToyDigits:
    """State: the tuple of (role, digit) said so far (immutable, so candidates share it)."""
    limits = None  # the sandbox defaults for any code this env runs (masdsl.envs.base.Env)

    def __init__(self, **kwargs) -> None:
        pass

    def reset(self, task):
        return ()

    def apply(self, state, role, fields):
        return state + ((role, fields.get("digit", "")),)

    def view(self, state):
        return {"said": " ".join(d for _, d in state)}

    def success(self, state):
        return False
