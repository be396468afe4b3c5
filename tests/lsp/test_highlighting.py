"""The Pygments lexer and the TextMate grammar cover every shipped workflow."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pygments.token import Error, Keyword, Name, String

from masdsl.lsp.pygments_lexer import MasLexer

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / "workflows").glob("*.mas"))


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_workflow_lexes_without_errors(path):
    tokens = list(MasLexer().get_tokens(path.read_text()))
    assert not [v for t, v in tokens if t in Error], path
    assert (Keyword.Declaration, "role") in tokens and any(t is Name.Class for t, _ in tokens)
    assert "".join(v for _, v in tokens) == path.read_text()


def test_bad_input_gives_error_tokens():
    assert any(t in Error for t, _ in MasLexer().get_tokens("role a { ` }"))


def test_templates_are_marked_inside_prompts():
    tokens = list(MasLexer().get_tokens('prompt """\n  Solve {{ task.q }} now\n"""'))
    assert (String.Interpol, "{{") in tokens and (String.Doc, '"""') in tokens


def test_the_entry_point_finds_the_lexer():
    from pygments.lexers import get_lexer_by_name  # here: the entry point is what is tested

    assert type(get_lexer_by_name("mas")).__name__ == "MasLexer"


def test_textmate_grammar_is_valid_and_its_patterns_compile():
    grammar = json.loads((ROOT / "editors/vscode/syntaxes/mas.tmLanguage.json").read_text())
    assert grammar["scopeName"] == "source.mas"
    found = []

    def walk(node):
        if isinstance(node, dict):
            for key in ("match", "begin", "end"):
                if key in node:
                    found.append(re.compile(node[key].replace("\\\\", "\\\\")))
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(grammar)
    assert len(found) > 10
    package = json.loads((ROOT / "editors/vscode/package.json").read_text())
    assert package["contributes"]["languages"][0]["extensions"] == [".mas"]
