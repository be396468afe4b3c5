"""CLI habits users expect (issue 13 item 7), as a user meets them: a real `masdsl` subprocess.

`--version`; `-h`/`--help` anywhere after a command; `--json` from `check` and `run`; "no such
file" on stderr for every command; every `MASDSL_*` variable documented; `--verbose` reaching
the engines' environment (quiet start-up otherwise); `python -m masdsl`.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from masdsl import cli
from masdsl.runtime.backends.vllm import environment
from tests.support.overrides import NO_TRACKING
from tests.support.paths import COUNTER_DIR

ROOT = Path(__file__).parents[1]
RELIABILITY = COUNTER_DIR
SUDOKU = "workflows/sudoku.mas"


def masdsl(*args, cwd=ROOT, env=None, timeout=300) -> subprocess.CompletedProcess:
    env = {**os.environ, "MASDSL_NO_VLLM": "1", **(env or {})}
    p = subprocess.run([sys.executable, "-m", "masdsl", *map(str, args)], cwd=cwd, capture_output=True, text=True,
                       timeout=timeout, env=env)
    assert "Traceback" not in p.stdout + p.stderr, p.stderr[-3000:]
    return p


def test_version_comes_from_the_package_metadata():
    p = masdsl("--version")
    assert p.returncode == 0
    assert p.stdout.strip() == f"masdsl {importlib.metadata.version('masdsl')}"


def test_python_dash_m_masdsl_is_the_cli():
    p = masdsl("check", SUDOKU)
    assert p.returncode == 0 and p.stdout.startswith("ok  workflows/sudoku.mas  roles=2")
    assert masdsl().stdout.startswith("usage: masdsl")


@pytest.mark.parametrize("args", [("run", SUDOKU, "--help"), ("eval", SUDOKU, "-h"),
                                  ("run", SUDOKU, "train.steps=2", "-h"), ("eval", SUDOKU, "--tasks", "2", "--help"),
                                  ("check", SUDOKU, "--help"), ("graph", SUDOKU, "-h"), ("trace", "runs/x", "--help")])
def test_help_after_the_file_prints_the_commands_help(args):
    p = masdsl(*args)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"usage: masdsl {args[0]} ")
    assert "unknown option" not in p.stderr


def test_global_flags_are_taken_out_of_the_overrides():
    import argparse

    ns = argparse.Namespace(overrides=["a=1", "--verbose", "b=2", "--debug"])
    assert cli.global_flags(ns) is False
    assert ns.overrides == ["a=1", "b=2"] and ns.verbose is True and ns.debug is True
    ns = argparse.Namespace(overrides=["a=1", "-h"])
    assert cli.global_flags(ns) is True and ns.overrides == ["a=1"]


def test_check_json(tmp_path):
    bad = tmp_path / "bad.mas"
    bad.write_text((ROOT / "tests" / "lang" / "errors" / "many-errors.mas").read_text())
    p = masdsl("check", "--json", SUDOKU, bad, tmp_path / "nope.mas")
    assert p.returncode == 2
    doc = json.loads(p.stdout)
    ok, broken, missing = doc["files"]
    assert doc["ok"] is False
    assert ok == {"file": SUDOKU, "ok": True, "error": None, "summary": {"roles": 2, "edges": 4, "max_turns": 3},
                  "diagnostics": [], "config_errors": []}
    assert broken["ok"] is False and broken["error"] is None and len(broken["diagnostics"]) >= 3
    first = next(d for d in broken["diagnostics"] if d["code"] == "unknown-policy")
    assert first["file"] == str(bad) and first["line"] >= 1 and first["col"] >= 1
    assert first["end"]["line"] >= first["line"] and first["hint"] == "did you mean `shared`?"
    assert {"code", "message", "file", "line", "col", "end", "hint", "severity"} <= set(first)
    assert missing == {"file": str(tmp_path / "nope.mas"), "ok": False, "error": "no such file", "summary": None,
                       "diagnostics": [], "config_errors": []}
    clean = masdsl("check", "--json", SUDOKU)
    assert clean.returncode == 0 and json.loads(clean.stdout)["ok"] is True


@pytest.mark.parametrize("args", [("check", "nope.mas"), ("graph", "nope.mas"), ("run", "nope.mas"),
                                  ("eval", "nope.mas"), ("trace", "runs/nope"),
                                  ("run", SUDOKU, "--resume", "runs/nope"), ("run", SUDOKU, "--config", "nope.yaml"),
                                  ("graph", SUDOKU, "-o", "no/such/dir/g.txt")])
def test_no_such_file_goes_to_stderr(args, tmp_path):
    shutil.copytree(ROOT / "workflows", tmp_path / "workflows")
    p = masdsl(*args, cwd=tmp_path)
    assert p.returncode == 2
    assert p.stdout == ""
    assert re.search(r"no such (file|run folder)|does not exist|cannot write: No such file", p.stderr), p.stderr


def test_run_json_summary(tmp_path, tiny_model_dir):
    for f in ("counter.mas", "counterenv.py", "tasks.jsonl"):
        shutil.copy(RELIABILITY / f, tmp_path / f)
    p = masdsl("run", "counter.mas", f"policy.shared.model={tiny_model_dir}", "train.steps=1", "train.batch=1",
               "train.eval_tasks=1", NO_TRACKING, "runtime.engine=hf", "--json", cwd=tmp_path, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    summary = json.loads(p.stdout)
    run_dir = Path(summary.pop("run_dir"))
    assert summary == json.loads((tmp_path / run_dir / "summary.json").read_text())
    assert summary["steps"] == 1 and summary["workflow"] == "rel_counter"


def documented_env_vars() -> set[str]:
    return set(re.findall(r"MASDSL_[A-Z0-9_]+", (ROOT / "docs" / "cli.md").read_text()))


def test_every_masdsl_env_var_is_documented():
    used = set()
    for path in list((ROOT / "masdsl").rglob("*.py")) + [ROOT / "scripts" / "setup.sh", ROOT / "Makefile"]:
        text = path.read_text(encoding="utf-8")
        used |= set(re.findall(r"""(?:environ(?:\.get|\.pop|\.setdefault)?\(|environ\[|getenv\()\s*["'](MASDSL_[A-Z0-9_]+)""", text))
        used |= set(re.findall(r"\$\{?(MASDSL_[A-Z0-9_]+)", text))
        used |= set(re.findall(r"""^[A-Z_]*ENV\s*=\s*["'](MASDSL_[A-Z0-9_]+)""", text, re.M))
    used.discard("MASDSL_DOC_X")  # a doctest's own variable
    assert {"MASDSL_CACHE", "MASDSL_NO_VLLM", "MASDSL_VERBOSE", "MASDSL_VENV"} <= used
    missing = used - documented_env_vars()
    assert not missing, f"MASDSL_* variables not in docs/cli.md: {sorted(missing)}"


def test_verbose_flag_reaches_the_engines(monkeypatch, tmp_path):
    monkeypatch.delenv("MASDSL_VERBOSE", raising=False)
    assert cli.main(["check", str(ROOT / SUDOKU)]) == 0 and not environment.verbose()
    assert cli.main(["--verbose", "check", str(ROOT / SUDOKU)]) == 0
    assert os.environ["MASDSL_VERBOSE"] == "1" and environment.verbose()
    for key in environment.LOGGING_DEFAULTS:
        monkeypatch.delenv(key, raising=False)
    with environment.vllm_environment(environment.engine_env_defaults(gpu=True)) as applied:
        assert applied == {"VLLM_LOGGING_LEVEL": "INFO"}
    monkeypatch.setenv("MASDSL_VERBOSE", "0")
    with environment.vllm_environment(environment.engine_env_defaults(gpu=True)) as applied:
        assert applied["VLLM_LOGGING_LEVEL"] == "ERROR" and applied["TORCH_CPP_LOG_LEVEL"] == "ERROR"


WARN = "import warnings; warnings.warn('reduce_op is deprecated', FutureWarning); print('up')"


def test_quiet_engine_processes_drop_start_up_warnings(monkeypatch):
    """A process started while an engine is built (as vLLM's are) prints no FutureWarning unless
    verbose; outside, and with MASDSL_VERBOSE, it does."""
    monkeypatch.delenv("PYTHONWARNINGS", raising=False)

    def child() -> str:
        return subprocess.run([sys.executable, "-c", WARN], capture_output=True, text=True, timeout=60).stderr

    monkeypatch.delenv("MASDSL_VERBOSE", raising=False)
    assert "FutureWarning" in child()
    with environment.vllm_environment(environment.engine_env_defaults(gpu=True)):
        assert child() == ""
    monkeypatch.setenv("MASDSL_VERBOSE", "1")
    with environment.vllm_environment(environment.engine_env_defaults(gpu=True)):
        assert "FutureWarning" in child()


ENGINE = """
from masdsl.runtime.backends.vllm import VLLMEngine
if __name__ == "__main__":
    VLLMEngine({model!r}, seed=0, max_model_len=256).close()
    print("engine closed")
"""


@pytest.mark.vllm
@pytest.mark.slow
def test_vllm_start_up_is_quiet_unless_verbose(tmp_path, tiny_model_dir):
    """A fresh vLLM engine used to print about 20 lines (vLLM warnings, Triton, NUMA, a loading
    bar); now none. The Triton notice of vLLM's two engine processes (logged at their import of
    vllm) goes too: a spawned process re-imports this script, hence `masdsl`, first
    (`MASDSL_QUIET_ENGINE`, masdsl/__init__.py)."""
    pytest.importorskip("vllm")
    script = tmp_path / "start.py"
    script.write_text(ENGINE.format(model=str(tiny_model_dir)))
    env = {k: v for k, v in os.environ.items() if k not in ("MASDSL_VERBOSE", "VLLM_LOGGING_LEVEL")}
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=900, env=env)
    assert p.returncode == 0 and "engine closed" in p.stdout, p.stderr[-3000:]
    out = p.stdout + p.stderr
    for chatter in ("WARNING", "NUMA", "Loading safetensors", "FutureWarning", "LD_PRELOAD", "Triton"):
        assert chatter not in out, out
    # at interpreter exit Python's resource tracker may report vLLM's own shared-memory message
    # queue (not masdsl's: it creates none here) as leaked; that is shutdown, not start-up, chatter
    exit_notes = ("resource_tracker", "warnings.warn('resource_tracker")
    chatty = [line for line in out.splitlines() if line.strip() and line != "engine closed"
              and not any(n in line for n in exit_notes)]
    assert chatty == [], out
