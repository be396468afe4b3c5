"""The language server on `judge(...)` (issue 32, item 4): completed in a role's reward, its
policy argument completed and hovered as a policy, the word hovered with its signature."""

from __future__ import annotations

from lsprotocol import types as T

TEXT = '''env code
data train humaneval("train")
policy shared { model: "smollm2-135m-instruct" }
policy critic { model: "smollm2-135m-instruct", frozen: true }
role coder {
  policy shared
  prompt "Write {{ task.prompt }}"
  parse code = code_block(output, "python")
  reward judge(critic, "Rate {{ task.prompt }}: {{ code }}", default=0)
}
flow { start -> coder -> end }
'''


def position(text: str, needle: str, nth: int = 0, delta: int = 0) -> T.Position:
    i = -1
    for _ in range(nth + 1):
        i = text.index(needle, i + 1)
    i += delta
    return T.Position(text.count("\n", 0, i), i - (text.rfind("\n", 0, i) + 1))


def _labels(client, uri, pos) -> list[str]:
    got = client.run(client.lc.text_document_completion_async(T.CompletionParams(T.TextDocumentIdentifier(uri), pos)))
    return [i.label for i in (got.items if isinstance(got, T.CompletionList) else got)]


def test_judge_is_completed_and_hovered(client, tmp_path):
    path = tmp_path / "judged.mas"
    path.write_text(TEXT)
    uri = client.open(path)
    assert [d for d in client.wait_diagnostics(uri, 1) if d.severity == T.DiagnosticSeverity.Error] == []
    hover = lambda needle, nth=0, delta=1: client.run(  # noqa: E731
        client.lc.text_document_hover_async(T.HoverParams(T.TextDocumentIdentifier(uri), position(TEXT, needle, nth, delta))))
    word = hover("judge(").contents.value
    assert 'judge(policy, "template", parse="auto", default=0, max_tokens=32, temperature=0) -> number' in word
    assert "frozen policy" in word and "judge/unparsed" in word
    policy = hover("critic, ").contents.value
    assert policy.startswith("**policy `critic`**") and "frozen: true" in policy
    assert hover("{{ task.prompt }}:", 0, 4).contents.value.startswith("`task`: the current task")
    assert "judge" in _labels(client, uri, position(TEXT, "judge(", 0))  # at the start of the reward
    at = position(TEXT, "critic, ", 0)
    assert set(_labels(client, uri, at)) == {"shared", "critic"}  # the policy argument
    client.close(uri)


def test_judge_is_highlighted_as_the_languages_own():
    from pygments.token import Name

    from masdsl.lsp.pygments_lexer import MasLexer

    kinds = {v: t for t, v in MasLexer().get_tokens('role a { reward judge(critic, "x") + same(1, 2) }')}
    assert kinds["judge"] is Name.Builtin and kinds["same"] is Name.Function
