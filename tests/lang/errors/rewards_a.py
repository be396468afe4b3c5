"""Rewards of one team."""
from masdsl.envs.registry import function


@function("short_enough", returns="bool")
def short_enough(code, limit=400):
    return len(code) <= limit
