"""`masdsl.loads` / `masdsl.load`: the compiled `Workflow`, and `MasError` for bad files."""

from __future__ import annotations

import pickle

import pytest

import masdsl
from masdsl.lang import MasError, analyze
from masdsl.lang.graph import predicted_groups, role_turns, to_ascii

from pathlib import Path

VALID = (Path(__file__).parent / "valid.mas").read_text()


def test_loads_builds_the_graph(global_registry):
    wf = masdsl.loads(VALID, name="demo.mas")
    g = wf.graph
    assert set(g.nodes) == {"start", "end", "coder&tester"}
    assert g.nodes["coder&tester"]["kind"] == "group" and g.nodes["coder&tester"]["roles"] == ("coder", "tester")
    assert g.nodes["start"]["kind"] == "start" and g.nodes["end"]["kind"] == "end"
    (to_end, guard), (loop, none) = wf.successors("coder&tester")
    assert (to_end, loop, none) == ("end", "coder&tester", None)
    assert guard.source == "passes(coder.code, tester.tests)" and guard.span.line == 29
    assert g.edges["coder&tester", "end"]["order"] == 0 and g.edges["coder&tester", "coder&tester"]["order"] == 1
    assert g.nodes["coder&tester"]["span"].line == 28


def test_loads_specs(global_registry):
    wf = masdsl.loads(VALID, name="demo.mas")
    assert (wf.name, wf.description, wf.env, wf.max_turns, wf.alpha) == ("demo", "A coder and a tester.", "code", 3, 1.0)
    coder = wf.roles["coder"]
    assert coder.prompt.splitlines()[0] == "Write the function." and coder.prompt_span.line == 9
    assert coder.sample == {"temperature": 1.0, "max_tokens": 64}
    assert [p.name for p in coder.parses] == ["code"] and coder.parses[0].expr.role == "coder"
    assert wf.policies["shared"].model == "smollm2-135m-instruct"
    assert wf.data["train"].source == "humaneval" and wf.data["train"].args == ("train",)
    assert wf.train == {"samples": 4, "batch": 4, "steps": 3, "lr": 1e-6}
    assert wf.roles_of_policy("shared") == ["coder", "tester"]
    assert len(wf.file_hash) == 64 and wf.source == VALID


def test_workflow_pickles(global_registry):
    wf = pickle.loads(pickle.dumps(masdsl.loads(VALID, name="demo.mas")))
    assert wf.successors("coder&tester")[0][1].source == "passes(coder.code, tester.tests)"


def test_mas_error_holds_every_error(global_registry):
    bad = VALID.replace("policy shared\n  prompt \"Write", "policy shard\n  prompt \"Write").replace("alpha 1.0", "alpha 11")
    with pytest.raises(MasError) as info:
        masdsl.loads(bad, name="bad.mas")
    err = info.value
    assert [d.code for d in err.errors] == ["unknown-policy", "invalid-value"]
    assert str(err).splitlines()[0] == "bad.mas:20:10: error: role `tester` uses unknown policy `shard` [unknown-policy]"
    assert "20 |   policy shard" in err.render()
    again = pickle.loads(pickle.dumps(err))
    assert str(again) == str(err) and again.render() == err.render()


def test_load_resolves_paths_against_the_file(tmp_path, global_registry):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "t.jsonl").write_text('{"id": "1", "prompt": "p", "tests": [], "solution": "s"}\n')
    (tmp_path / "p.j2").write_text("Solve {{ task.prompt }}")
    text = VALID.replace('data eval  humaneval("eval")', 'data eval  "data/t.jsonl"').replace(
        'prompt "Write asserts for {{ task.prompt }}"', 'prompt file "p.j2"')
    (tmp_path / "w.mas").write_text(text)
    wf = masdsl.load(tmp_path / "w.mas")
    assert wf.data["eval"].path == tmp_path / "data" / "t.jsonl"
    assert wf.roles["tester"].prompt == "Solve {{ task.prompt }}"
    # task fields now come from both splits: `entry_point` is not in the JSONL rows
    with pytest.raises(MasError, match="`task` has no field `entry_point`"):
        masdsl.loads(text.replace("{{ task.prompt }}\n", "{{ task.entry_point }}\n"), name=str(tmp_path / "x.mas"),
                     base_dir=tmp_path)


def test_prompt_file_errors_point_into_the_file(tmp_path, registry):
    (tmp_path / "p.j2").write_text("line one\n{{ task.promt }}\n")
    text = VALID.replace('prompt "Write asserts for {{ task.prompt }}"', 'prompt file "p.j2"')
    a = analyze(text, "w.mas", tmp_path, registry=registry)
    (d,) = a.errors
    assert (d.code, d.span.file, d.span.line, d.span.col) == ("unknown-field", str(tmp_path / "p.j2"), 2, 9)


def test_import_registers_user_functions(tmp_path, global_registry):
    (tmp_path / "mine.py").write_text(
        "from masdsl.envs.registry import function\n"
        "@function('triple_t', returns='number')\n"
        "def triple(x):\n    return 3 * x\n")
    text = 'import "mine.py"\n' + VALID.replace("alpha 1.0", "alpha 0.5").replace(
        "team pass_rate(coder.code, task.tests)", "team triple_t(1)")
    wf = masdsl.loads(text, name="w.mas", base_dir=tmp_path)
    from masdsl.lang.workflow import EvalContext

    assert wf.team.evaluate(EvalContext(task={})) == 3
    global_registry.functions.pop("triple_t")


def test_graph_functions(global_registry):
    wf = masdsl.loads(VALID, name="demo.mas")
    assert role_turns(wf) == {"coder": [0, 1, 2], "tester": [0, 1, 2]}
    assert len(predicted_groups(wf, 4)) == 6
    assert "-> end" in to_ascii(wf) and "when passes(coder.code, tester.tests)" in to_ascii(wf)


def test_turns_respect_branches(registry):
    text = VALID.replace("""  start -> coder & tester
  coder & tester -> end when passes(coder.code, tester.tests)
  coder & tester -> coder & tester""", """  start -> coder
  coder -> end when passes(coder.code, task.tests)
  coder -> tester when coder.ok
  coder -> coder
  tester -> end""")
    a = analyze(text, "w.mas", None, registry=registry)
    assert not a.errors, a.errors
    assert role_turns(a.workflow) == {"coder": [0, 1, 2], "tester": [0]}


def test_groups_table_frozen_policy_and_k(registry):
    text = VALID.replace('policy shared { model: "smollm2-135m-instruct" }',
                         'policy shared { model: "smollm2-135m-instruct" }\npolicy judge { model: "m", frozen: true }').replace(
        "role tester {\n  policy shared", "role tester {\n  policy judge").replace("samples: 4", "samples: 6")
    a = analyze(text, "w.mas", None, registry=registry)
    assert not a.errors, a.errors
    from masdsl.lang.graph import groups_table, samples_of

    assert samples_of(a.workflow) == 6
    table = groups_table(a.workflow)
    assert "K = 6 candidates" in table
    assert "tester  2     judge   6           no (frozen)" in table
    assert "judge   m                      frozen: acts, never trains" in table
    assert "K = 2 candidates" in groups_table(a.workflow, samples=2)
