"""Replaces the built-in `passes`."""
from masdsl.envs.registry import function


@function("passes", returns="bool")
def passes(code, tests):
    return bool(code) and bool(tests)
