"""Writes the golden `.mas` cases of tests/lang/errors/ from tests/lang/valid.mas, one mistake each.

Run `.venv/bin/python tests/lang/make_goldens.py`, then
`UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/lang/test_errors.py` and read the diff.
"""

from pathlib import Path

HERE = Path(__file__).parent
VALID = (HERE / "valid.mas").read_text()
D = HERE / "errors"

def sub(*pairs):
    t = VALID
    for a, b in pairs:
        assert a in t, a
        t = t.replace(a, b, 1)
    return t


REGISTERS = 'from masdsl.envs.registry import {0}\n\n\n@{0}("{1}", returns="{2}")\ndef {3}:\n    return {4}\n'
PY_FILES = {  # user files the import cases import (registered into the process's REGISTRY)
 "rewards_a.py": '"""Rewards of one team."""\n' + REGISTERS.format("function", "short_enough", "bool", "short_enough(code, limit=400)", "len(code) <= limit"),
 "rewards_b.py": '"""Rewards of another team: the same name, another meaning."""\n' + REGISTERS.format("function", "short_enough", "bool", "short_enough(code)", "len(code) <= 80"),
 "twice.py": '"""A parser registered twice (a copy-paste slip)."""\n' + REGISTERS.format("parser", "first_line", "str", "first_line(output)", "output.splitlines()[0] if output else None")
             + '\n\n@parser("first_line", returns="str")\ndef last_line(output):\n    return output.splitlines()[-1] if output else None\n',
 "shadows.py": '"""Replaces the built-in `passes`."""\n' + REGISTERS.format("function", "passes", "bool", "passes(code, tests)", "bool(code) and bool(tests)"),
}


