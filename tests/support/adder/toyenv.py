"""A toy env, parser and data source for runtime CLI tests (imported by toy.mas)."""

import re
from masdsl.envs.registry import env, parser, function, data_source

@parser("toy_int", returns="number", empty=-1)
def toy_int(output):
    m = re.search(r"-?\d+", output)
    return int(m.group(0)) if m else None

@env("toy", fields=("total", "log"))
class Toy:
    limits = None  # the sandbox defaults for any code this env runs (masdsl.envs.base.Env)
    def __init__(self, target=10):
        self.target = target
    def reset(self, task):
        return (0, ())
    def apply(self, state, role, fields):
        n = fields["n"] if fields.get("ok") else 0
        return (state[0] + n, state[1] + ((role, n),))
    def view(self, state):
        return {"total": state[0], "log": list(state[1])}
    def success(self, state):
        return state[0] >= self.target

@data_source("toy_tasks", fields=("id", "target"))
def toy_tasks(split, n=3):
    return [{"id": f"{split}{i}", "target": 10} for i in range(n)]
