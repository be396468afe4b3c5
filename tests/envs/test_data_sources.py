"""Data as users keep it: Hugging Face datasets saved to disk or in the local `datasets` cache
(built here from a dict, nothing downloaded), parquet and Arrow files; a malformed row names the
dataset or file and the row, and the checker reads a parquet file's columns like a JSONL
file's first row."""

from __future__ import annotations

import glob
import os
import shutil
from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
datasets = pytest.importorskip("datasets")

from masdsl.envs.datasets import apps, hf, load_jsonl, parquet  # noqa: E402 - after the skips
from masdsl.envs.hf_data import offline  # noqa: E402
from masdsl.envs.registry import load_builtins  # noqa: E402
from masdsl.errors import DataError  # noqa: E402
from masdsl.lang import analyze  # noqa: E402
from masdsl.runtime.inputs import load_split  # noqa: E402

ROWS = {"id": ["m-1", "m-2", "m-3"], "question": ["1+1?", "2+2?", "3+3?"], "answer": ["2", "4", "6"]}
BAD = {"id": ["m-1", "m-2", "m-1"], "question": ["1+1?", "2+2?", "3+3?"], "answer": ["2", "4", "6"]}


def write_parquet(path: Path, columns: dict) -> Path:
    pq.write_table(pa.table(columns), path)
    return path


def cache_dataset(cache: Path, repo: str, columns: dict, tmp: Path) -> None:
    """Put `columns` in a `datasets` cache as `load_dataset(repo)` leaves a Hub dataset there
    (namespace___name/default/0.0.0/<hash>/), with a packaged builder and no network."""
    from datasets.packaged_modules.parquet.parquet import Parquet

    namespace, name = repo.split("/")
    src = write_parquet(tmp / f"{name}.parquet", columns)
    Parquet(cache_dir=str(cache), dataset_name=name, hash="0123abcd", data_files={"train": str(src)}).download_and_prepare()
    (built,) = glob.glob(str(cache / name / "default-*"))
    shutil.move(built, cache / name / "default")
    shutil.move(cache / name, cache / f"{namespace}___{name}")


# ---- hf(...) ---------------------------------------------------------------------------------

def test_hf_reads_a_dataset_saved_to_disk(tmp_path):
    datasets.Dataset.from_dict(ROWS).save_to_disk(tmp_path / "math")
    rows = hf(str(tmp_path / "math"))
    assert [(r["id"], r["answer"]) for r in rows] == [("m-1", "2"), ("m-2", "4"), ("m-3", "6")]


def test_hf_picks_the_split_of_a_saved_dataset_dict(tmp_path):
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_dict(ROWS),
                               "test": datasets.Dataset.from_dict({"question": ["9?"], "answer": ["9"]})})
    dd.save_to_disk(tmp_path / "dd")
    assert hf(str(tmp_path / "dd"), split="test") == [{"question": "9?", "answer": "9", "id": "row-1"}]
    with pytest.raises(DataError, match=r"dd: no split 'validation'; it has 'train', 'test'"):
        hf(str(tmp_path / "dd"), split="validation")


def test_hf_bad_row_in_a_saved_dataset_names_the_folder_and_row(tmp_path):
    datasets.Dataset.from_dict(BAD).save_to_disk(tmp_path / "bad")
    with pytest.raises(DataError, match=rf"^{tmp_path / 'bad'}: row 3: duplicate id 'm-1' \(first on row 1\)$"):
        hf(str(tmp_path / "bad"))


def test_hf_reads_the_local_cache_offline(tmp_path):
    cache_dataset(tmp_path / "cache", "acme/tiny_math", ROWS, tmp_path)
    rows = hf("acme/tiny_math", split="train", cache_dir=str(tmp_path / "cache"))
    assert [r["question"] for r in rows] == ROWS["question"]


def test_hf_bad_row_in_the_cache_names_the_dataset_and_row(tmp_path):
    cache_dataset(tmp_path / "cache", "acme/dupes", BAD, tmp_path)
    with pytest.raises(DataError, match=r"^hf dataset `acme/dupes` split 'train': row 3: duplicate id 'm-1'"):
        hf("acme/dupes", cache_dir=str(tmp_path / "cache"))


def test_hf_never_downloads(tmp_path):
    with pytest.raises(DataError, match=r"hf dataset `acme/elsewhere` is not on this machine.*never downloads"):
        hf("acme/elsewhere", cache_dir=str(tmp_path / "empty"))


def test_offline_sets_the_switches_only_inside(monkeypatch):
    import huggingface_hub.constants as hub

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "0")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", False)
    with offline() as ds:
        assert os.environ["HF_DATASETS_OFFLINE"] == os.environ["HF_HUB_OFFLINE"] == "1"
        assert ds.config.HF_HUB_OFFLINE is True and hub.HF_HUB_OFFLINE is True
    assert "HF_HUB_OFFLINE" not in os.environ and os.environ["HF_DATASETS_OFFLINE"] == "0"
    assert datasets.config.HF_HUB_OFFLINE is False and hub.HF_HUB_OFFLINE is False


