"""Reward functions that run code get the env's sandbox limits through the expression context."""

from __future__ import annotations

from masdsl.lang.exprs import CompiledExpr
from masdsl.lang.parse import parse_text
from masdsl.lang.workflow import EvalContext
from masdsl.sandbox import Limits

SLOW = "import time\ndef f():\n    time.sleep(1.5)\n    return 1\n"
TESTS = ["assert f() == 1"]


def _pass_rate() -> CompiledExpr:
    module, diags = parse_text("team pass_rate(task.code, task.tests)", "w.mas")
    assert module is not None and not diags
    return CompiledExpr(module.teams[0].expr, "pass_rate(task.code, task.tests)")


def test_the_env_limits_reach_a_reward_function():
    expr = _pass_rate()
    task = {"code": SLOW, "tests": TESTS}
    assert expr.evaluate(EvalContext(task=task, limits=Limits(timeout_s=5.0))) == 1.0
    assert expr.evaluate(EvalContext(task=task, limits=Limits(timeout_s=0.5))) == 0.0  # timed out under the env's limits
