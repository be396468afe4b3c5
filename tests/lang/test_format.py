"""`masdsl fmt`: one canonical layout, comments kept, idempotent, and the compiled workflow of
every shipped, test and fuzzed file unchanged by it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from masdsl.cli import main as cli
from masdsl.lang import analyze
from masdsl.lang.format import FormatError, format_text
from tests.support.fuzz import mutated, within_time

ROOT = Path(__file__).parents[2]
FILES = sorted({*ROOT.glob("workflows/*.mas"), *ROOT.glob("tests/lang/*.mas"), *ROOT.glob("tests/support/*/*.mas"),
                *ROOT.glob("tests/*/data/*.mas")})
COMMENT = re.compile(r'"""[\s\S]*?"""|"(?:[^"\\\n]|\\.)*"|(#[^\n]*)')


def _src(e) -> str | None:
    return None if e is None else re.sub(r"\s+", "", e.source)


def compiled(wf) -> dict:
    """What a workflow means, without spans or source text."""
    roles = {n: (r.policy, r.prompt, r.system, dict(r.sample), [(p.name, _src(p.expr)) for p in r.parses],
                 _src(r.reward)) for n, r in wf.roles.items()}
    policies = {n: (p.model, p.lora, p.frozen, dict(p.options), p.chat_template_kwargs) for n, p in wf.policies.items()}
    edges = sorted((u, v, d["order"], _src(d.get("guard"))) for u, v, d in wf.graph.edges(data=True))
    data = {k: (d.source, d.args, dict(d.kwargs), d.path) for k, d in wf.data.items()}
    return {"name": wf.name, "description": wf.description, "env": wf.env, "env_args": dict(wf.env_args),
            "roles": roles, "policies": policies, "edges": edges, "nodes": sorted(wf.graph.nodes), "data": data,
            "max_turns": wf.max_turns, "team": _src(wf.team), "alpha": wf.alpha, "success": _src(wf.success),
            "train": wf.train, "imports": wf.imports}


def comments(text: str) -> list[str]:
    return [m.group(1).rstrip() for m in COMMENT.finditer(text) if m.group(1)]


def assert_same_meaning(text: str, path: Path) -> str:
    out = format_text(text)
    assert format_text(out) == out, "not idempotent"
    assert comments(out) == comments(text)
    before, after = (analyze(t, str(path), path.parent) for t in (text, out))
    assert [(d.code, d.message) for d in after.diagnostics] == [(d.code, d.message) for d in before.diagnostics]
    if before.workflow is not None:
        assert compiled(after.workflow) == compiled(before.workflow)
    return out


def test_there_are_files_to_format():
    assert len(FILES) >= 20, FILES


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_format_keeps_meaning_and_is_idempotent(path):
    assert_same_meaning(path.read_text(), path)


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck), database=None)
@given(mutated())
def test_fuzzed_files_keep_their_meaning(text):
    try:
        within_time(format_text, text)
    except FormatError as exc:
        assert "does not parse" in str(exc)
        return
    assert_same_meaning(text, ROOT / "workflows" / "fuzz.mas")


def test_the_canonical_layout():
    text = ('workflow w "d" ; env code\npolicy p{model:"m" , lora:{r:16 alpha:32}}\n\n\n'
            "role a{policy p;prompt 'hi'   # greet\n sample{temperature:-1.0,max_tokens:8}}\n"
            "flow{max_turns 2 start->a;a->end when f(x=1,y=-2)and not(a.ok)   # done\n a->a}\n"
            "team  1 -2*3 # one\nalpha 1   # two\n")
    assert format_text(text) == (
        'workflow w "d"\nenv code\npolicy p { model: "m", lora: { r: 16, alpha: 32 } }\n\n'
        "role a {\n  policy p\n  prompt 'hi'  # greet\n  sample { temperature: -1.0, max_tokens: 8 }\n}\n"
        "flow {\n  max_turns 2\n  start -> a\n  a -> end when f(x=1, y=-2) and not (a.ok)  # done\n  a -> a\n}\n"
        "team 1 - 2 * 3  # one\nalpha 1         # two\n")


def test_a_block_with_a_comment_goes_one_entry_per_line():
    text = "train { samples: 4,   # per task\n lr: 1e-6 }\n"
    assert format_text(text) == "train {\n  samples: 4,  # per task\n  lr: 1e-6\n}\n"


def test_a_comment_inside_an_expression_keeps_it_working():
    text = "success passes(a.code,   # the code\n  task.tests)\n"
    assert format_text(text) == "success passes(a.code,  # the code\n    task.tests)\n"


def test_prompts_are_copied_byte_for_byte():
    prompt = '"""\n      odd   spacing {{ task.x }}\n   # not a comment\n"""'
    assert prompt in format_text(f"role a {{\n      prompt {prompt}\n}}\n")


def test_syntax_error_is_refused():
    with pytest.raises(FormatError, match="does not parse"):
        format_text("flow { a => b }")


def test_shipped_workflows_are_formatted(capsys):
    assert cli(["fmt", "--check", *map(str, sorted(ROOT.glob("workflows/*.mas")))]) == 0
    assert capsys.readouterr().out == ""


def test_fmt_check_lists_files_and_fmt_rewrites_them(tmp_path, capsys):
    ugly, tidy, broken = tmp_path / "ugly.mas", tmp_path / "tidy.mas", tmp_path / "broken.mas"
    ugly.write_text("env  code ;flow{start->end}")
    tidy.write_text("env code\nflow {\n  start -> end\n}\n")
    assert cli(["fmt", "--check", str(ugly), str(tidy)]) == 1
    out = capsys.readouterr()
    assert out.out == f"would reformat  {ugly}\n" and "1 file would be reformatted" in out.err
    assert ugly.read_text() == "env  code ;flow{start->end}"
    assert cli(["fmt", str(ugly), str(tidy)]) == 0
    assert capsys.readouterr().out == f"formatted  {ugly}\n"
    assert ugly.read_text() == tidy.read_text()
    broken.write_text("flow { a => b }")
    assert cli(["fmt", str(broken)]) == 2
    assert "does not parse" in capsys.readouterr().err and broken.read_text() == "flow { a => b }"
