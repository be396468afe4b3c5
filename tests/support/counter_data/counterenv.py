"""A user env, parser, reward function and data source, imported by counter.mas (reliability
tests): objects from a workflow's own Python file must work inside Ray env workers too."""

import re

from masdsl.envs.registry import data_source, env, function, parser


@parser("rel_int", returns="number", empty=-1)
def rel_int(output):
    m = re.search(r"-?\d+", output)
    return int(m.group(0)) if m else None


@function("rel_bonus", returns="number")
def rel_bonus(n, total):
    return 1.0 if n > 0 and total >= 10 else 0.0


@env("rel_counter", fields=("total",))
class Counter:
    limits = None  # the sandbox defaults for any code this env runs (masdsl.envs.base.Env)
    def __init__(self, target=10):
        self.target = target

    def reset(self, task):
        return 0

    def apply(self, state, role, fields):
        return state + (fields["n"] if fields.get("ok") else 0)

    def view(self, state):
        return {"total": state}

    def success(self, state):
        return state >= self.target


@data_source("rel_counter_tasks", fields=("id",))
def rel_counter_tasks(split, n=4):
    return [{"id": f"{split}{i}"} for i in range(n)]
