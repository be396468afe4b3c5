"""`masdsl check` and `masdsl graph` as a user runs them (a real subprocess, real files)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
ERRORS = Path(__file__).parent / "errors"


def masdsl(*args, cwd=ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "masdsl.cli", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def test_check_shipped_workflows_exit_0():
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "workflows").glob("*.mas"))
    assert len(files) >= 11
    r = masdsl("check", *files)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == len(files) and all(line.startswith("ok  workflows/") for line in lines)
    assert "ok  workflows/coder_tester.mas  roles=2 edges=3 max_turns=3" in lines


def test_check_summarises_without_building_the_workflow():
    """`analyze(build=False)` says what the compiled `Workflow` has. `masdsl check` builds it (the
    run plan needs it) but imports neither lark nor torch, vLLM, Ray or MLflow for a valid file."""
    from masdsl.lang import analyze

    for path in sorted((ROOT / "workflows").glob("*.mas")):
        full = analyze(path.read_text(), str(path), path.parent)
        quick = analyze(path.read_text(), str(path), path.parent, build=False)
        wf = full.workflow
        assert quick.workflow is None and quick.diagnostics == full.diagnostics and quick.ok
        assert quick.summary == full.summary == {"roles": len(wf.roles), "edges": wf.graph.number_of_edges(),
                                                 "max_turns": wf.max_turns}
    probe = ("import sys; from masdsl.cli import main; main(['check', 'workflows/coder_tester.mas']); "
             "print(sorted(m for m in ('lark', 'torch', 'vllm', 'ray', 'mlflow') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.splitlines()[-1] == "[]", r.stdout + r.stderr


def test_check_bad_file_exit_2_no_traceback(tmp_path):
    bad = tmp_path / "bad.mas"
    bad.write_text((ERRORS / "many-errors.mas").read_text())
    r = masdsl("check", bad)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr + r.stdout
    assert f"error  {bad}  " in r.stdout
    short = masdsl("check", "--format", "short", bad)
    assert short.returncode == 2 and "Traceback" not in short.stderr
    assert all(":" in line for line in short.stderr.strip().splitlines())


def test_check_syntax_error_long_form(tmp_path):
    f = tmp_path / "w.mas"
    f.write_text("flow {\n  coder tester\n}\n")
    r = masdsl("check", f)
    assert r.returncode == 2
    assert "error[syntax]: missing `->` between two nodes of a flow edge" in r.stderr
    assert f"--> {f}:2:9" in r.stderr and "2 |   coder tester" in r.stderr


def test_check_missing_file_and_mixed_results(tmp_path):
    r = masdsl("check", "workflows/sudoku.mas", tmp_path / "nope.mas")
    assert r.returncode == 2
    assert r.stdout.splitlines()[0].startswith("ok  workflows/sudoku.mas")
    assert "no such file" in r.stderr and "Traceback" not in r.stderr


def test_graph_dot_names_the_roles():
    r = masdsl("graph", "workflows/coder_tester.mas", "--format", "dot")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith('digraph "coder_tester" {')
    assert '"coder&tester" [label="coder & tester"' in r.stdout and '"start" -> "coder&tester"' in r.stdout
    assert "passes(coder.code, tester.tests)" in r.stdout
    assert "// AT-GRPO groups of one episode (K = 4" in r.stdout


def test_graph_ascii_table():
    r = masdsl("graph", "workflows/sudoku.mas")
    assert r.returncode == 0, r.stderr
    assert "planner  2     shared  4           yes" in r.stdout
    assert "shared  smollm2-135m-instruct  tool, planner" in r.stdout


def test_graph_mermaid():
    r = masdsl("graph", "workflows/branch_example.mas", "--format", "mermaid")
    assert r.returncode == 0 and r.stdout.startswith("flowchart TD")
    assert '-->|"coder.ok"|' in r.stdout


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz is installed by scripts/setup.sh")
def test_graph_svg_is_valid(tmp_path):
    out = tmp_path / "g.svg"
    r = masdsl("graph", "workflows/coder_tester.mas", "--format", "svg", "-o", out)
    assert r.returncode == 0, r.stderr
    root = ET.parse(out).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert "coder &amp; tester" in out.read_text() or "coder & tester" in "".join(root.itertext())


def test_graph_svg_without_dot_is_a_clear_error(tmp_path):
    env = {"PATH": str(tmp_path), "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "masdsl.cli", "graph", "workflows/sudoku.mas", "--format", "svg",
                        "-o", str(tmp_path / "g.svg")], cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2 and "Graphviz `dot` is not installed" in r.stderr and "Traceback" not in r.stderr


def test_graph_bad_file_exit_2(tmp_path):
    f = tmp_path / "w.mas"
    f.write_text("flow { a => b }")
    r = masdsl("graph", f)
    assert r.returncode == 2 and "`=>` is not an arrow" in r.stderr and "Traceback" not in r.stderr
