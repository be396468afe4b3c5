"""The incremental parser gives the same `Module` as parsing the whole text, edit after edit."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from masdsl.lang.parse import parse_text
from masdsl.lsp.incremental import IncrementalParser, common_prefix, common_suffix

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / "workflows").glob("*.mas"))
SNIPPETS = ["}", "{", "\n", " ", "x", "role z { policy shared }\n", '"', '"""', "->", "# c\n", ";", "a & b", "1"]


def _edit(rng: random.Random, text: str) -> str:
    i = rng.randrange(len(text) + 1)
    if rng.random() < 0.5 and i < len(text):
        return text[:i] + text[i + rng.randint(1, 12):]  # delete a few characters
    return text[:i] + rng.choice(SNIPPETS) + text[i:]


def test_common_prefix_and_suffix():
    assert common_prefix("abcdef", "abXdef") == 2
    assert common_suffix("abcdef", "abXdef", 4) == 3
    assert common_suffix("aaa", "aaaa", 3) == 3


@pytest.mark.parametrize("path", WORKFLOWS[:6], ids=lambda p: p.name)
def test_random_edits_match_a_full_parse(path):
    text = path.read_text()
    rng = random.Random(path.name)
    inc = IncrementalParser("w.mas")
    inc.update(text)
    reparsed, broken = [], 0
    for _ in range(60):
        text = _edit(rng, text) if rng.random() < 0.8 else path.read_text()
        got, diags = inc.update(text)
        want, _ = parse_text(text, "w.mas")
        if want is None:
            broken += 1
            assert got is None and diags, "the full parse failed but the incremental one did not"
        else:
            assert got == want
            reparsed.append(inc.last_reparsed)
    assert reparsed and min(reparsed) < 6 and broken  # it really reparsed little, and saw broken text


def test_an_edit_in_one_role_reparses_only_its_neighbourhood():
    text = (ROOT / "workflows" / "coder_tester.mas").read_text()
    inc = IncrementalParser("w.mas")
    inc.update(text)
    i = text.index("max_tokens: 192")
    m, _ = inc.update(text[:i] + "max_tokens: 1920" + text[i + len("max_tokens: 192"):])
    assert inc.last_reparsed == 3
    assert m == parse_text(text[:i] + "max_tokens: 1920" + text[i + len("max_tokens: 192"):], "w.mas")[0]


FLOW_SNIPPETS = ["\n", " ", "x", "-> end", "-", ">", "when ", " and ok", "&", ";", "}", "{", "max_turns 2\n", "#",
                 "a -> b\n", "(", ")", "1", "or", "policy", '"']


@pytest.mark.parametrize("seed", range(4))
def test_edits_inside_a_flow_match_a_full_parse(seed):
    """Typing among the edges of a long flow reparses a few edges, never the whole flow, and
    gives the module a full parse gives (in place moves of the spans after the edit included)."""
    clean = "env code\nrole a { policy p }\nflow {\n" + "".join(
        f"  a -> a when len(a.x) > {i} ; a -> end\n" if i % 3 else "  start -> a\n" for i in range(40)) + "}\nteam 1\n"
    rng = random.Random(seed)
    inc = IncrementalParser("w.mas")
    text = clean
    inc.update(text)
    small = 0
    for _ in range(120):
        if rng.random() < 0.3:
            text = clean
        lo, hi = text.index("flow {") + 7, text.rindex("}")
        i = rng.randrange(lo, hi)
        if rng.random() < 0.4:
            text = text[:i] + text[i + rng.randint(1, 6):]
        else:
            text = text[:i] + rng.choice(FLOW_SNIPPETS) + text[i:]
        got, diags = inc.update(text)
        want, _ = parse_text(text, "w.mas")
        if want is None:
            assert got is None and diags
        else:
            assert got == want
            small += inc.last_reparsed < 10
    assert small >= 5
