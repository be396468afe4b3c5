"""The `code` and `math` environments: the Env protocol, immutability, views and success."""

from __future__ import annotations

import copy
import pickle

import pytest

from masdsl.envs.base import Env
from masdsl.envs.code import CodeEnv, failure_report
from masdsl.envs.datasets import humaneval, math_small
from masdsl.envs.math import MathEnv
from masdsl.envs.registry import REGISTRY, load_builtins
from masdsl.envs.rewards import math_tool_reward, pass_rate, passes, run_answer
from masdsl.sandbox import Limits
from masdsl.sandbox.process import START_UP_GRACE_S

QUICK = Limits(timeout_s=1.0)


def test_envs_hold_their_own_limits_and_change_no_one_elses():
    code_env = CodeEnv(limits={"timeout_s": 2.5})
    assert code_env.limits == Limits(timeout_s=2.5)
    env = MathEnv(limits=QUICK)
    assert pickle.loads(pickle.dumps(env)).limits == QUICK  # as a Ray worker receives it
    assert CodeEnv().limits == Limits() == MathEnv().limits  # nothing leaked into the defaults


def test_reward_functions_run_under_the_limits_they_are_given():
    """What the env's limits did for `pass_rate` etc. through a global default, the caller of an
    expression now does by passing them: the code runs under exactly those limits."""
    # a whole program gets timeout_s + START_UP_GRACE_S (1.5 s under `tight`): sleeping 1.5 s
    # sat on that edge and once printed 42 under load; 3 s clears it by 1.5 s and stays 3 s
    # inside `roomy`'s 6 s
    tight, roomy = Limits(timeout_s=0.5), Limits(timeout_s=5.0)
    pause = tight.timeout_s + START_UP_GRACE_S + 1.5
    assert pause + 1.5 <= roomy.timeout_s + START_UP_GRACE_S
    slow = f"import time\ntime.sleep({pause})\nprint(42)"
    assert run_answer(slow, limits=tight) == "" and run_answer(slow, limits=roomy) == "42"
    assert math_tool_reward(slow, "42", limits=tight) == -1.0 and math_tool_reward(slow, "42", limits=roomy) == 1.0
    tests = ["import time\ntime.sleep(1.5)\nassert f() == 1"]
    assert pass_rate("def f():\n    return 1", tests, limits=tight) == 0.0
    assert passes("def f():\n    return 1", tests, limits=roomy) is True


def test_env_constructors_reject_unknown_arguments():
    for factory, typo in ((CodeEnv, {"limit": {"timeout_s": 1}}), (MathEnv, {"answer_rol": "tool"})):
        with pytest.raises(TypeError):
            factory(**typo)

TASK = {"id": "t1", "prompt": "def inc(x):", "tests": ["assert inc(1) == 2", "assert inc(5) == 6"]}
GOOD = "def inc(x):\n    return x + 1"


def test_registered_with_their_fields():
    load_builtins()
    assert REGISTRY.envs["code"].fields == ("failures", "code", "tests")
    assert REGISTRY.envs["math"].fields == ("tool_output", "tool_code")
    assert isinstance(REGISTRY.envs["code"].factory(), Env) and isinstance(REGISTRY.envs["math"].factory(), Env)


def test_code_apply_returns_new_state_and_never_mutates():
    env = CodeEnv()
    s0 = env.reset(TASK)
    frozen = copy.deepcopy(s0)
    s1 = env.apply(s0, "coder", {"code": GOOD, "ok": True})
    assert s0 == frozen and s1 is not s0 and s1.code == GOOD
    s2 = env.apply(s1, "tester", {"tests": ["assert inc(0) == 1"], "ok": True})
    assert s1.tests == () and s2.tests == ("assert inc(0) == 1",) and s2.code == GOOD


def test_code_malformed_actions_are_no_ops():
    env = CodeEnv()
    s1 = env.apply(env.reset(TASK), "coder", {"code": GOOD, "ok": True})
    for fields in ({"code": "", "ok": False}, {"code": None, "ok": False}, {"tests": [], "ok": False},
                   {"tests": [1, 2], "ok": True}, {"tests": "assert x", "ok": True}, {}):
        s2 = env.apply(s1, "coder", fields)
        assert (s2.code, s2.tests) == (s1.code, s1.tests)


