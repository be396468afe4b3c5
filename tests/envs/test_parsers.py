"""Parsers on noisy model output: they find the answer or return None, and never raise."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from masdsl.envs.parsers import actions, asserts, boxed, code_block, grid, io_tests
from masdsl.envs.registry import REGISTRY, load_builtins
from masdsl.testing.deadline import seconds_in_child

PARSERS = [code_block, io_tests, asserts, boxed, actions, grid]


def test_registered_with_their_empty_values():
    load_builtins()
    empties = {name: REGISTRY.functions[name].empty for name in ("code_block", "io_tests", "asserts", "boxed", "actions", "grid")}
    assert empties == {"code_block": "", "io_tests": [], "asserts": [], "boxed": "", "actions": [], "grid": []}
    assert all(REGISTRY.functions[n].kind == "parser" for n in empties)
    assert (REGISTRY.functions["code_block"].min_args, REGISTRY.functions["code_block"].max_args) == (1, 2)


@pytest.mark.parametrize("parse", PARSERS)
@pytest.mark.parametrize("junk", [None, 42, "", "   ", "```", "```python", "\\boxed{", "[[", "{", "assert", b"bytes", ["x"]])
def test_junk_gives_none(parse, junk):
    assert parse(junk) is None


@settings(max_examples=150, deadline=None)
@given(st.text())
def test_never_raise_on_arbitrary_text(text):
    t0 = time.process_time()
    for parse in PARSERS:
        parse(text)
    assert time.process_time() - t0 < 1.0  # CPU seconds: none of them is ever slow either


def _parse_with_all(text: str) -> None:
    for parse in PARSERS:
        parse(text)


# a reply of 50,000 characters: a lead-in the parsers look for, a long run of one character, then
# one that ends nothing (boxed was quadratic: 2.2 s on 1,600 `\boxed{`; io_tests took minutes on
# `test` and blanks, the fences seconds on a line of backticks)
LEADS = ["", "test", "Sample Input", "answer is", "\\boxed", "```python\n", "assert", "moves:", "[[1, 2], [3, 4]]\n"]
RUNS = [" ", "\t", "\n", "\r\n", "{", "}", "\\boxed{", "\\boxed {", "`", "```", "[", "]", "[[", '"', "'", "1", "1 ", "1,",
        "#", "\\", ".", "-", "*", ":", "a", "answer "]


@pytest.mark.parametrize("lead", LEADS)
@pytest.mark.parametrize("run", RUNS)
def test_a_long_run_of_one_character_is_parsed_fast(run, lead):
    text = lead + run * (50_000 // len(run)) + "¿"
    assert seconds_in_child(_parse_with_all, text, limit=10) < 1.0  # CPU seconds, all six parsers


def test_code_block_noise():
    thinking = "<think>I should use a loop.</think>\nSure! Here is the code:\n\n```Python\ndef f(n):\n    return n\n```\n\nHope it helps."
    assert code_block(thinking) == "def f(n):\n    return n"
    assert code_block("```\nprint(1)\n```") == "print(1)"  # untagged block
    assert code_block("```python\nx = 1\n```\n```python\n\n```") == "x = 1"  # an empty last block is skipped
    assert code_block("```cpp\nint main(){}\n```") is None
    assert code_block("```cpp\nint main(){}\n```", "cpp") == "int main(){}"
    assert code_block("```python\r\nx = 1\r\n```") is not None
    stopped = "Here:\n```python\ndef g():\n    return 2\n"  # the stop sequence ate the closing fence
    assert code_block(stopped) == "def g():\n    return 2"


def test_io_tests_noise():
    text = 'Some tests:\n```json\n[{"input": "1\\n", "output": "2\\n"}, {"input": ["3", "4"], "output": 7}]\n```'
    assert io_tests(text) == [{"input": "1\n", "output": "2\n"}, {"input": "3\n4\n", "output": "7"}]
    labelled = "**Test 1**\nInput:\n```\n5 6\n```\nOutput:\n```\n11\n```\n\n**Test 2**\nInput: 1 1\nExpected Output: 2"
    pairs = io_tests(labelled)
    assert pairs[0] == {"input": "5 6\n", "output": "11\n"}
    assert io_tests("Input: 3\n(no output given)") is None
    assert io_tests('[{"in": 1}]') is None


def test_asserts_noise():
    text = (
        "Here are the tests:\n```python\nfrom sol import f\n\nassert f(1) == 1\n  assert f(2) == 4  # indented\n"
        "assert f(\n    3\n) == 9\nassert f(1) == 1\nprint('done')\nassert f(4) = 16\n```\nAlso: assert f(0) == 0"
    )
    assert asserts(text) == ["assert f(1) == 1", "assert f(2) == 4  # indented", "assert f(\n    3\n) == 9", "assert f(0) == 0"]
    assert asserts("assertion: the code is fine") is None


def test_boxed_noise():
    assert boxed("We get \\boxed{3} at first, but correcting: \\boxed{\\frac{a}{b+1}}") == "\\frac{a}{b+1}"
    assert boxed("\\fbox{7}") == "7"
    assert boxed("**Final Answer:** $\\frac{1}{2}$.") == "\\frac{1}{2}"
    assert boxed("\\boxed{}") is None
    assert boxed("The answer is: 5 apples") == "5"  # a unit after the number is dropped
    assert boxed("Final answer: $1,234.50.") == "1,234.50"
    assert boxed("Answer: 50%") == "50"
    assert boxed("The answer is 3/4") == "3/4"


@pytest.mark.parametrize("line", [
    "answer = 27 * 74 + 18 * 58",                   # an assignment: a line of code
    "answer = 12",                                  # an assignment, even of a number
    "ANSWER = 3199 // 10 - 196",
    "Answer: 27 * 74 + 18 * 58",                    # an expression: the grader would do its arithmetic
    "The answer is \\(21 \\times 88 - 1511\\) bottles",
    "Answer: x = 3",
    "The answer is 7 because 3 + 4 = 7",
    "```python\nprint('Answer:', 27 * 74)\n# the answer is 42\n```",  # inside a program
])
def test_boxed_refuses_a_line_of_code(line):
    """The fallback of `boxed()` takes a bare final number, never an assignment or an expression
    (a single agent's program is not its answer: issue 42)."""
    assert boxed(line) is None
    assert boxed(line + "\nSo the answer is 42.") == "42"  # a bare number after it still answers


def test_actions_noise():
    assert actions('My plan is ["U", "U", "R"], then stop.') == ["U", "U", "R"]
    assert actions('{"actions": ["left", "DOWN"]}') == ["L", "D"]
    assert actions("Actions: Up, Right, Right.") == ["U", "R", "R"]
    assert actions('["U", "jump"]') is None  # not a move list
    assert actions("up up down") == ["U", "U", "D"]
    assert actions("I would go up and then right") is None  # prose without a label is not a plan


def test_grid_noise():
    json_grid = "Here:\n```json\n[[1, 2, 3, 4], [3, 4, 1, 2], [2, 1, 4, 3], [4, 3, 2, 1]]\n```"
    assert grid(json_grid)[0] == [1, 2, 3, 4]
    board = "Solution:\n+---+---+\n|1 2|3 4|\n|3 4|1 2|\n+---+---+\n|2 1|4 3|\n|4 3|2 1|\n+---+---+\nDone"
    assert grid(board) == [[1, 2, 3, 4], [3, 4, 1, 2], [2, 1, 4, 3], [4, 3, 2, 1]]
    assert grid("1,2\n3,4") == [[1, 2], [3, 4]]
    assert grid("1 2 3\n4 5") is None  # ragged
    assert grid("[[1, 2], [3]]") is None
