"""`masdsl lsp` over stdio with a real client, on the shipped workflows."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from lsprotocol import types as T

from masdsl.lang import analyze

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / "workflows").glob("*.mas"))
CODER = ROOT / "workflows" / "coder_tester.mas"


def position(text: str, needle: str, nth: int = 0, delta: int = 0) -> T.Position:
    """The LSP position of the `nth` occurrence of `needle` (plus `delta` characters)."""
    i = -1
    for _ in range(nth + 1):
        i = text.index(needle, i + 1)
    i += delta
    line = text.count("\n", 0, i)
    return T.Position(line, i - (text.rfind("\n", 0, i) + 1))


def _doc(uri: str) -> T.TextDocumentIdentifier:
    return T.TextDocumentIdentifier(uri)


def _apply(text: str, edits: list[T.TextEdit]) -> str:
    lines = text.split("\n")
    starts = [0]
    for line in lines[:-1]:
        starts.append(starts[-1] + len(line) + 1)
    for e in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        a = starts[e.range.start.line] + e.range.start.character
        b = starts[e.range.end.line] + e.range.end.character
        text = text[:a] + e.new_text + text[b:]
    return text


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_diagnostics_of_each_workflow_are_the_checkers(client, path):
    uri = client.open(path)
    got = client.wait_diagnostics(uri, 1)
    want = analyze(path.read_text(), str(path.resolve()), path.parent).diagnostics
    assert [d.code for d in got] == [d.code for d in want]
    assert all(d.severity == T.DiagnosticSeverity.Warning for d in got)  # the shipped workflows have no errors
    client.close(uri)


def test_diagnostics_as_you_type(client):
    text = CODER.read_text()
    uri = client.open(CODER)
    assert client.wait_diagnostics(uri, 1) == []
    # a misspelt policy: code, range, message and help
    at = position(text, "policy shared", 1, len("policy "))
    v = client.change(uri, "shard", T.Range(at, T.Position(at.line, at.character + len("shared"))))
    (d,) = client.wait_diagnostics(uri, v)
    assert d.code == "unknown-policy" and d.severity == T.DiagnosticSeverity.Error
    assert d.range == T.Range(at, T.Position(at.line, at.character + 5))
    assert "unknown policy `shard`" in d.message and "did you mean `shared`?" in d.message
    assert d.source == "masdsl" and d.code_description.href.endswith("errors.md#unknown-policy")
    # a syntax error while typing, then the fix: the diagnostics follow each version
    v = client.change(uri, "shared {", T.Range(at, T.Position(at.line, at.character + 5)))
    (d,) = client.wait_diagnostics(uri, v)
    assert d.code == "syntax" and d.range.start.line >= at.line
    v = client.change(uri, "shared", T.Range(at, T.Position(at.line, at.character + len("shared {"))))
    assert client.wait_diagnostics(uri, v) == []
    client.close(uri)


def test_related_locations(client):
    text = CODER.read_text().replace("role tester {", "role coder {")
    uri = client.open(CODER, text)
    diags = client.wait_diagnostics(uri, 1)
    dup = next(d for d in diags if d.code == "duplicate-name")
    (rel,) = dup.related_information
    assert rel.location.uri == uri and rel.location.range.start == position(text, "role coder", 0, 5)
    assert rel.message == "first declared here" and dup.range.start == position(text, "role coder", 1, 5)
    client.close(uri)


def test_hover(client):
    text = CODER.read_text()
    uri = client.open(CODER)
    role = client.run(client.lc.text_document_hover_async(T.HoverParams(_doc(uri), position(text, "coder & tester", 0, 2))))
    assert "role `coder`" in role.contents.value and "policy `shared`" in role.contents.value
    assert 'field `coder.code` = `code_block(output, "python")`' in role.contents.value
    fn = client.run(client.lc.text_document_hover_async(T.HoverParams(_doc(uri), position(text, "passes(", 0, 1))))
    assert "passes(" in fn.contents.value and "->" in fn.contents.value and "registered function" in fn.contents.value
    var = client.run(client.lc.text_document_hover_async(T.HoverParams(_doc(uri), position(text, "{{ task.prompt", 0, 4))))
    assert var.contents.value.startswith("`task`: the current task")
    field = client.run(client.lc.text_document_hover_async(T.HoverParams(_doc(uri), position(text, "{{ coder.code", 0, 10))))
    assert "field `coder.code`" in field.contents.value and "code_block" in field.contents.value
    key = client.run(client.lc.text_document_hover_async(T.HoverParams(_doc(uri), position(text, "steps:", 0, 1))))
    assert key.contents.value.startswith("`train.steps`: int")
    assert client.run(client.lc.text_document_hover_async(T.HoverParams(_doc(uri), T.Position(0, 1)))) is None  # a comment
    client.close(uri)


def test_definition(client, tmp_path):
    text = CODER.read_text()
    uri = client.open(CODER)
    loc = client.run(client.lc.text_document_definition_async(T.DefinitionParams(_doc(uri), position(text, "tester.tests", 0, 1))))
    assert loc.uri == uri and loc.range.start == position(text, "role tester", 0, 5)
    field = client.run(client.lc.text_document_definition_async(T.DefinitionParams(_doc(uri), position(text, "tester.tests", 0, 8))))
    assert field.range.start == position(text, "parse tests", 0, 6)
    pol = client.run(client.lc.text_document_definition_async(T.DefinitionParams(_doc(uri), position(text, "policy shared", 1, 8))))
    assert pol.range.start == position(text, "policy shared", 0, 7)
    fn = client.run(client.lc.text_document_definition_async(T.DefinitionParams(_doc(uri), position(text, "code_block(", 0, 2))))
    src = Path(fn.uri.removeprefix("file://")).read_text().splitlines()
    assert fn.uri.endswith(".py") and "code_block" in "\n".join(src[max(0, fn.range.start.line - 2): fn.range.start.line + 2])
    client.close(uri)
    # a function of the workflow's own Python file
    (tmp_path / "mine.py").write_text("from masdsl.envs.registry import function\n\n\n"
                                      "@function('lsp_test_bonus', returns='number')\ndef bonus(x, y):\n    return 1.0\n")
    mine = tmp_path / "mine.mas"
    own = text.replace("env code\n", 'env code\nimport "mine.py"\n')
    own = re.sub(r"^team\s+pass_rate\(", "team lsp_test_bonus(", own, flags=re.M)
    uri = client.open(mine, own)
    assert not [d for d in client.wait_diagnostics(uri, 1) if d.severity == T.DiagnosticSeverity.Error]
    loc = client.run(client.lc.text_document_definition_async(T.DefinitionParams(_doc(uri), position(own, "lsp_test_bonus", 0, 3))))
    assert loc.uri == (tmp_path / "mine.py").as_uri() and loc.range.start.line == 3  # the decorated def
    client.close(uri)


def _labels(client, uri, pos) -> list[str]:
    got = client.run(client.lc.text_document_completion_async(T.CompletionParams(_doc(uri), pos)))
    return [i.label for i in (got.items if isinstance(got, T.CompletionList) else got)]


def test_completion(client):
    text = CODER.read_text()
    uri = client.open(CODER)
    assert _labels(client, uri, position(text, "coder.code, tester.tests)", 0, 6)) == ["code", "output", "ok"]
    inside = _labels(client, uri, position(text, "{{ task.prompt", 0, 3))
    assert {"task", "env", "turn", "coder", "tester"} <= set(inside) and "pass_rate" not in inside
    assert set(_labels(client, uri, position(text, "task.prompt", 0, 5))) == {"id", "prompt", "tests", "solution", "entry_point"} or \
        "prompt" in _labels(client, uri, position(text, "task.prompt", 0, 5))
    sample = _labels(client, uri, position(text, "temperature: 1.0", 0))
    assert "max_tokens" in sample and "top_p" in sample and "steps" not in sample
    train = _labels(client, uri, position(text, "samples: 4", 0))
    assert {"steps", "lr", "eval_tasks", "runtime"} <= set(train) and "temperature" not in train
    flow = _labels(client, uri, position(text, "passes(coder.code", 0))
    assert {"coder", "tester", "passes", "pass_rate", "end", "when"} <= set(flow)
    assert "code_block" in _labels(client, uri, position(text, 'code_block(output, "python")', 0))
    assert "shared" in _labels(client, uri, position(text, "policy shared", 1, 7))
    assert _labels(client, uri, position(text, "Complete this", 0, 3)) == []  # prose of a prompt
    # while the line being typed does not parse yet
    at = position(text, "  sample { temperature", 0)
    v = client.change(uri, "  parse x = coder.", T.Range(at, at))
    client.wait_diagnostics(uri, v)
    assert _labels(client, uri, T.Position(at.line, at.character + len("  parse x = coder."))) == ["code", "output", "ok"]
    client.close(uri)


def test_document_symbols(client):
    text = CODER.read_text()
    uri = client.open(CODER)
    syms = client.run(client.lc.text_document_document_symbol_async(T.DocumentSymbolParams(_doc(uri))))
    names = [s.name for s in syms]
    assert names[:3] == ["coder_tester", "code", "data train"] and {"shared", "coder", "tester", "flow", "train"} <= set(names)
    coder = next(s for s in syms if s.name == "coder")
    assert [c.name for c in coder.children] == ["code"] and coder.selection_range.start == position(text, "role coder", 0, 5)
    client.close(uri)


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_rename_the_first_role(client, path):
    text = path.read_text()
    before = analyze(text, str(path), path.parent).workflow
    old = next(iter(before.roles))
    uri = client.open(path)
    at = position(text, f"role {old} ", 0, 5)
    prep = client.run(client.lc.text_document_prepare_rename_async(T.PrepareRenameParams(_doc(uri), at)))
    assert prep is not None
    edit = client.run(client.lc.text_document_rename_async(T.RenameParams(_doc(uri), at, "renamed_role")))
    new = _apply(text, edit.changes[uri])
    after = analyze(new, str(path), path.parent)
    assert after.workflow is not None, [d.message for d in after.errors]
    assert list(after.workflow.roles) == ["renamed_role" if r == old else r for r in before.roles]
    assert after.workflow.graph.number_of_edges() == before.graph.number_of_edges()
    assert not re.search(rf"\{{\{{[^}}]*\b{old}\.", new)  # no template still names the old role
    client.close(uri)


def test_rename_a_policy_and_refuse_bad_names(client):
    text = CODER.read_text()
    uri = client.open(CODER)
    edit = client.run(client.lc.text_document_rename_async(T.RenameParams(_doc(uri), position(text, "policy shared", 1, 8), "one")))
    new = _apply(text, edit.changes[uri])
    assert len(edit.changes[uri]) == 3 and analyze(new, str(CODER), CODER.parent).workflow.roles["tester"].policy == "one"
    with pytest.raises(Exception, match="not a valid role name"):
        client.run(client.lc.text_document_rename_async(T.RenameParams(_doc(uri), position(text, "role coder", 0, 6), "task")))
    with pytest.raises(Exception, match="already exists"):
        client.run(client.lc.text_document_rename_async(T.RenameParams(_doc(uri), position(text, "role coder", 0, 6), "tester")))
    client.close(uri)
