"""Reward functions against hand-computed cases (the rules of docs/concepts.md, "Sampling, parsing, scoring")."""

from __future__ import annotations

import threading

import pytest

from masdsl.envs.registry import REGISTRY, load_builtins
from masdsl.envs.rewards import agree, correct, pass_rate, passes, run_answer, tester_reward

SOLUTION = "def add(a, b):\n    return a + b"
TESTS = ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(2, 2) == 5", "assert add(0, 0) == 0"]


def test_builtin_names_are_registered_with_their_arity():
    load_builtins()
    for name, arity in {"pass_rate": (2, 2), "passes": (2, 2), "correct": (2, 2), "agree": (2, 2),
                        "run_answer": (1, 1), "len": (1, 1), "min": (2, 2), "max": (2, 2), "abs": (1, 1)}.items():
        spec = REGISTRY.functions[name]
        assert (spec.min_args, spec.max_args) == arity, name


def test_coder_reward_is_the_pass_rate_on_the_real_tests():
    # 3 of the 4 tests hold for a correct `add`: 3/4
    assert pass_rate(SOLUTION, TESTS) == 0.75
    # off by one: only add(2, 2) == 5 holds -> 1/4
    assert pass_rate("def add(a, b):\n    return a + b + 1", TESTS) == 0.25
    assert pass_rate("def add(a, b):\n    return None", TESTS) == 0.0


def test_tester_reward_is_the_reference_solutions_pass_rate_on_its_tests():
    # the tester wrote 4 tests, one of them wrong: the reference solution passes 3 -> 0.75
    assert tester_reward(SOLUTION, TESTS) == 0.75
    assert tester_reward(SOLUTION, TESTS[:2]) == 1.0
    # a tester that wrote nothing (parse failed -> empty list) earns 0, not a crash
    assert tester_reward(SOLUTION, []) == 0.0 and tester_reward(SOLUTION, None) == 0.0
    # tests that do not even parse as Python fail individually
    assert tester_reward(SOLUTION, ["assert add(1, 2) == 3", "assert add(1,"]) == 0.5


def test_pass_rate_with_io_pairs():
    code = "n = int(input())\nprint(n * n)"
    tests = [{"input": "3", "output": "9"}, {"input": "4", "output": "16\n"}, {"input": "5", "output": "24"}]
    assert pass_rate(code, tests) == pytest.approx(2 / 3)
    assert passes(code, tests[:2]) and not passes(code, tests)


def test_missing_values_score_zero():
    assert pass_rate("", TESTS) == 0.0 and pass_rate(None, TESTS) == 0.0
    assert pass_rate(SOLUTION, []) == 0.0 and pass_rate(SOLUTION, [3, 4]) == 0.0
    assert passes(SOLUTION, []) is False and passes("", TESTS) is False


def test_correct_uses_math_equivalence():
    cases = [("\\frac{1}{2}", "0.5", 1.0), ("2\\sqrt{2}", "\\sqrt{8}", 1.0), ("x = 7", "7", 1.0), ("42", "42.0", 1.0),
             ("10,000", "10000", 1.0), ("\\dfrac{3}{4}", "3/4", 1.0), ("41", "42", 0.0), ("", "42", 0.0), (None, "1", 0.0),
             ("\\boxed{12}", "12", 1.0), ("3/4", "0.76", 0.0)]
    for answer, reference, expected in cases:
        assert correct(answer, reference) == expected, (answer, reference)


def test_correct_works_off_the_main_thread():
    out = []
    thread = threading.Thread(target=lambda: out.append(correct("1/3", "\\frac{1}{3}")))
    thread.start()
    thread.join()
    assert out == [1.0]


def test_agree_and_run_answer():
    assert agree("0.25", "\\frac14") and not agree("1", "2") and not agree("", "")
    assert run_answer("x = 6\nprint('thinking')\nprint(x * 7)\n") == "42"
    assert run_answer("raise SystemExit(1)") == "" and run_answer("") == "" and run_answer(None) == ""
    assert correct(run_answer("print(3 / 4)"), "\\frac{3}{4}") == 1.0
