"""`masdsl check` reads every line of the local data files a workflow names and refuses the first
malformed one with its line (issue 31, item 9); relative data paths, quoted or given to a data
source, are read from the `.mas` file's folder, whatever the working directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import masdsl
from masdsl.cli import main as cli
from masdsl.envs.data_paths import resolve_args
from masdsl.envs.registry import load_builtins
from masdsl.lang import analyze
from masdsl.runtime.inputs import load_split

ROWS = [{"id": f"q{i}", "question": f"{i}+{i}", "answer": str(2 * i)} for i in range(5)]
WORKFLOW = """workflow w "math on a file"
env math
data train {train}
data eval  {eval}
policy p {{ model: "smollm2-135m-instruct" }}
role solver {{
  policy p
  prompt "{{{{ task.question }}}}"
  parse answer = boxed(output)
  reward correct(answer, task.answer)
}}
flow {{
  start -> solver -> end
}}
"""


def lines(rows) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def project(tmp_path: Path, train_text: str, eval_call: str = '"data/eval.jsonl"') -> Path:
    """`tmp_path/wf/w.mas` with its data under `tmp_path/wf/data/`."""
    (tmp_path / "wf" / "data").mkdir(parents=True)
    (tmp_path / "wf" / "data" / "train.jsonl").write_text(train_text)
    (tmp_path / "wf" / "data" / "eval.jsonl").write_text(lines(ROWS))
    mas = tmp_path / "wf" / "w.mas"
    mas.write_text(WORKFLOW.format(train='"data/train.jsonl"', eval=eval_call))
    return mas


@pytest.mark.parametrize("bad_line, says", [
    ('{"id": "x", "question": "1+1" "answer": "2"}', "line 4: not valid JSON (Expecting ',' delimiter, column 31)"),
    ('["x", "1+1", "2"]', 'line 4: a JSON list, not an object'),
    ('"just text"', "line 4: a JSON string, not an object"),
    ('{"id": "q1", "question": "again", "answer": "0"}', "line 4: the id 'q1' again (first on line 2)"),
])
def test_check_names_the_first_malformed_line(tmp_path, capsys, bad_line, says):
    """Rows 1-2 good, a blank line 3, the mistake on line 4, another on line 6: line 4 is named."""
    text = lines(ROWS[:2]) + "\n" + bad_line + "\n" + lines(ROWS[2:3]) + "not json\n"
    mas = project(tmp_path, text)
    assert cli(["check", "--format", "short", str(mas)]) == 2
    out = capsys.readouterr()
    report = out.out + out.err
    assert f"{mas}:3:12: error: data file `data/train.jsonl` has a malformed row at {says}" in report, report
    assert f"note: {tmp_path / 'wf' / 'data' / 'train.jsonl'}:4" in report, report
    assert "[bad-data-file]" in report and "line 6" not in report


def test_a_clean_file_checks_clean_whatever_its_size(tmp_path, capsys):
    mas = project(tmp_path, lines(ROWS * 1) + "\n" + lines([{**r, "id": r["id"] + "b"} for r in ROWS]))
    assert cli(["check", str(mas)]) == 0, capsys.readouterr()


def test_a_file_loaders_file_is_read_too(tmp_path, capsys):
    """`aime("data/aime.jsonl")`: the data source's own file, from the `.mas` folder."""
    mas = project(tmp_path, lines(ROWS), eval_call='aime("data/aime.jsonl")')
    (tmp_path / "wf" / "data" / "aime.jsonl").write_text('{"id": 1, "problem": "1+1", "answer": "2"}\n{"id": 2, "problem":\n')
    assert cli(["check", "--format", "short", str(mas)]) == 2
    report = "".join(capsys.readouterr())
    assert f"{mas}:4:17: error: data file `data/aime.jsonl` has a malformed row at line 2: not valid JSON" in report


def test_relative_data_paths_are_read_from_the_mas_files_folder(tmp_path, monkeypatch):
    """The quoted file and a data source's path alike, from another working directory."""
    mas = project(tmp_path, lines(ROWS), eval_call='aime("data/aime.jsonl")')
    (tmp_path / "wf" / "data" / "aime.jsonl").write_text(lines({"id": i, "problem": f"{i}?", "answer": str(i)}
                                                               for i in range(3)))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    wf = masdsl.load(Path("..") / "wf" / "w.mas")
    assert [r["id"] for r in load_split(wf, "train")] == [r["id"] for r in ROWS]
    assert [r["id"] for r in load_split(wf, "eval")] == ["aime/0", "aime/1", "aime/2"]
    assert wf.data["eval"].args == ("data/aime.jsonl",)  # kept as written: the fingerprint does not move with the folder
    assert cli(["check", str(Path("..") / "wf" / "w.mas")]) == 0


def test_split_words_and_dataset_names_are_not_paths(tmp_path):
    sources = load_builtins().data_sources
    assert resolve_args(sources["apps"], ("train",), {}, tmp_path) == (("train",), {})
    assert resolve_args(sources["hf"], ("openai/gsm8k",), {"split": "test"}, tmp_path) == \
        (("openai/gsm8k",), {"split": "test"})
    (tmp_path / "saved").mkdir()  # a folder next to the .mas file: that folder
    assert resolve_args(sources["hf"], ("saved",), {"cache_dir": "c"}, tmp_path) == \
        ((str(tmp_path / "saved"),), {"cache_dir": str(tmp_path / "c")})
    assert resolve_args(sources["parquet"], (), {"path": "rows.parquet"}, tmp_path) == \
        ((), {"path": str(tmp_path / "rows.parquet")})


def test_analyze_reports_the_line_in_its_diagnostic(tmp_path):
    mas = project(tmp_path, lines(ROWS[:1]) + "{oops}\n")
    a = analyze(mas.read_text(), str(mas), mas.parent)
    (d,) = [d for d in a.diagnostics if d.code == "bad-data-file"]
    assert d.label == "line 2 of this file" and d.notes == (f"{tmp_path / 'wf' / 'data' / 'train.jsonl'}:2",)


def test_a_fixed_file_is_read_again(tmp_path):
    """The scan is remembered per file (the language server checks on every edit) until the file
    changes: fixing the line clears the error."""
    mas = project(tmp_path, lines(ROWS[:1]) + "{oops}\n")
    assert any(d.code == "bad-data-file" for d in analyze(mas.read_text(), str(mas), mas.parent).diagnostics)
    (tmp_path / "wf" / "data" / "train.jsonl").write_text(lines(ROWS))
    assert not analyze(mas.read_text(), str(mas), mas.parent).diagnostics
