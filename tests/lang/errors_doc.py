"""Builds docs/errors.md from masdsl/lang/codes.py and the golden cases in tests/lang/errors/.

Run `.venv/bin/python tests/lang/errors_doc.py` after changing a code or a golden file;
`test_errors.py` checks that docs/errors.md is up to date.
"""

from __future__ import annotations

from pathlib import Path

from masdsl.lang.codes import ERRORS, WARNINGS

ROOT = Path(__file__).parents[2]
E = ROOT / "tests" / "lang" / "errors"
DOC = ROOT / "docs" / "errors.md"
FIX = {
 "syntax": "Follow the grammar: close every `{` with `}`, write edges as `a -> b`, end strings on the same line (`\"\"\"` for text over several lines), and give `when` an expression.",
 "duplicate-name": "Rename or remove the second declaration (roles, policies, parse fields, data splits and edges are unique). Merge two edges between the same nodes with `or` in one guard.",
 "duplicate-statement": "Keep one `workflow`, `env`, `flow`, `team`, `alpha`, `success`, `train` statement, and one `policy`/`prompt`/`system`/`sample`/`reward` line per role.",
 "missing-statement": "Add what is missing: an `env`, a `flow` with an edge from `start`, at least one role, a `policy` and a `prompt` in every role, a `model` in every policy, a `data train` line when data is declared.",
 "reserved-name": "Pick another name: `start`, `end`, `task`, `env`, `turn`, `output`, `role`, `history`, `ok` and the keywords mean something already.",
 "unknown-policy": "Declare the policy (`policy NAME { model: \"...\" }`) or fix the name on the role's `policy` line (or in the `judge(...)`; a judge's policy is declared `frozen: true`).",
 "unknown-role": "Declare the role, or fix the name (the hint names the closest role).",
 "unknown-env": "Use a registered environment (`code`, `math`, `sudoku`, `sokoban`, `plan_path`) or register your own with `@env` in a file you `import`.",
 "env-contract": "Give the class every method of the contract with the parameters the runtime passes: `reset(self, task)`, `apply(self, state, role, fields)`, `view(self, state)`, `success(self, state)`, and a `limits` attribute (`limits = None`: the sandbox defaults). docs/extending.md shows a whole env.",
 "env-unreachable": "Start the env's server first (`masdsl serve-env ENV --port PORT`, docs/data.md#environments-over-http) with the same masdsl version, or declare the fields the workflow reads, `env http(\"http://127.0.0.1:8765\", fields=[\"total\", \"target\"])`: then `masdsl check` asks no server, and the run checks the server has them.",
 "unknown-data-source": "Use a registered data source (for example `humaneval`, `math_small`, `sudoku`), give a JSONL path in quotes, or register one with `@data_source`.",
 "missing-file": "Paths resolve relative to the `.mas` file. Create the file or fix the path: when a file beside it differs only in case, in its extension or in a slip of spelling (`data/x.json` for `data/x.jsonl`), the help names it. Until a missing `import` file is there, names it would register are not reported as unknown (its error lists them).",
 "bad-data-file": "A JSONL file holds one JSON object per line, each with a unique string `id`. `masdsl check` reads every line of each local data file the workflow names (a quoted file, and the files of `apps(...)`, `aime(...)`, ...) and names the first bad one; the note gives it as `FILE:LINE`, for an editor to open.",
 "import-error": "Fix the error in your Python file (the note shows its own traceback lines). Until it imports, names it may register are not reported as unknown; the error's last note lists them.",
 "duplicate-registration": "Give each `@function`, `@parser`, `@env` and `@data_source` its own name, or import only one of the files. Functions and parsers share one set of names; environments and data sources have their own (an env and a data source may share a name).",
 "unknown-function": "Use a registered function (the hint names the closest) or register it with `@function` in a file you `import`.",
 "unknown-parser": "`parse FIELD = NAME(output, ...)` needs a registered parser: `code_block`, `io_tests`, `asserts`, `boxed`, `actions`, `grid`, or your own `@parser`.",
 "wrong-arity": "Pass the arguments the function declares (the label quotes Python's own complaint).",
 "wrong-env": "Env-bound functions (`step_reward()`, `solved()`, `progress()`, `valid()`) only work with the environment they read; use another function or change `env`. With `env http(URL)` they work when the server serves their env (`masdsl serve-env sudoku`; docs/data.md, \"Environments over HTTP\"); over `env openenv(URL)` read `env.reward` instead.",
 "unknown-field": "Use a field that exists: `task.x` for the data's columns, `env.x` for the environment's view, `ROLE.x` for a role's `parse` fields plus `output` and `ok`.",
 "unknown-name": "Outside a role, read values as `ROLE.FIELD`, `task.x`, `env.x` or `turn`. Inside a role's `reward` and `parse`, bare names are that role's own fields.",
 "type-mismatch": "A guard must be true/false (compare a number: `pass_rate(...) > 0.5`); a reward or `team` must be a number (or a bool, counted as 1/0).",
 "invalid-value": "Use a value of the right kind and range: `alpha` in [0, 10], `max_turns` a whole number >= 1, known `sample` keys (`temperature`, `top_p`, `top_k`, `min_p`, `max_tokens`, `stop`, `seed`, `repetition_penalty`, `samples`), literal arguments for `env` and `data`, splits `train`/`eval`, and for `hf(folder, split=...)` a split the saved dataset has.",
 "invalid-edge": "`start` only has outgoing edges, `end` only incoming ones, and neither can be in a parallel group.",
 "unreachable": "Add an edge that leads to the node from `start` (directly or through other nodes), or remove it.",
 "no-path-to-end": "Give the node an edge to `end` (usually guarded: `planner -> end when solved()`), directly or through other nodes.",
 "unbounded-cycle": "Add `max_turns N` inside `flow { }`: each role then acts at most N times per episode.",
 "template-syntax": "Fix the Jinja2 syntax on the line shown (`{% if %}` needs `{% endif %}`, `{{` needs `}}`; a filter after `|` must exist: a field is read with `.`).",
 "unknown-variable": "Prompts may use `task`, `env`, `turn`, `role`, `history` and every role name (`{{ coder.code }}`); a `judge(...)` template also `output` (the reply it scores) and the role's own fields by their bare names.",
 "unknown-estimator": "Name one of the estimators (`grpo`, the default; `drgrpo`; `rloo`; `grpo_agent_norm`; see docs/language.md#advantage-estimators), or leave the `advantage` line out.",
 "trainable-judge": "A judge must not learn while it scores: add `frozen: true` to its policy, or give the judge a policy of its own that no role uses (a policy no role uses is never trained). A `policy.P.frozen=false` override of a judge policy that a role uses is refused by the run plan too.",
 "judge-outside-reward": "`judge(POLICY, \"template\", ...)` scores the reply of the role whose `reward` holds it; move it there (`team`, `success`, guards and `parse` lines have no single reply to score).",
 "estimator-group-size": "Give the role K >= 2 candidates (`train { samples: 2 }` or more), or pick an estimator that takes a group of one (`grpo`, `drgrpo`: its advantage is 0).",
 "invalid-train": "Use the keys of the run configuration (`samples`, `batch`, `steps`, `lr`, `grouping`, ... see docs/language.md#train) with values of their type. Every mistake of the block is reported at once, each at its key. A key another RL library uses is answered with the masdsl key that does its job (`` unknown config key `train.learning_rate` (TRL's name; masdsl calls it `train.lr`) ``, `` `train.kl` `` gets `train.kl_coef`; the table: docs/cli.md#configuration).",
 "invalid-sandbox": "Declare the packages generated programs import by the name `import` takes (`sandbox { packages: [\"numpy\"] }`), each installed in the Python that runs masdsl: the sandbox binds each one by itself from there, and programs see nothing else but the standard library (docs/sandbox.md#what-a-program-can-see). The other keys are the limits of the configuration's `sandbox` section (`timeout_s`, `memory_mb`, `max_procs`, `max_file_mb`, `max_output_kb`, `isolation`), set here or in `train { sandbox { } }`, not both.",
 "never-rewarded": "Give the role a `reward EXPR`, or add a `team` reward (with `alpha` > 0) that every role receives.",
 "group-size-one": "Use `samples: 2` or more; a group of one candidate has zero advantage and teaches nothing.",
 "unused-role": "Add the role to the flow, or delete it.",
 "shadowed-builtin": "Nothing to fix if replacing the built-in is what you want: workflows that import the file use its version (in every worker process too), the others the built-in. Otherwise give yours another name.",
 "shadowed-edge": "Edges leaving a node are tried in file order and an edge without `when` always matches: put guarded edges first and the fallback last.",
}


def render() -> str:
    out = ["# Error codes of `masdsl check`", "",
           "Every diagnostic names a code. Errors stop `masdsl check` (exit 2) and `masdsl.load()` (a `MasError`",
           "holding all of them); warnings are printed but change nothing. Each entry shows the message a",
           "failing file produces (the files are the golden tests under `tests/lang/errors/`, built from",
           "`tests/lang/valid.mas` with one mistake each) and how to fix it.", "",
           "Errors: " + ", ".join(f"[`{c}`](#{c})" for c in ERRORS), "",
           "Warnings: " + ", ".join(f"[`{c}`](#{c})" for c in WARNINGS), ""]
    for code, summary in {**ERRORS, **WARNINGS}.items():
        kind = "warning" if code in WARNINGS else "error"
        out += [f"## {code}", "", f"*{kind}*: {summary}.", ""]
        for f in sorted(E.glob(f"{code}.expected")) + sorted(E.glob(f"{code}__*.expected")):
            out += ["```", f.read_text().rstrip(), "```", ""]
        out += [f"**Fix.** {FIX[code]}", ""]
    return "\n".join(out)


if __name__ == "__main__":
    DOC.write_text(render())
