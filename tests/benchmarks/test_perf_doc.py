"""benchmarks/perf_doc.py: the one writer every benchmark uses for its part of docs/performance.md."""

from __future__ import annotations

import doctest
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load():
    spec = importlib.util.spec_from_file_location("perf_doc", ROOT / "benchmarks" / "perf_doc.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_doctests():
    result = doctest.testmod(load())
    assert result.attempted >= 5 and result.failed == 0


def test_rewriting_each_part_with_its_own_text_changes_nothing():
    """Every section and marker block of the real document survives a rewrite with itself (so a
    benchmark rerun touches only its own numbers)."""
    pd, text = load(), (ROOT / "docs" / "performance.md").read_text()
    names = [line[3:] for line in text.splitlines() if line.startswith("## ")]
    assert {"language", "learner", "learning", "scale"} <= set(names)
    for name in names:
        start, end = pd.section_bounds(text, name)
        assert pd.replace_section(text, name, text[start:end]) == text, name
        assert pd.append_line(text, name, "- new").count("- new") == 1
    begins = [line for line in text.splitlines() if line.startswith("<!-- ") and not line.startswith("<!-- /")
              and not line.endswith(":end -->")]
    assert len(begins) >= 3
    for begin in begins:
        end = f"<!-- /{begin[5:]}" if not begin.endswith(":begin -->") else begin.replace(":begin", ":end")
        inner = text.split(begin, 1)[1].split(end, 1)[0].strip("\n")
        assert pd.replace_block(text, "learner", begin, end, inner) == text, begin
