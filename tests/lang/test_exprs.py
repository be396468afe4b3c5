"""The expression evaluator: literals, names, calls, arithmetic, logic; never Python eval."""

from __future__ import annotations

import pickle

import pytest

from masdsl.lang.exprs import CompiledExpr, EvalError
from masdsl.lang.parse import parse_text
from masdsl.lang.workflow import EvalContext


def expr(text: str, role: str | None = None) -> CompiledExpr:
    module, diags = parse_text(f"team {text}", "t.mas")
    assert not diags, diags
    return CompiledExpr(module.teams[0].expr, text, role)


CTX = EvalContext(task={"n": 3, "tests": ["a", "b"], "name": "x"}, env_view={"moves": 2},
                  fields={"coder": {"code": "c", "ok": True, "output": "raw"}, "tester": {"tests": [], "ok": False}},
                  turn=1, role="coder")


@pytest.mark.parametrize("text, value", [
    ("1 + 2 * 3", 7), ("(1 + 2) * 3", 9), ("7 / 2", 3.5), ("7 % 4", 3), ("-task.n + 1", -2),
    ("2 - 3 - 4", -5), ("1 < 2 and 2 <= 2", True), ("1 > 2 or 3 >= 4", False), ("not 1 == 1", False),
    ("task.n != 3", False), ('"a" + "b"', "ab"), ("[1, 2] + [3]", [1, 2, 3]), ("true and not false", True),
    ("env.moves * 10", 20), ("coder.code", "c"), ("tester.ok", False), ("turn", 1), ("1e-6 * 2", 2e-6),
    ("task.name == 'x'", True),
])
def test_values(text, value):
    assert expr(text).evaluate(CTX) == value


def test_bare_field_reads_own_role():
    assert expr("code", role="coder").evaluate(CTX) == "c"
    assert expr("ok", role="tester").evaluate(CTX) is False


def test_output_inside_parse():
    ctx = EvalContext(task={}, output="the completion", role="coder")
    assert expr("output").evaluate(ctx) == "the completion"


def test_and_or_short_circuit():
    # the right side would fail (unknown role at run time); it must not be evaluated
    assert expr("false and nobody.x").evaluate(CTX) is False
    assert expr("true or nobody.x").evaluate(CTX) is True


def test_calls_registered_functions(global_registry):
    from masdsl.envs.registry import FunctionSpec

    global_registry.functions["join_t"] = FunctionSpec("join_t", lambda a, sep="-": sep.join(a), 1, 2, "str")
    assert expr("join_t(task.tests)").evaluate(CTX) == "a-b"
    assert expr('join_t(task.tests, sep="+") + "!"').evaluate(CTX) == "a+b!"
    assert expr("len(task.tests) + 1").evaluate(CTX) == 3


def test_env_bound_function_gets_state_first(global_registry):
    from masdsl.envs.registry import FunctionSpec

    seen = []

    def probe(state, k):
        seen.append((state, k))
        return k * 2

    global_registry.functions["probe_t"] = FunctionSpec("probe_t", probe, 1, 1, "number", "function", "sudoku")
    ctx = EvalContext(task={}, state="STATE")
    assert expr("probe_t(4)").evaluate(ctx) == 8
    assert seen == [("STATE", 4)]


@pytest.mark.parametrize("text, message, col", [
    ("1 / 0", "division by zero", 6),
    ("task.missing", "task has no field `missing`", 11),
    ('"a" - 1', "`-` cannot be applied to str and int", 10),
    ("ghost.x", "role `ghost` has not acted yet", 6),
])
def test_runtime_errors_point_at_the_source(text, message, col):
    with pytest.raises(EvalError) as info:
        expr(text).evaluate(CTX)
    assert message in str(info.value)
    assert info.value.span.col == col  # columns of `team <expr>`: the expression starts at 6


def test_function_that_raises_is_reported_at_the_call(global_registry):
    from masdsl.envs.registry import FunctionSpec

    def boom(x):
        raise ValueError("bad input")

    global_registry.functions["boom_t"] = FunctionSpec("boom_t", boom, 1, 1)
    with pytest.raises(EvalError, match=r"t.mas:1:6: error: `boom_t\(...\)` raised ValueError: bad input"):
        expr("boom_t(1)").evaluate(CTX)


def test_no_python_eval_possible():
    # attribute chains and dunder names are not even syntax; names resolve only through the context
    assert parse_text("team task.__class__.__mro__", "t.mas")[1]
    with pytest.raises(EvalError):
        expr("__import__").evaluate(CTX)


def test_compiled_expr_pickles():
    e = pickle.loads(pickle.dumps(expr("task.n * 2 > 5")))
    assert e.evaluate(CTX) is True and e.source == "task.n * 2 > 5"
