"""A parser registered twice (a copy-paste slip)."""
from masdsl.envs.registry import parser


@parser("first_line", returns="str")
def first_line(output):
    return output.splitlines()[0] if output else None


@parser("first_line", returns="str")
def last_line(output):
    return output.splitlines()[-1] if output else None
