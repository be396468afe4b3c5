"""No text makes the front end slow (issue 21): a long run of one character, then one that
starts no token, parses and checks in well under a second, wherever it stands; so do many
broken statements, and the editor's index of a prompt's tags. Each case runs in a forked child
killed at 10 s (`masdsl.testing.deadline`): a regex that backtracks without end fails the test
instead of hanging the run. The old lexer took 100+ s on 27 spaces and a `¿`."""

from __future__ import annotations

import pytest

from masdsl.lang import analyze
from masdsl.lang.parse import parse_text
from masdsl.lsp.index import Index
from masdsl.testing.deadline import seconds_in_child

N = 10_000  # characters in a run: exponential code takes forever on it
BIG = 20_000  # for the cases the old code took quadratic time on: seconds, not milliseconds
BOUND = 1.0  # CPU seconds of the child (wall time on a busy machine says little)
RUNS = [" ", "\t", "\n", "{", "}", "(", "[", "\\boxed{", "`", '"', "'", "\\", '\\"', "#", "1", ".", "-", "a", "{{", "{%"]
PLACES = {
    "alone": "{}¿",
    "after a statement": "alpha 1.0{}¿",
    "in a block": "train {{ {}¿ }}",
    "in a flow guard": "flow {{ a -> b when {}¿ }}",
    "in a call": "env code({}¿)",
    "in a prompt": 'role a {{ policy p prompt "{}¿" }}',
    "in a long prompt": 'role a {{ policy p prompt """{}¿""" }}',
    "in a value": 'train {{ x: "{}¿" }}',
}


@pytest.fixture(scope="module", autouse=True)
def warm():
    """lark, jinja2 and OmegaConf loaded before the children fork: they time only the text."""
    analyze('role a { policy p prompt "{{ x|upper }}" }\ntrain { x: 1 }\nalpha ¿', "w.mas", None, build=False)


def _check(text: str) -> None:
    parse_text(text, "w.mas")
    analyze(text, "w.mas", None, build=False)  # what `masdsl check` runs


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("run", RUNS)
def test_a_long_run_of_one_character(run, place):
    text = PLACES[place].format(run * (N // len(run)))
    assert seconds_in_child(_check, text, limit=10) < BOUND


@pytest.mark.parametrize("text", [
    "alpha ¿\n" * (BIG // 8),  # a syntax error in every statement (recovery parsed the whole text for each)
    "role\n" * (BIG // 5),
    "alpha " + "a" * BIG + ".(",  # the name before the error: a regex tried at every letter of it
    'alpha "' + '\\"' * BIG,  # an unclosed string of escaped quotes
    "flow {\n" + "  a -> b when\n" * (BIG // 14),
], ids=["broken statements", "bare keywords", "a long name", "escaped quotes", "open guards"])
def test_many_errors(text):
    assert seconds_in_child(_check, text, limit=10) < BOUND


def test_many_errors_stop_at_a_hundred():
    _, diags = parse_text("alpha ¿\n" * 300, "w.mas")
    assert len(diags) == 100
    assert "stops after 100 syntax errors" in diags[-1].notes[-1]


@pytest.mark.parametrize("run", ["{{", "{%", "{", "{% {{ %}", "}}"])
def test_the_editor_index_of_a_prompts_tags(run):
    text = 'role a { policy p prompt "' + run * (BIG // len(run)) + '¿" }'
    module, _ = parse_text(text, "w.mas")

    def index():
        Index(module, text)

    assert seconds_in_child(index, limit=10) < BOUND
