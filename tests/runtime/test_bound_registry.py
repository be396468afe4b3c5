"""A workflow checked against a registry runs against that registry (issue 21 item 5).

The names here exist only in a private `Registry`, never in the process-wide one: if the
runtime looked a name up globally (as it once did for parsers' empty values, envs, data sources
and expression calls), these runs would fail with "unknown" or "not registered".
"""

from __future__ import annotations

import pickle

import pytest

from masdsl.config import resolve_config
from masdsl.envs.registry import REGISTRY, DataSourceSpec, EnvSpec, FunctionSpec, Registry
from masdsl.lang import compile_workflow
from masdsl.lang.exprs import EvalError
from masdsl.lang.parse import parse_text
from masdsl.lang.workflow import EvalContext
from masdsl.runtime.inputs import load_split, make_env
from masdsl.runtime.parsing import initial_fields, parse_output
from tests.support.overrides import NO_TRACKING

TEXT = """\
env private_env
data train private_rows("train")
data eval private_rows("eval")
policy shared { model: "m" }
role a {
  policy shared
  prompt "go {{ task.id }}"
  parse n = private_number(output)
  reward private_double(n)
}
flow { start -> a -> end }
"""


def _number(output):
    return int(output) if output.strip().isdigit() else None


def private_registry(env_class) -> Registry:
    return Registry(
        envs={"private_env": EnvSpec("private_env", env_class)},
        data_sources={"private_rows": DataSourceSpec("private_rows", lambda split: [{"id": f"{split}-1"}], ("id",))},
        functions={"private_number": FunctionSpec("private_number", _number, 1, 1, "number", "parser", empty=-7),
                   "private_double": FunctionSpec("private_double", lambda x: 2 * x, 1, 1, "number"),
                   "unused_fn": FunctionSpec("unused_fn", len, 1, 1)})


@pytest.fixture()
def workflow(h):
    assert not {"private_env", "private_rows", "private_number", "private_double"} & {
        *REGISTRY.envs, *REGISTRY.data_sources, *REGISTRY.functions}
    module, errors = parse_text(TEXT, "private.mas")
    assert not errors
    return compile_workflow(module, TEXT, registry=private_registry(h.CounterEnv))


def test_the_workflow_keeps_the_part_of_the_registry_it_names(workflow):
    reg = workflow.registry
    assert (set(reg.envs), set(reg.data_sources), set(reg.functions)) == (
        {"private_env"}, {"private_rows"}, {"private_number", "private_double"})


def test_env_data_parse_and_reward_come_from_the_checkers_registry(workflow, h):
    sandbox = resolve_config(overrides=[NO_TRACKING]).sandbox
    assert isinstance(make_env(workflow, sandbox), h.CounterEnv)
    assert load_split(workflow, "eval") == [{"id": "eval-1"}]
    role = workflow.roles["a"]
    assert initial_fields(role) == {"n": -7, "output": "", "ok": False}
    errors: list[str] = []
    failed = parse_output(role, "no number", {"id": "t"}, {}, 0, errors)
    assert failed == {"n": -7, "output": "no number", "ok": False}
    fields = parse_output(role, "21", {"id": "t"}, {}, 0, errors)
    assert fields["n"] == 21 and fields["ok"]
    assert role.reward.evaluate(EvalContext(task={"id": "t"}, fields={"a": fields}, role="a")) == 42


def test_a_pickled_expression_binds_its_names_again_where_it_lands(workflow):
    """Another process has only the built-ins and the workflow's imports: a name the checker got
    from elsewhere is reported there, at the expression's line, not called from a stale table."""
    reward = pickle.loads(pickle.dumps(workflow.roles["a"].reward))
    with pytest.raises(EvalError, match=r"private\.mas:9:10: error: function `private_double` is not registered"):
        reward.evaluate(EvalContext(task={"id": "t"}, fields={"a": {"n": 1}}, role="a"))
