"""`judge(POLICY, "template", ...)` in the checker, the compiler and the run plan (issue 32,
item 4): each mistake is one diagnostic at its `.mas` position, a correct call compiles to a
`JudgeSpec`, and the run plan refuses an override that would train a judge."""

from __future__ import annotations

from pathlib import Path

import pytest

from masdsl.config import resolve_config
from masdsl.lang import analyze
from masdsl.lang.judge import JudgeSpec
from masdsl.plan.run_plan import RunPlanError, resolve_run
from tests.support.overrides import NO_TRACKING

BASE = '''env code
data train humaneval("train")
data eval  humaneval("eval")
policy shared { model: "smollm2-135m-instruct" }
policy critic { model: "smollm2-135m-instruct", frozen: true }
role coder {
  policy shared
  prompt "Write {{ task.prompt }}"
  parse code = code_block(output, "python")
  reward REWARD
}
flow { start -> coder -> end }
'''
GOOD = 'judge(critic, """\n    Task: {{ task.prompt }}\n    Code: {{ code }} ({{ coder.ok }})\n  """, parse="number", default=-1, max_tokens=8)'


def check(registry, reward: str, text: str = BASE):
    a = analyze(text.replace("REWARD", reward), "w.mas", Path("."), registry=registry)
    return a, [(d.code, d.span.line, d.span.col) for d in a.diagnostics if d.is_error]


def test_a_correct_judge_compiles_to_its_spec(registry):
    a, errors = check(registry, f"0.5 * {GOOD} + pass_rate(code, task.tests)")
    assert errors == []
    (spec,) = a.workflow.roles["coder"].judges
    assert spec == JudgeSpec(spec.key, "critic", "Task: {{ task.prompt }}\nCode: {{ code }} ({{ coder.ok }})",
                             "number", -1.0, 8, 0.0, spec.span)
    assert (spec.span.line, spec.span.col) == (10, 16)  # the call's own place: its scores are keyed by it
    assert "number" not in a.workflow.registry.functions  # a built-in score parser, not a registered one


@pytest.mark.parametrize("reward, want", [
    ('judge(critc, "x {{ output }}")', [("unknown-policy", 10, 16)]),
    ('judge(shared, "x {{ output }}")', [("trainable-judge", 10, 16)]),
    ('judge("critic", "x")', [("invalid-value", 10, 16)]),
    ('judge(critic, task.prompt)', [("invalid-value", 10, 24)]),
    ('judge(critic)', [("wrong-arity", 10, 10)]),
    ('judge(critic, "x", temprature=1)', [("wrong-arity", 10, 29)]),
    ('judge(critic, "x", max_tokens=0)', [("invalid-value", 10, 40)]),
    ('judge(critic, "x", default=code)', [("invalid-value", 10, 37)]),
    ('judge(critic, "x", parse="boxd")', [("unknown-parser", 10, 35)]),
    ('judge(critic, "x {{ cod }}")', [("unknown-variable", 10, 30)]),
    ('judge(critic, "x {{ task.promt }}")', [("unknown-field", 10, 35)]),
    ('judge(critic, "x {% if output %}")', [("template-syntax", 10, 25)]),
])
def test_each_mistake_is_one_error_at_its_place(registry, reward, want):
    assert check(registry, reward)[1] == want


def test_a_bad_template_line_is_found_inside_a_long_template(registry):
    a, errors = check(registry, GOOD.replace("{{ code }}", "{{ coder.cod }}"))
    assert errors == [("unknown-field", 12, 20)]  # the template's second line, at `cod`
    assert "did you mean `coder.code`?" in a.diagnostics[0].help


def test_a_judge_policy_used_by_no_role_is_not_trained(registry):
    text = BASE.replace(', frozen: true', '')  # critic: not frozen, but no role trains it (the plan's rule)
    assert check(registry, 'judge(critic, "x {{ output }}")', text)[1] == []


@pytest.mark.parametrize("where, text", [
    ("team", BASE + 'team judge(critic, "x")\n'),
    ("success", BASE + 'success judge(critic, "x") > 1\n'),
    ("guard", BASE.replace("coder -> end }", "coder -> end when judge(critic, \"x\") > 1 }")),
    ("parse", BASE.replace('parse code = code_block(output, "python")', 'parse code = code_block(judge(critic, "x"))')),
])
def test_judge_outside_a_reward_is_refused(registry, where, text):
    codes = [c for c, _, _ in check(registry, "1", text)[1]]
    assert codes[0] == "judge-outside-reward", codes


def test_the_run_plan_refuses_an_override_that_trains_a_judge(registry, global_registry):
    # critic is frozen in the file and acts for a role; the override would train it
    text = BASE.replace("flow { start -> coder -> end }", 'role reviewer {\n  policy critic\n  prompt "Review {{ coder.code }}"\n  reward 1\n}\n'
                        "flow { start -> coder -> reviewer -> end }")
    a, errors = check(global_registry, 'judge(critic, "x {{ output }}")', text)
    assert errors == []
    resolve_run(a.workflow, resolve_config(a.workflow.train, overrides=[NO_TRACKING]))
    with pytest.raises(RunPlanError, match=r"w.mas:10:10: the judge policy `critic` of role `coder` would be trained"):
        resolve_run(a.workflow, resolve_config(a.workflow.train, overrides=[NO_TRACKING, "policy.critic.frozen=false"]))


def test_the_run_plan_names_the_roles_a_judge_policy_scores(registry):
    a, errors = check(registry, GOOD)
    assert errors == []
    plan = resolve_run(a.workflow, resolve_config(overrides=["runtime.engine=hf"]))
    lines = plan.placement.lines()
    assert "policy critic <- roles (none); judges the replies of coder (frozen, smollm2-135m-instruct)" in lines
    assert not any("judges" in line for line in lines if line.startswith("policy shared"))