def main() -> None:
    # long: the table of error cases, one line each
    cases = {
     "syntax__missing_brace": sub(("  reward pass_rate(task.solution, tests)\n}", "  reward pass_rate(task.solution, tests)\n")),
     "syntax__fat_arrow": sub(("start -> coder & tester", "start => coder & tester")),
     "syntax__unterminated_string": sub(('prompt "Write asserts for {{ task.prompt }}"', 'prompt "Write asserts for {{ task.prompt }}')),
     "syntax__unterminated_prompt": 'workflow w\nrole coder {\n  prompt """\n    Write the function.\n',
     "syntax__missing_when_expr": sub(("coder & tester -> end when passes(coder.code, tester.tests)", "coder & tester -> end when")),
     "syntax__missing_arrow": sub(("start -> coder & tester", "start coder & tester")),
     "syntax__missing_colon": sub(("train { samples: 4,", "train { samples 4,")),
     "duplicate-name__role": sub(("role tester {", 'role coder {\n  policy shared\n  prompt "again"\n}\n\nrole tester {')),
     "duplicate-name__policy": sub(('policy shared { model: "smollm2-135m-instruct" }', 'policy shared { model: "smollm2-135m-instruct" }\npolicy shared { model: "other" }')),
     "duplicate-name__parse": sub(("  parse tests = asserts(output)", "  parse tests = asserts(output)\n  parse tests = asserts(output)")),
     "duplicate-statement__flow": VALID + "flow { start -> coder -> end }\n",
     "unknown-policy": sub(("role tester {\n  policy shared", "role tester {\n  policy shard")),
     "unknown-role__edge": sub(("coder & tester -> end when", "coder & tester2 -> end when")),
     "unreachable": sub(("  coder & tester -> coder & tester\n", "  coder & tester -> coder & tester\n  coder -> end\n")),
     "no-path-to-end": sub(("  coder & tester -> coder & tester\n", "  coder & tester -> tester when turn > 1\n  coder & tester -> coder & tester\n  tester -> tester\n")),
     "unbounded-cycle": sub(("  max_turns 3\n", "")),
     "type-mismatch__guard": sub(("when passes(coder.code, tester.tests)", "when pass_rate(coder.code, tester.tests)")),
     "type-mismatch__reward": sub(("  reward pass_rate(code, task.tests)", '  reward "good"')),
     "unknown-function": sub(("team pass_rate(coder.code, task.tests)", "team pass_rat(coder.code, task.tests)")),
     "wrong-arity": sub(("success passes(coder.code, task.tests)", "success passes(coder.code)")),
     "unknown-field__role": sub(("when passes(coder.code, tester.tests)", "when passes(coder.code, tester.test)")),
     "unknown-field__task": sub(("  reward pass_rate(code, task.tests)", "  reward pass_rate(code, task.test)")),
     "unknown-field__template": sub(("    {{ task.prompt }}\n", "    {{ task.promt }}\n")),
     "unknown-name": sub(("  reward pass_rate(task.solution, tests)", "  reward pass_rate(task.solution, test)")),
     "unknown-variable": sub(("{% if turn > 0 %}Failures", "{% if turns > 0 %}Failures")),
     "template-syntax": sub(("{% if turn > 0 %}Failures: {{ env.failures }}{% endif %}", "{% if turn > 0 %}Failures: {{ env.failures }}")),
     "template-syntax__unknown_filter": sub(("{{ env.failures }}", "{{ env|v.failures }}")),
     "invalid-value__alpha": sub(("alpha 1.0", "alpha 12")),
     "invalid-value__max_turns": sub(("max_turns 3", "max_turns 0")),
     "invalid-value__max_tokens": sub(("sample { temperature: 1.0, max_tokens: 64 }", "sample { temperature: 1.0, max_tokens: 0 }")),
     "missing-statement__data": sub(('data train humaneval("train")\n', ""), ('data eval  humaneval("eval")\n', "")),
     "invalid-value__sample": sub(("sample { temperature: 1.0, max_tokens: 64 }", "sample { temprature: 1.0, max_tokens: 64 }")),
     "missing-file__data": sub(('data eval  humaneval("eval")', 'data eval  "data/missing.jsonl"')),
     "missing-file__prompt": sub(('prompt "Write asserts for {{ task.prompt }}"', 'prompt file "prompts/tester.j2"')),
     "missing-file__import": 'import "helpers/missing.py"\n' + VALID,
     "import-error": 'import "raises.py"\n' + VALID,
     "import-error__unchecked": 'import "raises.py"\n' + sub(("team pass_rate(coder.code, task.tests)", "team short_enough(coder.code)"), ("parse tests = asserts(output)", "parse tests = test_lines(output)")),
     "duplicate-registration": 'import "rewards_a.py"\nimport "rewards_b.py"\n' + VALID,
     "duplicate-registration__same_file": 'import "twice.py"\n' + VALID,
     "shadowed-builtin": 'import "shadows.py"\n' + VALID,
     "env-contract": sub(("env code", "env slip")),  # tests/lang/conftest.py's SlipEnv
     "unknown-env": sub(("env code", "env cod")),
     "unknown-parser": sub(("parse tests = asserts(output)", "parse tests = assert(output)")),
     "unknown-data-source": sub(('data eval  humaneval("eval")', 'data eval  humaneva("eval")')),
     "wrong-env": sub(("success passes(coder.code, task.tests)", "success solved()")),
     "invalid-train": sub(("train { samples: 4,", "train { sampels: 4,")),
     "reserved-name": sub(("role tester {", "role task {"), ("coder & tester", "coder & task"), ("coder & tester", "coder & task"), ("coder & tester -> coder & tester", "coder & task -> coder & task"), ("tester.tests", "task.tests")),
     "invalid-edge": sub(("  coder & tester -> coder & tester\n", "  coder & tester -> coder & tester\n  end -> coder\n")),
     "missing-statement__env": sub(("env code\n", "")),
     "missing-statement__policy": sub(("role tester {\n  policy shared\n", "role tester {\n")),
     "bad-data-file": sub(('data eval  humaneval("eval")', 'data eval  "bad.jsonl"')),
     "never-rewarded": sub(("  reward pass_rate(task.solution, tests)\n", ""), ("team pass_rate(coder.code, task.tests)\n", "")),
     "group-size-one": sub(("train { samples: 4,", "train { samples: 1,")),
     "unknown-estimator": sub(("  reward pass_rate(task.solution, tests)\n", "  reward pass_rate(task.solution, tests)\n  advantage rlo\n")),
     "estimator-group-size": sub(("  reward pass_rate(task.solution, tests)\n", "  reward pass_rate(task.solution, tests)\n  advantage rloo\n"), ("train { samples: 4,", "train { samples: 1,")),
     "trainable-judge": sub(("  reward pass_rate(task.solution, tests)", '  reward judge(shared, "Rate these tests: {{ tests }}")')),
     "judge-outside-reward": sub(('policy shared { model: "smollm2-135m-instruct" }', 'policy shared { model: "smollm2-135m-instruct" }\npolicy critic { model: "smollm2-135m-instruct", frozen: true }'), ("team pass_rate(coder.code, task.tests)", 'team judge(critic, "Rate: {{ coder.code }}")')),
     "unknown-policy__judge": sub(("  reward pass_rate(task.solution, tests)", '  reward judge(critic, "Rate these tests: {{ tests }}")')),
     "unknown-variable__judge": sub(('policy shared { model: "smollm2-135m-instruct" }', 'policy shared { model: "smollm2-135m-instruct" }\npolicy critic { model: "smollm2-135m-instruct", frozen: true }'), ("  reward pass_rate(task.solution, tests)", '  reward judge(critic, """\n    Rate these tests of {{ task.prompt }}:\n    {{ test }}\n  """, default=0)')),
     "unused-role": sub(("role tester {", "role helper {\n  policy shared\n  prompt \"hi\"\n  reward 1\n}\n\nrole tester {")),
     "shadowed-edge": sub(("  coder & tester -> end when passes(coder.code, tester.tests)\n  coder & tester -> coder & tester\n", "  coder & tester -> coder & tester\n  coder & tester -> end when passes(coder.code, tester.tests)\n")),
     "many-errors": sub(("role tester {\n  policy shared", "role tester {\n  policy shard"), ("coder & tester -> end when", "coder & tester2 -> end when"), ("alpha 1.0", "alpha 12")),
    }
    for name, text in cases.items():
        (D / f"{name}.mas").write_text(text)
    (D / "raises.py").write_text('"""A user file that fails on import."""\n\nLIMIT = 3\nraise RuntimeError("cannot reach the scoring service")\n')
    for name, text in PY_FILES.items():
        (D / name).write_text(text)
    (D / "bad.jsonl").write_text('{"id": "a", "question": "1+1"\nnot json\n')
    print(len(cases))
    multi = sub(("  start -> coder & tester\n", "  start => coder & tester\n"), ("alpha 1.0", "alpha"), ('  prompt "Write asserts for {{ task.prompt }}"', '  prompt "Write asserts for {{ task.prompt }}"\n  parse = asserts(output)'))
    (D / "syntax__several.mas").write_text(multi)


if __name__ == "__main__":
    main()
