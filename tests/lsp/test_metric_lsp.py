"""The language server on a role's `metric NAME = expr` lines (issue 28): the word is completed
among a role's lines, a role's hover lists its metrics, and names inside a metric are hovered
like those of a reward."""

from __future__ import annotations

from lsprotocol import types as T

TEXT = '''env math
data train arith_words("train", n=8)
policy shared { model: "smollm2-135m-instruct" }
role tool {
  policy shared
  prompt "Write Python for {{ task.question }}"
  parse code = code_block(output, "python")
  reward math_tool_reward(code, task.answer)
  metric correct = correct(run_answer(code), task.answer)

}
flow { start -> tool -> end }
'''


def position(text: str, needle: str, delta: int = 0) -> T.Position:
    i = text.index(needle) + delta
    return T.Position(text.count("\n", 0, i), i - (text.rfind("\n", 0, i) + 1))


def test_metric_lines_are_completed_and_hovered(client, tmp_path):
    path = tmp_path / "measured.mas"
    path.write_text(TEXT)
    uri = client.open(path)
    assert [d for d in client.wait_diagnostics(uri, 1) if d.severity == T.DiagnosticSeverity.Error] == []
    hover = lambda needle, delta=1: client.run(  # noqa: E731
        client.lc.text_document_hover_async(T.HoverParams(T.TextDocumentIdentifier(uri), position(TEXT, needle, delta))))
    role = hover("role tool", 6).contents.value
    assert "- metric `correct` = `correct(run_answer(code), task.answer)` (measured, not rewarded)" in role
    assert hover("task.answer)\n\n", 1).contents.value.startswith("`task`")  # a name inside the metric
    got = client.run(client.lc.text_document_completion_async(
        T.CompletionParams(T.TextDocumentIdentifier(uri), position(TEXT, "\n\n}", 1))))
    labels = [i.label for i in (got.items if isinstance(got, T.CompletionList) else got)]
    assert "metric" in labels and "reward" in labels  # a role's lines, at the start of a new one
    client.close(uri)


HTTP = '''env http("http://127.0.0.1:9", fields=["total", "moves", "target"])
data train arith_words("train", n=8)
policy shared { model: "smollm2-135m-instruct" }
role player {
  policy shared
  prompt "Total so far: {{ env.total }}"
  parse answer = boxed(output)
  reward env.x
}
flow { start -> player -> end }
'''


def test_an_http_envs_declared_fields_are_completed(client, tmp_path):
    """`env http(..., fields=[...])`: `env.` completes the declared fields (no server is asked)."""
    path = tmp_path / "remote.mas"
    path.write_text(HTTP)
    uri = client.open(path)
    client.wait_diagnostics(uri, 1)
    got = client.run(client.lc.text_document_completion_async(
        T.CompletionParams(T.TextDocumentIdentifier(uri), position(HTTP, "env.x", 4))))
    labels = [i.label for i in (got.items if isinstance(got, T.CompletionList) else got)]
    assert {"total", "moves", "target"} <= set(labels)
    client.close(uri)
