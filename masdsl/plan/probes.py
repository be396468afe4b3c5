"""Whether an eval probe (`train.eval_probe`) can run on a workflow's env, asked while planning.

The probes themselves change evaluation prompts during rollouts (`masdsl.runtime.probes`).
"""

from __future__ import annotations

from masdsl.config import PROBE_TABLE
from masdsl.lang.workflow import Workflow


def probe_problem(workflow: Workflow, probe: str) -> str | None:
    """Why `probe` cannot run on `workflow`'s env (None: it can), said before anything starts.

    >>> import masdsl
    >>> probe_problem(masdsl.load("workflows/coder_tester.mas"), "no_tool_output")
    '`train.eval_probe=no_tool_output` changes `env.tool_output`, and env `code` has no such field'
    >>> probe_problem(masdsl.load("workflows/plan_path_helper.mas"), "wrong_plan") is None
    True
    >>> print(probe_problem(masdsl.load("workflows/plan_path_helper.mas"), "wrong_number"))
    `train.eval_probe=wrong_number` needs an env that writes a wrong number (`wrong_number(state)`, as math does); env `plan_path` does not
    """
    spec = workflow.registry.envs.get(workflow.env) if workflow.registry is not None else None
    if probe == "none" or spec is None:
        return None
    if "tool_output" not in spec.fields:
        return f"`train.eval_probe={probe}` changes `env.tool_output`, and env `{workflow.env}` has no such field"
    p = PROBE_TABLE[probe]
    if p.writer and not callable(getattr(spec.factory, p.writer, None)):
        return (f"`train.eval_probe={probe}` needs an env that writes {p.writes} (`{p.writer}(state)`, as "
                f"{p.example_env} does); env `{workflow.env}` does not")
    return None