def test_hf_part_keeps_the_hash_split(tmp_path):
    many = {"id": [f"p-{i}" for i in range(40)], "question": ["q"] * 40, "answer": ["a"] * 40}
    datasets.Dataset.from_dict(many).save_to_disk(tmp_path / "many")
    train = hf(str(tmp_path / "many"), part="train")
    evals = hf(str(tmp_path / "many"), part="eval")
    assert train and evals and len(train) + len(evals) == 40
    assert not {r["id"] for r in train} & {r["id"] for r in evals}


# ---- parquet / arrow files -------------------------------------------------------------------

def test_parquet_file_by_extension_and_source(tmp_path):
    path = write_parquet(tmp_path / "rows.parquet", ROWS)
    assert [r["id"] for r in load_jsonl(path)] == ROWS["id"]
    assert parquet(str(path)) == load_jsonl(path)


def test_parquet_bad_row_names_the_file_and_row(tmp_path):
    path = write_parquet(tmp_path / "bad.parquet", BAD)
    with pytest.raises(DataError, match=rf"^{path}: row 3: duplicate id 'm-1' \(first on row 1\)$"):
        load_jsonl(path)


def test_parquet_works_with_the_file_loaders(tmp_path):
    good = '{"inputs": ["1 2\\n"], "outputs": ["3\\n"]}'
    path = write_parquet(tmp_path / "apps.parquet", {
        "problem_id": [1, 2], "question": ["add", "add"], "input_output": [good, "{not json"],
        "solutions": ['["print(3)"]', '["print(3)"]']})
    with pytest.raises(DataError, match=rf"^{path}: row 2: field `input_output` is not valid JSON$"):
        apps(str(path))
    write_parquet(path, {"problem_id": [1], "question": ["add"], "input_output": [good], "solutions": ['["print(3)"]']})
    assert apps(str(path))[0]["tests"] == [{"input": "1 2\n", "output": "3\n"}]


def test_arrow_files_as_datasets_writes_them(tmp_path):
    datasets.Dataset.from_dict(ROWS).save_to_disk(tmp_path / "saved")
    (arrow,) = (tmp_path / "saved").glob("*.arrow")  # the IPC stream format
    assert [r["id"] for r in parquet(str(arrow))] == ROWS["id"]
    with pa.OSFile(str(tmp_path / "file.arrow"), "wb") as sink, pa.ipc.new_file(sink, pa.table(ROWS).schema) as w:
        w.write_table(pa.table(ROWS))  # the IPC file format
    assert [r["answer"] for r in load_jsonl(tmp_path / "file.arrow")] == ROWS["answer"]


def test_unreadable_table_and_wrong_extension(tmp_path):
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(DataError, match=rf"^{broken}: not a readable parquet file"):
        load_jsonl(broken)
    with pytest.raises(DataError, match=r"parquet\(\.\.\.\) reads \.parquet or \.arrow files"):
        parquet(str(tmp_path / "rows.jsonl"))
    with pytest.raises(DataError, match=r"no such data file"):
        parquet(str(tmp_path / "missing.parquet"))


# ---- the workflow: check and load_split ----------------------------------------------------

WORKFLOW = """env math
data train {data}
policy p {{ model: "m" }}
role solver {{
  policy p
  prompt "Solve {{{{ task.{field} }}}}"
  parse answer = boxed(output)
  reward correct(answer, task.answer)
}}
flow {{ start -> solver -> end }}
"""


def test_check_reads_a_parquet_files_columns(tmp_path):
    write_parquet(tmp_path / "rows.parquet", ROWS)
    ok = analyze(WORKFLOW.format(data='"rows.parquet"', field="question"), str(tmp_path / "w.mas"), tmp_path)
    assert ok.workflow is not None, [d.message for d in ok.errors]
    bad = analyze(WORKFLOW.format(data='"rows.parquet"', field="questoin"), str(tmp_path / "w.mas"), tmp_path)
    assert [d.code for d in bad.errors] == ["unknown-field"]
    assert "questoin" in bad.errors[0].message


def test_check_reports_an_unreadable_parquet_file(tmp_path):
    (tmp_path / "rows.parquet").write_bytes(b"not parquet at all")
    a = analyze(WORKFLOW.format(data='"rows.parquet"', field="question"), str(tmp_path / "w.mas"), tmp_path)
    assert [d.code for d in a.errors] == ["bad-data-file"]


def test_load_split_reads_parquet_and_hf_lines(tmp_path):
    write_parquet(tmp_path / "rows.parquet", ROWS)
    datasets.Dataset.from_dict(ROWS).save_to_disk(tmp_path / "saved")
    wf = analyze(WORKFLOW.format(data='"rows.parquet"', field="question"), str(tmp_path / "w.mas"), tmp_path).workflow
    assert [r["id"] for r in load_split(wf, "train")] == ROWS["id"]
    text = WORKFLOW.format(data=f'hf("{tmp_path / "saved"}", split="train")', field="question")
    wf = analyze(text, str(tmp_path / "w.mas"), tmp_path).workflow
    assert [r["answer"] for r in load_split(wf, "train")] == ROWS["answer"]
    assert {"hf", "parquet"} <= set(load_builtins().data_sources)
