"""`import "x.py"`: names registered twice, built-ins replaced, and failed imports that report once
(docs/language.md, "import"). The goldens under errors/ show the messages; these tests the behaviour."""

from __future__ import annotations

import pytest

from masdsl.envs.registry import REGISTRY
from masdsl.lang import analyze
from masdsl.lang.exprs import resolve_function
from masdsl.lang.imports import registrations

BODY = """env code
data train humaneval("train")
policy p { model: "m" }
role a {
  policy p
  prompt "{{ task.prompt }}"
  parse code = code_block(output, "python")
  reward %s
}
flow { start -> a -> end }
"""


def fn_file(name: str, value: str, decorator: str = "function", extra: str = "") -> str:
    return (f"from masdsl.envs.registry import {decorator}\n\n\n@{decorator}(\"{name}\")\n"
            f"def f(x=None, y=None):\n    return {value}\n{extra}")


@pytest.fixture(autouse=True)
def restored(restored_registry):
    """These tests import into the process's REGISTRY: put it back afterwards."""
    yield


def check(tmp_path, imports, reward="pass_rate(code, task.prompt)", body=BODY):
    text = "".join(f'import "{i}"\n' for i in imports) + body % reward
    a = analyze(text, "w.mas", tmp_path, build=False)
    return a, [(d.code, d.span.line) for d in a.diagnostics]


def test_two_files_registering_one_name_is_an_error_naming_both(tmp_path):
    (tmp_path / "a.py").write_text(fn_file("t_score", "1.0"))
    (tmp_path / "b.py").write_text(fn_file("t_score", "2.0"))
    a, codes = check(tmp_path, ["a.py", "b.py"], "t_score(code)")
    assert codes == [("duplicate-registration", 2)]
    d = a.diagnostics[0]
    assert "`a.py`" in d.message and "`b.py`" in d.message
    assert [(str(s), label) for s, label in d.related] == [
        (f"{tmp_path / 'a.py'}:4:11", "first registered here"), (f"{tmp_path / 'b.py'}:4:11", "registered again here")]
    assert d.help and "t_score_2" in d.help


def test_a_function_and_a_parser_share_names_envs_and_data_sources_do_not(tmp_path):
    (tmp_path / "a.py").write_text(fn_file("t_both", "1.0"))
    (tmp_path / "b.py").write_text(fn_file("t_both", "None", "parser"))
    a, codes = check(tmp_path, ["a.py", "b.py"])
    assert codes == [("duplicate-registration", 2)]
    assert any("as a function" in n and "as a parser" in n for n in a.diagnostics[0].notes)
    (tmp_path / "c.py").write_text(
        "from masdsl.envs.registry import data_source, env\n\n@env('t_quiz')\nclass Quiz:\n    pass\n\n"
        "@data_source('t_quiz')\ndef quiz(split):\n    return []\n")
    assert check(tmp_path, ["c.py"])[1] == []


def test_one_file_registering_a_name_twice_is_an_error(tmp_path):
    (tmp_path / "a.py").write_text(fn_file("t_twice", "1.0", extra="\n\n@function('t_twice')\ndef g():\n    return 2\n"))
    a, codes = check(tmp_path, ["a.py"])
    assert codes == [("duplicate-registration", 1)]
    assert [s.line for s, _ in a.diagnostics[0].related] == [4, 9]


def test_the_same_file_imported_twice_is_no_clash(tmp_path):
    (tmp_path / "a.py").write_text(fn_file("t_once", "1.0"))
    assert check(tmp_path, ["a.py", "./a.py"])[1] == []


def test_replacing_a_builtin_warns_and_wins_only_for_workflows_importing_it(tmp_path):
    builtin = REGISTRY.functions["pass_rate"]
    (tmp_path / "mine.py").write_text(fn_file("pass_rate", "0.5"))
    a, codes = check(tmp_path, ["mine.py"])
    assert codes == [("shadowed-builtin", 1)]
    assert a.diagnostics[0].severity == "warning"
    mine = REGISTRY.functions["pass_rate"]
    assert mine is not builtin and mine.fn() == 0.5
    assert check(tmp_path, ["mine.py"])[1] == [("shadowed-builtin", 1)]  # every check says so, not just the first
    assert check(tmp_path, [])[1] == []
    assert REGISTRY.functions["pass_rate"] is builtin  # a workflow without the import gets the built-in back
    # evaluation (a worker too) takes the file's version over the built-in
    assert resolve_function("pass_rate", (str(tmp_path / "mine.py"),)) is mine


def test_a_file_imported_again_puts_its_names_back(tmp_path):
    (tmp_path / "a.py").write_text(fn_file("t_same", "1.0"))
    (tmp_path / "b.py").write_text(fn_file("t_same", "2.0"))
    assert check(tmp_path, ["a.py"], "t_same(code)")[1] == []
    assert check(tmp_path, ["b.py"], "t_same(code)")[1] == []
    assert REGISTRY.functions["t_same"].fn() == 2.0
    check(tmp_path, ["a.py"], "t_same(code)")
    assert REGISTRY.functions["t_same"].fn() == 1.0  # not b's, which was imported last in the process
    assert [r.name for r in registrations(tmp_path / "a.py")] == ["t_same"]


UNKNOWNS = """env t_env
data train t_tasks("train")
policy p { model: "m" }
role a {
  policy p
  prompt "{{ task.question }}"
  parse answer = t_answer(output)
  reward %s
}
flow { start -> a -> end }
"""


@pytest.mark.parametrize("broken", ["missing.py", "raises.py"])
def test_a_failed_import_is_one_error_not_one_per_name(tmp_path, broken):
    (tmp_path / "raises.py").write_text("from masdsl.envs.registry import function\n\nraise ValueError('boom')\n")
    a, codes = check(tmp_path, [broken], "t_reward(answer) + t_bonus()", UNKNOWNS)
    assert codes == [("missing-file" if broken == "missing.py" else "import-error", 1)]
    assert a.diagnostics[0].notes[-1] == ("not checked until it imports: parser `t_answer`, function `t_bonus`, environment `t_env`, "
                                          "function `t_reward`, data source `t_tasks`")


def test_without_a_failed_import_unknown_names_are_reported(tmp_path):
    (tmp_path / "ok.py").write_text(fn_file("t_fine", "1.0"))
    _, codes = check(tmp_path, ["ok.py"], "t_reward(answer)", UNKNOWNS)
    assert sorted(c for c, _ in codes) == ["unknown-data-source", "unknown-env", "unknown-function", "unknown-parser"]


def test_a_name_that_is_a_function_not_a_parser_is_still_reported(tmp_path):
    _, codes = check(tmp_path, ["missing.py"], "1", BODY.replace('code_block(output, "python")', "pass_rate(output, 1)"))
    assert sorted(c for c, _ in codes) == ["missing-file", "unknown-parser"]
