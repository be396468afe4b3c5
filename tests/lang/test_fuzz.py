"""Mutation fuzzing: valid `.mas` files with tokens deleted, duplicated, swapped, replaced, or
cut short must give diagnostics (or a workflow), never an exception and never a hang."""

from __future__ import annotations

import re
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from masdsl.lang import analyze
from masdsl.lang.errors import render_all

ROOT = Path(__file__).parents[2]
SEEDS = [p.read_text() for p in sorted((ROOT / "workflows").glob("*.mas"))] + [(Path(__file__).parent / "valid.mas").read_text()]
TOKEN = re.compile(r'"""[\s\S]*?"""|"(?:[^"\\\n]|\\.)*"|#[^\n]*|[A-Za-z_]\w*|\d+(?:\.\d+)?(?:e-?\d+)?|->|==|!=|<=|>=|\s+|.')
VOCAB = ["{", "}", "(", ")", "[", "]", "->", "=>", "&", ",", ":", ";", "=", ".", "when", "flow", "role", "max_turns",
         "start", "end", "coder", "tester", "task", "env", "not", "and", "or", '"', '"""', "-", "0", "1e9", "#", "\n",
         "{{", "}}", "{%", "%}", "policy", "prompt", "file", "parse", "reward", "team", "alpha", "train", "sample", "x"]
MAX_SECONDS = 5.0


def tokens(text: str) -> list[str]:
    return TOKEN.findall(text)


@st.composite
def mutated(draw) -> str:
    toks = tokens(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["delete", "duplicate", "swap", "replace", "insert", "truncate"]))
        i = draw(st.integers(0, len(toks) - 1))
        if op == "delete":
            del toks[i]
        elif op == "duplicate":
            toks.insert(i, toks[i])
        elif op == "swap":
            j = draw(st.integers(0, len(toks) - 1))
            toks[i], toks[j] = toks[j], toks[i]
        elif op == "replace":
            toks[i] = draw(st.sampled_from(VOCAB))
        elif op == "insert":
            toks.insert(i, draw(st.sampled_from(VOCAB)))
        else:
            text = "".join(toks)
            return text[: draw(st.integers(0, len(text)))]
        if not toks:
            return ""
    return "".join(toks)


@settings(max_examples=2000, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck),
          database=None)
@given(mutated())
def test_mutations_never_crash_or_hang(text):
    t0 = time.perf_counter()
    a = analyze(text, "fuzz.mas", ROOT / "workflows")
    render_all(a.diagnostics, a.sources)
    assert a.workflow is not None or a.errors
    assert time.perf_counter() - t0 < MAX_SECONDS


def test_tokenizer_round_trips():
    for seed in SEEDS:
        assert "".join(tokens(seed)) == seed
