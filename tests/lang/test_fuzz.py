"""Mutation fuzzing: valid `.mas` files with tokens deleted, duplicated, swapped, replaced, or
cut short must give diagnostics (or a workflow), never an exception and never a hang: each input
is timed (`within_time` of tests/support/fuzz.py, also used by the other fuzz tests) and a slow one fails."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from masdsl.lang import analyze
from masdsl.lang.errors import render_all
from tests.support.fuzz import SEEDS, mutated, tokens, within_time

ROOT = Path(__file__).parents[2]
JINJA = ["|", "|upper", "|nope", "|v.board", " is defined", " is nope", ".", "[0]", "['x']", "(", ")", "~",
         " + ", " if ", " else ", "}}", "{{", "{%", "%}", " not ", "x", "task", "loop", "range(3)", ","]
PLACES = re.compile(r"\{\{.*?\}\}|\{%.*?%\}")


@st.composite
def mutated_template(draw) -> str:
    """A seed with one to three Jinja fragments put inside a `{{ }}` or `{% %}` of a prompt."""
    text = draw(st.sampled_from([s for s in SEEDS if PLACES.search(s)]))
    for _ in range(draw(st.integers(1, 3))):
        places = list(PLACES.finditer(text))
        m = draw(st.sampled_from(places))
        i = draw(st.integers(m.start() + 2, m.end() - 2))
        text = text[:i] + draw(st.sampled_from(JINJA)) + text[i:]
    return text


@settings(max_examples=2000, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck),
          database=None)
@given(mutated())
def test_mutations_never_crash_or_hang(text):
    check_never_crashes(text)


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck),
          database=None)
@given(mutated_template())
def test_template_mutations_never_crash(text):
    check_never_crashes(text)


def check_never_crashes(text: str) -> None:
    a = within_time(analyze, text, "fuzz.mas", ROOT / "workflows")
    within_time(render_all, a.diagnostics, a.sources)
    assert a.workflow is not None or a.errors
    lines = {path: text.count("\n") + 1 for path, text in a.sources.items()}
    for d in a.diagnostics:  # every diagnostic points into a file it can show
        assert d.span is not None and d.span.file in a.sources, d
        assert 1 <= d.span.line <= lines[d.span.file] and d.span.col >= 1, d


def test_tokenizer_round_trips():
    for seed in SEEDS:
        assert "".join(tokens(seed)) == seed
