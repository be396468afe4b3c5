"""Every diagnostic code of the `.mas` checker: name -> one-line summary.

Each code has an entry in `docs/errors.md` (anchor: the code itself) with a failing example
and its fix, and a golden test under `tests/lang/errors/`.

>>> CODES["unknown-role"]
'an edge or expression names a role that is not declared'
>>> docs_url("unknown-role")
'docs/errors.md#unknown-role'
"""

from __future__ import annotations

ERRORS: dict[str, str] = {
    "syntax": "the text does not follow the grammar of the language",
    "duplicate-name": "a role, policy, parse field, data split or edge is declared twice",
    "duplicate-statement": "a statement that may appear once (workflow, env, flow, ...) appears twice",
    "missing-statement": "a required statement or key is missing",
    "reserved-name": "a role or field uses a name the language reserves",
    "unknown-policy": "a role (or a `judge(...)`) names a policy that is not declared",
    "unknown-role": "an edge or expression names a role that is not declared",
    "unknown-env": "the `env` is not a registered environment",
    "env-contract": "the `env`'s class lacks a method of the Env contract, or one takes other arguments than the runtime passes",
    "env-unreachable": "the fields of an `env http(...)` are unknown: its server does not answer, or not in protocol 1",
    "unknown-data-source": "a `data` line calls a data source that is not registered",
    "missing-file": "a data file, prompt file or import file does not exist",
    "bad-data-file": "a JSONL data file cannot be read",
    "import-error": "an imported Python file raised an exception",
    "duplicate-registration": "two imported files (or one file twice) register the same name",
    "unknown-function": "an expression calls a function that is not registered",
    "unknown-parser": "a `parse` line calls something that is not a registered parser",
    "wrong-arity": "a call passes the wrong number or names of arguments",
    "wrong-env": "a function bound to one environment is used in a workflow of another",
    "unknown-field": "`task.x`, `env.x` or `ROLE.x` names a field that does not exist",
    "unknown-name": "an expression uses a bare name that means nothing there",
    "type-mismatch": "a value has the wrong type (a guard that is not boolean, a reward that is not a number, ...)",
    "invalid-value": "a literal value is out of range or of the wrong kind",
    "invalid-edge": "an edge enters `start`, leaves `end`, or puts a terminal in a parallel group",
    "unreachable": "a flow node cannot be reached from `start`",
    "no-path-to-end": "a flow node has no path to `end`",
    "unbounded-cycle": "the flow has a cycle but no `max_turns`",
    "template-syntax": "a prompt is not a valid Jinja2 template",
    "unknown-variable": "a prompt uses a variable the workflow does not provide",
    "invalid-train": "the `train` block has an unknown key or a value of the wrong type",
    "invalid-sandbox": "the `sandbox` statement has an unknown key, a bad value, or a package that is not installed",
    "unknown-estimator": "a role's `advantage` names an estimator that does not exist",
    "estimator-group-size": "a role's `advantage` estimator needs more candidates per group than `samples` gives",
    "trainable-judge": "a `judge(...)` names a policy the run would train (not `frozen`, and a role uses it)",
    "judge-outside-reward": "`judge(...)` appears somewhere other than a role's `reward`",
}

WARNINGS: dict[str, str] = {
    "never-rewarded": "a role never receives a reward (no `reward` and no `team`), so its samples teach nothing",
    "group-size-one": "an AT-GRPO group would hold one candidate (advantage 0)",
    "unused-role": "a role is declared but never appears in the flow",
    "shadowed-edge": "an edge can never be taken because an earlier unguarded edge leaves the same node",
    "shadowed-builtin": "an imported file replaces a built-in environment, data source, parser or function",
}

CODES: dict[str, str] = {**ERRORS, **WARNINGS}


def docs_url(code: str) -> str:
    """Where a code is explained."""
    return f"docs/errors.md#{code}"
