"""The fast parser (`masdsl.lang.fastparse`) and lark's (`masdsl.lang.tree.parse_lark`) agree:
on every text the fast one accepts, the same `Module` (nodes and spans); on the bundled
workflows the fast one accepts them all; on mutated text, it never accepts what lark rejects.
Also the checks that skip jinja2 and OmegaConf on the plain cases agree with them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from masdsl.config import plainly_valid, resolve_config
from masdsl.lang.fastparse import parse_fast
from masdsl.lang.parse import parse_text
from masdsl.lang.tree import parse_lark
from tests.support.fuzz import SEEDS, mutated, within_time


ROOT = Path(__file__).parents[2]
CORPUS = sorted({*ROOT.glob("workflows/*.mas"), *ROOT.glob("tests/**/*.mas")})
CORNERS = [
    "", "  # only a comment", "team 1;", "team -x", "team - -1", "team -not", "team not not a", "team a < b",
    "team a < b < c", "team (a) + (b) * -(c)", "team ((a))", "team f(train, env.x, k=[1, [2]], )", "team a.b.c",
    "team f(not=1)", "team true and false or x", "team x order y", "team or", "team 'it''s'", "team \"a\\u00e9\\q\"",
    "team 1e-3 + .5 + 2. % 3", "team x\nrole r { policy p }", "rolea { policy p }", "role a { prompt file 'x' }",
    "role a { prompt filex 'x' }", "role a { parse true = f(output) reward 1; }", "role a { ; }",
    "policy p { lora: { r: 1 } alpha: 3 }", "policy p { lora: { r: 1, alpha: 3 }, b: -2 c: [true, \"x\",] }",
    "policy p { a: 1 train: 2 }", "policy p { a: trueish }", "policy p { a { b: 1 } }", "policy p { a: [1 2] }",
    "flow { a -> b when x\n policy -> c }", "flow { a -> b when x\n when -> c }", "flow { when -> c }",
    "flow { max_turns 2; a & b -> c -> end when x >= 1 ;; }", "flow { a -> b ; }", "flow { a => b }",
    "flow { a -> b when }", "env e(1, k='v')", "env e()", "data train src(split='x')", "data eval 'f.jsonl'",
    "workflow w \"\"\"\n  long\n\"\"\"", "workflow w", "import \"x.py\"", "success solved()", "alpha 0.5",
    'team """a""" + """', "team \"unterminated", "team a ? b", "team a\u00a0b", "team \u0663", "flow { a -> b }}",
]


def _same(text: str) -> None:
    fast = parse_fast(text, "w.mas")
    lark, diags = parse_lark(text, "w.mas")
    if fast is not None:
        assert lark is not None, (text, diags)
        assert fast == lark, text
    assert parse_text(text, "w.mas") == (lark, diags)


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: str(p.relative_to(ROOT)))
def test_corpus(path):
    _same(path.read_text())


def test_the_workflows_parse_fast():
    for path in ROOT.glob("workflows/*.mas"):
        assert parse_fast(path.read_text(), "w.mas") is not None, path


@pytest.mark.parametrize("text", CORNERS)
def test_corners(text):
    _same(text)


def test_the_large_benchmark_file():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from check_large import generate

    text = generate(30)[0]
    assert parse_fast(text, "w.mas") is not None
    _same(text)


@settings(max_examples=1500, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck), database=None)
@given(mutated())
def test_mutations(text):
    within_time(_same, text)


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck), database=None)
@given(st.sampled_from(SEEDS), st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from(
    ["alpha", "train", "policy", "when", "not", "or", "and", "true", "max_turns", "file", "(", ")", " ", "\n", ";", ","])),
    min_size=1, max_size=3))
def test_keywords_put_anywhere(seed, edits):
    text = seed
    for at, word in edits:
        i = at % (len(text) + 1)
        text = text[:i] + word + text[i:]
    within_time(_same, text)


# ---- the template and train-block checks that need neither jinja2 nor OmegaConf ------------

PIECES = ["{{ task.prompt }}", "{{x}}", "{{ a.b }}", "{", "}", "{{", "}}", "{%", "%}", "{#", "#}", "\n", " text ",
          "{{ true }}", "{{ a.if }}", "{{\ta\t}}", "{{ a . b }}", "{{ a.b.c }}", "{{-", "-}}", "{{ r1.code }}",
          "{{ range }}", "{{ range.x }}", "{{ lipsum }}", "\r", "{{ a|upper }}"]


@settings(max_examples=800, deadline=None, derandomize=True, database=None)
@given(st.lists(st.sampled_from(PIECES), max_size=8))
def test_plain_templates_are_read_as_jinja2_reads_them(pieces):
    from masdsl.lang import templates as T

    text = "".join(pieces)
    simple = T._simple(text)
    if simple is None:
        return
    tree, exc = T._parsed(text)
    assert exc is None
    T._facts.cache_clear()
    try:
        T._simple, keep = (lambda _t: None), T._simple
        assert T._facts(text) == simple
    finally:
        T._simple = keep
        T._facts.cache_clear()


def test_template_globals_are_jinja2s():
    from masdsl.lang.templates import GLOBALS, environment

    assert set(GLOBALS) == set(environment().globals)


ODD = [0, -1, 1.5, True, None, "x", "${a}", "???", 70000]
GOOD = {"steps": [1, 5], "samples": [2, 8], "batch": [1, 4], "lr": [1e-6, 1], "grouping": ["at", "turn", "agents"],
        "loss": ["grpo"], "old_logprobs": ["engine", "auto"], "eval_samples": [1, 3], "seed": [0, 7], "sampels": [2],
        "master_weights": ["compute"], "ppo_epochs": [1, 2], "drop_flat_groups": [True, False], "dual_clip": [0, 3.0],
        "engine": ["hf", "auto", "vllm"], "ray": [False], "env_workers": [1], "device": ["cpu"],
        "engine_replicas": [1, 2], "learner_restarts": [0, 1], "replay_file": ["r.jsonl"], "timeout_s": [1, 2.5],
        "isolation": ["none", "bwrap"], "memory_mb": [512], "enabled": [False], "uri": ["sqlite:///x.db"]}
SECTIONS = {"runtime": ["engine", "ray", "env_workers", "device", "engine_replicas", "learner_restarts", "replay_file"],
            "sandbox": ["timeout_s", "isolation", "memory_mb"], "tracking": ["enabled", "uri"]}


def _entries(keys: list[str]):
    return st.lists(st.sampled_from(keys).flatmap(
        lambda k: st.tuples(st.just(k), st.sampled_from(GOOD[k] * 6 + ODD))), max_size=4).map(dict)


@settings(max_examples=600, deadline=None, derandomize=True, database=None)
@given(_entries(["steps", "samples", "batch", "lr", "grouping", "loss", "old_logprobs", "eval_samples", "seed",
                 "sampels", "master_weights", "ppo_epochs", "drop_flat_groups", "dual_clip"]),
       st.fixed_dictionaries({}, optional={s: _entries(keys) for s, keys in SECTIONS.items()}))
def test_plainly_valid_train_blocks_are_valid(train, sections):
    block = {**train, **sections}
    if plainly_valid(block):
        resolve_config(train_block=block)  # never raises
