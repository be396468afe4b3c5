"""Bad inputs give one clear message (a UserError, exit status 2), never a traceback: unknown
config keys, wrong types in `train { }`, a model folder that is not a model, a data file with a
malformed row (file and row named), a checkpoint from another workflow."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.overrides import NO_TRACKING
from tests.support.paths import COUNTER_DIR

DATA = COUNTER_DIR
REPLAY = ["runtime.engine=replay", f"runtime.replay_file={DATA / 'counter_replay.jsonl'}", NO_TRACKING]


def masdsl(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, "-m", "masdsl.cli", *args], cwd=cwd, capture_output=True, text=True,
                       timeout=300, env={**os.environ, "MASDSL_NO_VLLM": "1"})
    assert "Traceback" not in p.stderr + p.stdout, p.stderr[-3000:]
    return p


def _copy_workflow(tmp: Path, name: str, old: str | None = None, new: str | None = None) -> Path:
    text = (DATA / name).read_text()
    if old is not None:
        assert old in text
        text = text.replace(old, new)
    for f in ("counterenv.py", "tasks.jsonl"):
        shutil.copy(DATA / f, tmp / f)
    out = tmp / name
    out.write_text(text)
    return out


def test_unknown_config_key_override(tmp_path):
    p = masdsl("eval", str(DATA / "counter.mas"), *REPLAY, "train.sampels=3", cwd=tmp_path)
    assert p.returncode == 2
    assert "unknown config key `train.sampels` (did you mean `train.samples`?)" in p.stderr


def test_unknown_key_in_train_block(tmp_path):
    mas = _copy_workflow(tmp_path, "counter.mas", "batch: 2,", "bach: 2,")
    p = masdsl("eval", str(mas), *REPLAY, cwd=tmp_path)
    assert p.returncode == 2
    assert "unknown config key `train.bach` (did you mean `train.batch`?)" in p.stderr
    assert "counter.mas:29:" in p.stderr  # the line of the train block, with its column


def test_wrong_type_in_train_block(tmp_path):
    mas = _copy_workflow(tmp_path, "counter.mas", "samples: 2,", 'samples: "two",')
    p = masdsl("eval", str(mas), *REPLAY, cwd=tmp_path)
    assert p.returncode == 2
    assert "`train.samples`" in p.stderr and "'two'" in p.stderr and "counter.mas:29:" in p.stderr
    assert "reference_type" not in p.stderr


def test_wrong_type_override(tmp_path):
    p = masdsl("eval", str(DATA / "counter.mas"), *REPLAY, "runtime.ray=maybe", cwd=tmp_path)
    assert p.returncode == 2
    assert "`runtime.ray`" in p.stderr and "'maybe'" in p.stderr and "reference_type" not in p.stderr


def test_model_folder_that_is_not_a_model(tmp_path):
    folder = tmp_path / "not_a_model"
    folder.mkdir()
    (folder / "README.txt").write_text("weights go here\n")
    p = masdsl("eval", str(DATA / "coder.mas"), "runtime.engine=hf", f"policy.shared.model={folder}",
               NO_TRACKING, cwd=tmp_path)
    assert p.returncode == 2
    assert f"model `{folder}`" in p.stderr and "config.json" in p.stderr


@pytest.mark.parametrize("bad_row, expected", [
    ('{"id": "x3", "prompt": "def f(:", "tests": ["assert 1"\n', "line 3: not valid JSON"),
    ("[1, 2]\n", "line 3: a JSON list, not an object"),
])
def test_data_file_with_a_malformed_row(tmp_path, bad_row, expected):
    mas = _copy_workflow(tmp_path, "coder.mas")
    rows = (DATA / "tasks.jsonl").read_text().splitlines(keepends=True)
    (tmp_path / "tasks.jsonl").write_text("".join(rows[:2]) + bad_row + "".join(rows[2:]))
    p = masdsl("eval", str(mas), *REPLAY, cwd=tmp_path)
    assert p.returncode == 2  # refused by the check of every data file, before any model loads
    assert "`tasks.jsonl` has a malformed row at " + expected in p.stderr and "Traceback" not in p.stderr
