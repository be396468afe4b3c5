"""The language's words are defined once (`masdsl.lang.vocabulary`) and agree with the grammar."""

from __future__ import annotations

import re
from importlib import resources

from masdsl.lang import fastparse, syntax
from masdsl.lang.vocabulary import KEYWORDS, STATEMENTS
from masdsl.lsp import completion, pygments_lexer


def _rules() -> str:
    """The grammar without its comments."""
    return "\n".join(line.split("//")[0] for line in resources.files("masdsl.lang").joinpath("mas.lark").read_text().splitlines())


def test_the_keywords_are_the_words_the_grammar_spells_out():
    assert set(re.findall(r'"([a-z_]+)"', _rules())) == KEYWORDS


def test_the_statements_are_the_grammar_s_top_level_alternatives():
    alternatives = re.search(r"_stmt:\s*\(([^)]*)\)", _rules()).group(1)
    declared = [a.strip().removesuffix("_decl") for a in alternatives.split("|")]
    assert declared == list(STATEMENTS)


def test_every_front_end_reads_the_one_table():
    assert fastparse._TOP is syntax.TOP_KEYWORDS is completion.STATEMENTS is pygments_lexer.STATEMENTS is STATEMENTS
