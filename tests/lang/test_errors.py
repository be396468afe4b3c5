"""Golden tests: every `errors/NAME.mas` renders exactly `errors/NAME.expected` (long form).

The file name starts with the diagnostic code it shows (`unknown-role__edge.mas`), and the
first diagnostic must carry that code. Regenerate after a deliberate change with
`UPDATE_GOLDEN=1 pytest tests/lang/test_errors.py`, then read the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from masdsl.lang import analyze
from masdsl.lang.codes import CODES
from masdsl.lang.errors import render_all

ERRORS = Path(__file__).parent / "errors"
CASES = sorted(p.stem for p in ERRORS.glob("*.mas"))


def rendered(name: str, registry) -> tuple[str, list]:
    text = (ERRORS / f"{name}.mas").read_text()
    a = analyze(text, f"{name}.mas", Path("."), registry=registry)
    return render_all(a.diagnostics, a.sources) + "\n", a.diagnostics


@pytest.mark.parametrize("name", CASES)
def test_golden(name, registry, monkeypatch, restored_registry):
    monkeypatch.chdir(ERRORS)
    out, diags = rendered(name, registry)
    expected = ERRORS / f"{name}.expected"
    if os.environ.get("UPDATE_GOLDEN"):
        expected.write_text(out)
    assert out == expected.read_text()
    code = name.split("__")[0]
    if code in CODES:
        assert diags and diags[0].code == code, [d.code for d in diags]


def test_every_code_has_a_golden_case():
    covered = {n.split("__")[0] for n in CASES}
    assert set(CODES) <= covered, sorted(set(CODES) - covered)


def test_every_code_is_documented():
    doc = (Path(__file__).parents[2] / "docs" / "errors.md").read_text()
    missing = [c for c in CODES if f"## {c}" not in doc]
    assert not missing, missing


def test_many_errors_are_all_reported(registry, monkeypatch):
    monkeypatch.chdir(ERRORS)
    _, diags = rendered("many-errors", registry)
    assert [(d.code, d.span.line, d.span.col) for d in diags if d.is_error] == [
        ("unknown-policy", 20, 10), ("unknown-role", 29, 11), ("invalid-value", 34, 7)]


def test_errors_doc_is_up_to_date():
    import importlib.util

    spec = importlib.util.spec_from_file_location("errors_doc", Path(__file__).parent / "errors_doc.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.DOC.read_text() == mod.render(), "run: .venv/bin/python tests/lang/errors_doc.py"
