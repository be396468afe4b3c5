"""A role's `advantage NAME` line: both parsers, the formatter, the checker, the compiled
workflow, the run plan, `masdsl graph` and the LSP agree on it."""

from __future__ import annotations

from pathlib import Path

import pytest

from masdsl.config import resolve_config
from masdsl.lang import analyze
from masdsl.lang import ast as A
from masdsl.lang.fastparse import parse_fast
from masdsl.lang.format import format_text
from masdsl.lang.graph import groups_table
from masdsl.lang.tree import parse_lark
from masdsl.plan.run_plan import RunPlanError, advantage_problems

VALID = (Path(__file__).parent / "valid.mas").read_text()
TESTER_REWARD = "  reward pass_rate(task.solution, tests)\n"


def with_advantage(name: str, text: str = VALID) -> str:
    return text.replace(TESTER_REWARD, TESTER_REWARD + f"  advantage {name}\n", 1)


def test_both_parsers_read_the_line_with_the_same_spans():
    text = with_advantage("rloo")
    fast, (lark, diags) = parse_fast(text, "w.mas"), parse_lark(text, "w.mas")
    assert not diags and fast == lark
    item = next(r for r in fast.roles if r.name.name == "tester").of(A.RoleAdvantage)[0]
    assert item.name.name == "rloo" and text[item.span.start:item.span.end] == "advantage rloo"


def test_advantage_is_still_a_name_where_no_keyword_is_expected():
    text = with_advantage("drgrpo").replace("parse tests = asserts(output)", "parse advantage = asserts(output)")
    text = text.replace("reward pass_rate(task.solution, tests)", "reward pass_rate(task.solution, advantage)")
    fast, (lark, diags) = parse_fast(text, "w.mas"), parse_lark(text, "w.mas")
    assert not diags and (fast is None or fast == lark)
    tester = next(r for r in lark.roles if r.name.name == "tester")
    assert [p.name.name for p in tester.of(A.RoleParse)] == ["advantage"]
    assert tester.of(A.RoleAdvantage)[0].name.name == "drgrpo"


def test_the_formatter_keeps_the_line_and_round_trips():
    messy = with_advantage("rloo").replace("  advantage rloo\n", "advantage    rloo;")
    out = format_text(messy)
    assert "\n  advantage rloo\n" in out
    assert format_text(out) == out


def test_the_workflow_carries_each_role_s_estimator(registry):
    a = analyze(with_advantage("grpo_agent_norm"), "w.mas", None, registry=registry)
    assert a.ok, a.errors
    assert {n: r.advantage for n, r in a.workflow.roles.items()} == {"coder": "grpo", "tester": "grpo_agent_norm"}
    table = groups_table(a.workflow)
    assert table.splitlines()[1].split()[-1] == "advantage"
    assert [line.split()[-1] for line in table.splitlines()[2:8]] == ["grpo"] * 3 + ["grpo_agent_norm"] * 3


def _errors(text: str, registry) -> list[tuple[str, int, int, str | None]]:
    a = analyze(text, "w.mas", None, registry=registry)
    return [(d.code, d.span.line, d.span.col, d.help) for d in a.errors]


def test_check_names_an_unknown_estimator_with_a_hint(registry):
    assert _errors(with_advantage("rlo"), registry) == [("unknown-estimator", 24, 13, "did you mean `rloo`?")]
    assert _errors(with_advantage("drgrop"), registry)[0][3] == "did you mean `drgrpo`?"


def test_check_refuses_an_estimator_that_needs_more_candidates_than_k(registry):
    one = VALID.replace("train { samples: 4,", "train { samples: 1,")
    assert [e[:3] for e in _errors(with_advantage("rloo", one), registry)] == [("estimator-group-size", 24, 13)]
    for ok in ("grpo", "drgrpo", "grpo_agent_norm"):  # a group of one gets 0 under these: a warning, not an error
        assert _errors(with_advantage(ok, one), registry) == []
    assert _errors(with_advantage("rloo"), registry) == []


def test_check_refuses_two_advantage_lines(registry):
    text = with_advantage("rloo").replace("  advantage rloo\n", "  advantage rloo\n  advantage grpo\n")
    assert [e[0] for e in _errors(text, registry)] == ["duplicate-statement"]