def test_code_failures_report_and_success():
    env = CodeEnv(limits=QUICK)
    s = env.reset(TASK)
    assert env.view(s)["failures"] == "no code yet" and env.success(s) is False
    s = env.apply(s, "coder", {"code": "def inc(x):\n    return x + 2", "ok": True})
    assert env.view(s)["failures"] == "no generated tests yet"
    s = env.apply(s, "tester", {"tests": ["assert inc(1) == 2", "assert inc(0) == 2", "while True: pass"], "ok": True})
    report = env.view(s)["failures"]
    assert report.startswith("1/3 generated tests pass. Failing:")
    assert "- assert inc(1) == 2  -> AssertionError" in report and "timed out" in report
    assert env.success(s) is False
    fixed = env.apply(s, "coder", {"code": GOOD, "ok": True})
    assert env.success(fixed) is True
    assert dict(env.view(fixed))["code"] == GOOD


def test_failure_report_for_io_tests():
    text = failure_report("print(int(input()) + 1)", [{"input": "1", "output": "2"}, {"input": "5", "output": "7"}])
    assert text.startswith("1/2") and "input 5 expected 7" in text and "got 6" in text


def test_code_success_on_humaneval_reference():
    row = humaneval("eval")[0]
    env = CodeEnv()
    s = env.apply(env.reset(row), "coder", {"code": row["solution"], "ok": True})
    assert env.success(s)
    assert not env.success(env.apply(env.reset(row), "coder", {"code": row["prompt"] + "    pass\n", "ok": True}))


def test_math_tool_runs_in_sandbox_and_success_uses_the_reasoner():
    env = MathEnv()
    task = {"id": "m", "question": "What is 3/4 of 20?", "answer": "15"}
    s0 = env.reset(task)
    s1 = env.apply(s0, "tool", {"code": "print(3 / 4 * 20)", "ok": True})
    assert s0.tool_output == "" and env.view(s1) == {"tool_output": "15.0", "tool_code": "print(3 / 4 * 20)"}
    assert env.success(s1) is False  # nobody answered yet
    s2 = env.apply(s1, "reasoner", {"answer": "15", "ok": True})
    s3 = env.apply(s2, "tool", {"answer": "16", "ok": True})  # the tool's answer does not decide success
    assert env.success(s2) and env.success(s3)
    assert not env.success(env.apply(s1, "reasoner", {"answer": "\\frac{31}{2}", "ok": True}))


def test_math_tool_failures_are_reported_not_raised():
    env = MathEnv(limits={"timeout_s": 1.0})
    s = env.apply(env.reset({"id": "m", "answer": "1"}), "tool", {"code": "while True: pass", "ok": True})
    assert "[the program timed out]" in s.tool_output
    s = env.apply(s, "tool", {"code": "", "ok": False})
    assert "[the program timed out]" in s.tool_output  # a failed parse changes nothing
    s = env.apply(s, "tool", {"code": "import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=1)", "ok": True})
    assert "exited with status 1" in s.tool_output


def test_a_program_that_prints_pages_is_shown_by_its_head_and_tail():
    # 5,000 digits are 5,000 Qwen tokens: shown whole they once made a reasoner's prompt too long
    env = MathEnv()
    s = env.reset({"id": "q", "question": "?", "answer": "42"})
    s = env.apply(s, "tool", {"code": "print('7' * 5000)\nprint(42)", "ok": True})
    shown = env.view(s)["tool_output"]
    assert len(shown) < 1100 and shown.startswith("7" * 300) and shown.endswith("\n42")
    assert "[... 4003 characters not shown ...]" in shown
    assert run_answer("print('7' * 5000)\nprint(42)") == "42"  # the answer line read in full, as before


def test_math_success_on_bundled_answers():
    env = MathEnv()
    for row in math_small("eval")[:5]:
        s = env.apply(env.reset(row), "reasoner", {"answer": row["answer"], "ok": True})
        assert env.success(s), row
