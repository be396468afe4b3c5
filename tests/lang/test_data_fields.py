"""`task.x` and `{{ task.x }}` against the columns of `hf(folder)` and `parquet(path)` data on this
machine, read from the dataset's metadata (no row loaded); data not here checks nothing, as a hub
name does (docs/language.md, "data")."""

from __future__ import annotations

import json

import pytest

from masdsl.lang import analyze

datasets = pytest.importorskip("datasets")

WORKFLOW = """env math
data train %s
policy p { model: "m" }
role solver {
  policy p
  prompt "Solve: {{ task.%s }}"
  parse answer = boxed(output)
  reward correct(answer, task.%s)
}
flow { start -> solver -> end }
"""
ROWS = {"question": ["1+1", "2+2"], "answer": ["2", "4"]}


def diags(source: str, prompt_field: str = "question", reward_field: str = "answer", tmp_path=None):
    a = analyze(WORKFLOW % (source, prompt_field, reward_field), "w.mas", tmp_path or ".", build=False)
    return [(d.code, d.span.line, d.help) for d in a.diagnostics if d.is_error]


@pytest.fixture
def saved(tmp_path):
    datasets.Dataset.from_dict(ROWS).save_to_disk(tmp_path / "math")
    return tmp_path / "math"


def test_fields_of_a_saved_dataset_are_checked(saved):
    assert diags(f'hf("{saved}")') == []
    assert diags(f'hf("{saved}")', "questoin", "answr") == [
        ("unknown-field", 6, "did you mean `task.question`?"), ("unknown-field", 8, "did you mean `task.answer`?")]


def test_id_is_always_a_field(saved):
    assert diags(f'hf("{saved}")', "id") == []  # hf numbers rows without one `row-N`


def test_only_metadata_is_read(saved):
    for shard in saved.glob("*.arrow"):
        shard.unlink()  # no rows to load: the features of dataset_info.json say it all
    assert [c for c, _, _ in diags(f'hf("{saved}")', "questoin")] == ["unknown-field"]


def test_without_dataset_info_the_arrow_schema_is_read(saved):
    (saved / "dataset_info.json").unlink()
    assert [c for c, _, _ in diags(f'hf("{saved}")', "questoin")] == ["unknown-field"]
    assert diags(f'hf("{saved}")') == []


def test_format_columns_are_the_rows_fields(tmp_path):
    datasets.Dataset.from_dict(ROWS).with_format(columns=["question"]).save_to_disk(tmp_path / "q")
    assert [(c, line) for c, line, _ in diags(f'hf("{tmp_path / "q"}")')] == [("unknown-field", 8)]


def test_a_dataset_dict_checks_the_split_it_reads(tmp_path):
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_dict(ROWS),
                               "test": datasets.Dataset.from_dict({"problem": ["3+3"], "answer": ["6"]})})
    dd.save_to_disk(tmp_path / "dd")
    assert diags(f'hf("{tmp_path / "dd"}")') == []
    assert diags(f'hf("{tmp_path / "dd"}", split="test")', "problem") == []
    assert diags(f'hf("{tmp_path / "dd"}", "test")') == [("unknown-field", 6, None)]  # test rows have no `question`


def test_a_split_the_saved_dataset_lacks_is_an_error(tmp_path):
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(ROWS),
                          "test": datasets.Dataset.from_dict(ROWS)}).save_to_disk(tmp_path / "dd")
    a = analyze(WORKFLOW % (f'hf("{tmp_path / "dd"}", split="tset")', "question", "answer"), "w.mas", ".", build=False)
    [d] = [d for d in a.diagnostics if d.is_error]
    assert (d.code, d.span.line, d.help) == ("invalid-value", 2, 'did you mean `split="test"`?')
    assert "`tset`" in d.message and d.notes == ("its splits: `test`, `train`",)
    (tmp_path / "only").mkdir()
    datasets.DatasetDict({"test": datasets.Dataset.from_dict(ROWS)}).save_to_disk(tmp_path / "only")
    [d] = [d for d in analyze(WORKFLOW % (f'hf("{tmp_path / "only"}")', "question", "answer"), "w.mas", ".",
                              build=False).diagnostics if d.is_error]
    assert d.code == "invalid-value" and d.label == '`split` defaults to "train"'


def test_data_not_on_this_machine_checks_no_field(tmp_path):
    assert diags(f'hf("{tmp_path / "absent"}")', "questoin") == []
    assert diags('hf("openai/gsm8k", subset="main")', "questoin") == []


def test_a_relative_folder_is_read_from_the_current_directory_as_hf_does(saved, monkeypatch):
    monkeypatch.chdir(saved.parent)
    assert [c for c, _, _ in diags('hf("math")', "questoin")] == ["unknown-field"]


def test_several_splits_have_the_fields_all_of_them_have(saved, tmp_path):
    (tmp_path / "eval.jsonl").write_text(json.dumps({"id": "e1", "question": "3+3"}) + "\n")
    text = (WORKFLOW % (f'hf("{saved}")', "question", "answer")).replace(
        "data train", 'data eval "eval.jsonl"\ndata train')
    a = analyze(text, "w.mas", tmp_path, build=False)
    assert [(d.code, d.span.line) for d in a.diagnostics if d.is_error] == [("unknown-field", 9)]


def test_parquet_source_columns_are_checked(tmp_path):
    datasets.Dataset.from_dict(ROWS).to_parquet(tmp_path / "rows.parquet")
    assert diags(f'parquet("{tmp_path / "rows.parquet"}")') == []
    assert diags(f'parquet("{tmp_path / "rows.parquet"}")', "questoin") == [
        ("unknown-field", 6, "did you mean `task.question`?")]
    (tmp_path / "broken.parquet").write_text("not parquet")
    assert [c for c, _, _ in diags(f'parquet("{tmp_path / "broken.parquet"}")')] == ["bad-data-file"]
