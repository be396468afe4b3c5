"""`sandbox { packages: [...] }`: a workflow declares the third-party packages its generated
programs may import; `masdsl check` refuses one that is not installed (at the name, with a
hint); the declaration reaches the run's sandbox limits, and a program of the workflow's env can
import the package and nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest

import masdsl
from masdsl.config import resolve_config
from masdsl.lang import analyze
from masdsl.lang.errors import render_all
from masdsl.lang.fastparse import parse_fast
from masdsl.lang.format import format_text
from masdsl.lang.tree import parse_lark
from masdsl.runtime.inputs import make_env
from masdsl.sandbox import run_python

ROOT = Path(__file__).parents[2]
BASE = (ROOT / "workflows" / "coder_tester.mas").read_text()


def without_train_block(text: str) -> str:
    """`text` less its top-level `train { ... }` block (one line or several)."""
    out, inside = [], False
    for line in text.splitlines():
        if line.startswith("train"):
            inside = not line.rstrip().endswith("}")
        elif inside:
            inside = line.rstrip() != "}"
        else:
            out.append(line)
    return "\n".join(out)


def diagnostics(extra: str) -> list:
    base = BASE if "train {" not in extra else without_train_block(BASE)
    text = base + "\n" + extra + "\n"
    return analyze(text, "w.mas", ROOT / "workflows", build=False).diagnostics, text


def test_both_parsers_read_the_statement_alike():
    text = 'sandbox { packages: ["numpy"], timeout_s: 2 }\ntrain { sandbox { memory_mb: 512 } }'
    fast = parse_fast(text, "w.mas")
    assert fast is not None and (fast, []) == parse_lark(text, "w.mas")
    assert [e.key.name for e in fast.sandboxes[0].block.entries] == ["packages", "timeout_s"]


def test_a_package_that_is_not_installed_is_refused_at_its_name():
    diags, text = diagnostics('sandbox { packages: ["numpy", "nmupy"] }')
    assert [(d.code, d.message) for d in diags if d.is_error] == [
        ("invalid-sandbox", "package `nmupy` is not installed in masdsl's Python")]
    d = diags[0]
    line = text.splitlines()[d.span.line - 1]
    assert line[d.span.col - 1:].startswith('"nmupy"')
    shown = render_all(diags, {"w.mas": text})
    assert f"w.mas:{d.span.line}:{d.span.col}" in shown and "^^^^^^^" in shown
    assert "did you mean `numpy`?" in d.help and "pip install nmupy" in d.help


@pytest.mark.parametrize("extra, message", [
    ('sandbox { packages: ["json"] }', "package `json` is in the standard library"),
    ('sandbox { packages: ["numpy.linalg"] }', "package `numpy.linalg` is not an importable name"),
    ('sandbox { packages: "numpy" }', "`packages` must be a list of package names"),
    ('sandbox { pakages: ["numpy"] }', "unknown sandbox key `pakages` (did you mean `packages`?)"),
    ('sandbox { timeout_s: "soon" }', "timeout_s"),
    ("sandbox { timeout_s: 2 }\ntrain { sandbox { timeout_s: 3 } }", "`timeout_s` is set twice"),
    ('train { sandbox { packages: ["nmupy"] } }', "package `nmupy` is not installed"),
])
def test_other_mistakes_are_refused(extra, message):
    diags, _ = diagnostics(extra)
    errors = [d for d in diags if d.is_error]
    assert errors and errors[0].code == "invalid-sandbox" and message in errors[0].message, errors


def test_twice_is_a_duplicate_statement():
    diags, _ = diagnostics('sandbox { packages: ["numpy"] }\nsandbox { timeout_s: 2 }')
    assert [d.code for d in diags if d.is_error] == ["duplicate-statement"]


def test_the_statement_formats_and_survives_formatting():
    text = BASE + '\nsandbox {packages:["numpy"],timeout_s:2}\n'
    assert 'sandbox { packages: ["numpy"], timeout_s: 2 }' in format_text(text)


def test_the_declared_packages_reach_the_env_s_sandbox():
    wf = masdsl.loads(BASE + '\nsandbox { packages: ["numpy"] }\n', "w.mas", ROOT / "workflows")
    assert wf.train["sandbox"] == {"packages": ["numpy"]}
    env = make_env(wf, resolve_config(wf.train).sandbox)
    assert env.limits.packages == ("numpy",)
    assert run_python("import numpy\nprint(int(numpy.ones(3).sum()))", limits=env.limits).stdout == "3\n"
    plain = make_env(masdsl.loads(BASE, "w.mas", ROOT / "workflows"), resolve_config({}).sandbox)
    assert plain.limits.packages == ()  # the default: the standard library only
    assert "No module named 'numpy'" in run_python("import numpy", limits=plain.limits).stderr
