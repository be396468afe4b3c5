"""Eval probes (`train.eval_probe`): evaluation prompts see the env changed on purpose, to test
what a trained role relies on. Whether a probe can run on a workflow is the plan's question
(`masdsl.plan.probes`); here the prompts change.

A planner that reaches the goal may have learnt to plan, or only to repeat the plan a tool
printed into its prompt. Three probes tell these apart, on the same eval tasks and weights:

- `no_tool_output`: `env.tool_output` is empty in every prompt (a template's
  `{% if env.tool_output %}` block then disappears): what the role does alone;
- `wrong_plan`: `env.tool_output` is a wrong plan in every prompt, one the env writes
  (`wrong_plan(state)`; Plan-Path: legal moves that end as far from the goal as the board
  allows, `masdsl.envs.plan_path_probe`): whether the role follows what it is shown;
- `wrong_number`: `env.tool_output` is a wrong number in every prompt, one the env writes
  (`wrong_number(state)`; math: about 10 % off the task's answer, `masdsl.envs.math.wrong_number`):
  whether a reasoner states what a program printed or checks it.

Only prompts change, and only in evaluation rollouts (`masdsl eval`, `masdsl.evaluate` and the
evaluations inside `masdsl run`): the env's state, its guards, rewards and success, and the
tool's own scoring are untouched, so a probe's numbers compare with the plain evaluation's.

>>> probed_view("no_tool_output", None, None, {"board": "A.G", "tool_output": '["R", "R"]'})
{'board': 'A.G', 'tool_output': ''}
>>> probed_view("none", None, None, {"tool_output": "x"})
{'tool_output': 'x'}
"""

from __future__ import annotations

from typing import Any, Mapping

from masdsl.config import PROBE_TABLE
from masdsl.envs.base import Env

View = Mapping[str, Any]


def probed_view(probe: str, env: Env, state: Any, view: View) -> View:
    """The `env.NAME` values an evaluation prompt sees under `probe`."""
    p = PROBE_TABLE.get(probe)  # "none": not in the table
    if p is None:
        return view
    # an env the plan let through has the writer (masdsl.plan.probes)
    return {**view, "tool_output": "" if p.writer is None else getattr(env, p.writer)(state)}
