"""A counter env and a workflow's parser, for the env-over-HTTP tests: served by `masdsl
serve-env tests/envs/data/http_counter.py:http_counter` and also run in process, so the two can be
compared. The state is an immutable (total, moves) tuple: `apply` returns a new one."""

import re

from masdsl.envs.registry import env, parser


@parser("http_int", returns="number", empty=0)
def http_int(output):
    m = re.search(r"-?\d+", output)
    return int(m.group(0)) if m else None


@env("http_counter", fields=("total", "moves", "target"))
class HttpCounter:
    limits = None  # the sandbox defaults (masdsl.envs.base.Env)

    def __init__(self, target=10):
        self.target = target

    def reset(self, task):
        return (int(task.get("start", 0)), ())

    def apply(self, state, role, fields):
        n = fields["n"] if fields.get("ok") else 0
        return (state[0] + n, state[1] + (f"{role}:{n}",))

    def view(self, state):
        return {"total": state[0], "moves": list(state[1]), "target": self.target}

    def success(self, state):
        return state[0] >= self.target