def test_the_run_plan_refuses_what_overrides_make_impossible(registry):
    wf = analyze(with_advantage("rloo"), "w.mas", None, registry=registry).workflow
    assert advantage_problems(wf, resolve_config(wf.train)) == []
    assert advantage_problems(wf, resolve_config(wf.train, overrides=["train.samples=1"])) == [
        "role `tester`: `advantage rloo` needs groups of at least 2 candidates; its K (`train.samples`) is 1"]
    mixed = advantage_problems(wf, resolve_config(wf.train, overrides=["train.grouping=turn"]))
    assert len(mixed) == 1 and "(coder grpo, tester rloo)" in mixed[0]
    assert advantage_problems(wf, resolve_config(wf.train, overrides=["train.grouping=agent"])) == []
    both = analyze(with_advantage("grpo_agent_norm", VALID.replace(
        "  reward pass_rate(code, task.tests)\n", "  reward pass_rate(code, task.tests)\n  advantage grpo_agent_norm\n")),
        "w.mas", None, registry=registry).workflow
    assert "scales each group by its role's statistics" in advantage_problems(
        both, resolve_config(both.train, overrides=["train.grouping=trajectory"]))[0]
    assert issubclass(RunPlanError, Exception)


@pytest.fixture
def lsp_state(registry):
    pytest.importorskip("lsprotocol")
    from masdsl.lsp.state import DocState

    def make(text: str):
        st = DocState("w.mas", registry=registry)
        st.update(text)
        return st

    return make


def test_lsp_completes_the_word_and_the_estimators(lsp_state):
    from masdsl.lsp.completion import complete

    text = with_advantage("rloo")
    st = lsp_state(text)
    in_role = text.index("  advantage rloo") + 2
    assert "advantage" in [i.label for i in complete(st, in_role)]
    after = text.index("advantage rloo") + len("advantage rloo")  # the cursor at the end of the word typed
    labels = [i.label for i in complete(st, after)]
    assert labels == ["grpo", "drgrpo", "rloo", "grpo_agent_norm"]


def test_lsp_hovers_the_estimator_and_the_role(lsp_state):
    from masdsl.lsp.hover import hover_text
    from masdsl.lsp.index import Index

    text = with_advantage("drgrpo")
    st = lsp_state(text)
    ix = Index(st.module, st.text)
    shown, _ = hover_text(st, ix, text.index("advantage drgrpo") + len("advantage d"))
    assert shown.startswith("advantage estimator `drgrpo`: r - group mean")
    role, _ = hover_text(st, ix, text.index("role tester") + len("role t"))
    assert "- advantage `drgrpo`" in role
    coder, _ = hover_text(st, ix, text.index("role coder") + len("role c"))
    assert "- advantage `grpo`" in coder


def test_a_missing_or_quoted_name_is_a_named_syntax_error(registry):
    for bad, col in (("  advantage\n", 1), ('  advantage "rloo"\n', 13)):
        text = VALID.replace(TESTER_REWARD, TESTER_REWARD + bad, 1)
        a = analyze(text, "w.mas", None, registry=registry)
        (d,) = a.errors
        assert (d.code, d.message, d.span.col) == ("syntax", "missing estimator name after `advantage`", col)


def test_a_role_s_own_k_is_the_one_checked(registry):
    own_one = with_advantage("rloo").replace('prompt "Write asserts for {{ task.prompt }}"\n',
                                             'prompt "Write asserts for {{ task.prompt }}"\n  sample { samples: 1 }\n')
    assert [e[:3] for e in _errors(own_one, registry)] == [("estimator-group-size", 25, 13)]
    wf = analyze(with_advantage("rloo"), "w.mas", None, registry=registry).workflow
    assert advantage_problems(wf, resolve_config(wf.train, overrides=["sample.tester.samples=1"])) == [
        "role `tester`: `advantage rloo` needs groups of at least 2 candidates; its K (`sample.tester.samples`) is 1"]
    assert advantage_problems(wf, resolve_config(wf.train, overrides=["train.samples=1", "sample.tester.samples=2"])) == []
