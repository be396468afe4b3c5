"""Rewards of another team: the same name, another meaning."""
from masdsl.envs.registry import function


@function("short_enough", returns="bool")
def short_enough(code):
    return len(code) <= 80
