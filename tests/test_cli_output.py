"""CLI habits of issue 22: `NO_COLOR` and `--color`, `-q`/`--quiet`, shell completion, `masdsl env`.

Colour is decided in one place (`masdsl.commands.output`); these tests drive it through the
CLI (`masdsl.cli.main`, and a real subprocess where a pipe matters).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from masdsl import cli
from masdsl.commands import output
from masdsl.models import names as model_names
from tests.support.overrides import NO_TRACKING
from tests.support.paths import ADDER_DIR, COUNTER_DIR

ROOT = Path(__file__).parents[1]
BAD = ROOT / "tests" / "lang" / "errors" / "many-errors.mas"
TOY = ADDER_DIR
ANSI = "\x1b["


class Tty(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def _reset_output(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("MASDSL_VERBOSE", raising=False)
    yield
    output.configure()


def check_stderr(monkeypatch, *flags: str, tty: bool = True) -> str:
    """`masdsl [flags] check BAD` in this process, stderr a (fake) terminal or a pipe."""
    err = Tty() if tty else io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    assert cli.main([*flags, "check", str(BAD)]) == 2
    return err.getvalue()


@pytest.mark.parametrize("flags, no_color, tty, coloured", [
    ((), "", True, True),                      # auto on a terminal: colour
    ((), "1", True, False),                    # NO_COLOR (any non-empty value) turns it off
    ((), "0", True, False),                    # ... even "0"
    ((), "", False, False),                    # auto into a pipe: none
    (("--color=never",), "", True, False),
    (("--color", "always"), "", False, True),  # always: even into a pipe
    (("--color=always",), "1", False, True),   # and over NO_COLOR
    (("--color=auto",), "yes", True, False),
])
def test_no_color_and_color_flag(monkeypatch, flags, no_color, tty, coloured):
    if no_color:
        monkeypatch.setenv("NO_COLOR", no_color)
    text = check_stderr(monkeypatch, *flags, tty=tty)
    assert "error[" in text
    assert (ANSI in text) is coloured, text[:400]


def test_color_after_the_command_and_among_overrides():
    ns = argparse.Namespace(overrides=["a=1", "--color", "never", "-q", "b=2", "--color=always"])
    assert cli.global_flags(ns) is False
    assert ns.overrides == ["a=1", "b=2"] and ns.color == "always" and ns.quiet is True
    assert cli.main(["check", str(BAD), "--color=never"]) == 2 and output.color_mode() == "never"
    assert cli.main(["eval", "x.mas", "--color=purple"]) == 2


def test_rich_consoles_follow_the_colour_mode(monkeypatch):
    output.configure("always")
    assert output.console(stderr=False).color_system is not None and output.console().is_terminal
    output.configure("never")
    monkeypatch.setattr(sys, "stdout", Tty())
    assert output.console(stderr=False).color_system is None
    output.configure("auto")
    assert output.console(stderr=False).color_system is not None  # a terminal, no NO_COLOR
    monkeypatch.setenv("NO_COLOR", "1")
    assert output.console(stderr=False).color_system is None


def test_color_always_reaches_a_pipe_in_a_real_process():
    env = {**os.environ, "NO_COLOR": "1"}
    run = lambda *a: subprocess.run([sys.executable, "-m", "masdsl", *a], capture_output=True, text=True,  # noqa: E731
                                    env=env, cwd=ROOT, timeout=120)
    plain, forced = run("check", str(BAD)), run("--color=always", "check", str(BAD))
    assert plain.returncode == forced.returncode == 2
    assert ANSI not in plain.stderr and ANSI in forced.stderr


def _toy_eval(tmp_path, *flags):
    return cli.main([*flags, "eval", str(TOY / "toy.mas"), "runtime.engine=replay",
                     f"runtime.replay_file={TOY / 'toy_replay.jsonl'}", f"runtime.runs_dir={tmp_path}",
                     NO_TRACKING])


def test_quiet_leaves_out_progress_but_not_results(tmp_path, capsys):
    assert _toy_eval(tmp_path) == 0
    loud = capsys.readouterr()
    assert "loading models" in loud.err and "episodes" in loud.err and "success rate" in loud.out
    assert _toy_eval(tmp_path, "-q") == 0
    quiet = capsys.readouterr()
    assert "success rate" in quiet.out
    assert "loading models" not in quiet.err and "episodes" not in quiet.err and "sandbox" not in quiet.err
    assert cli.main(["eval", str(TOY / "toy.mas"), "--quiet", "train.sampels=3"]) == 2  # errors still show
    assert "did you mean `train.samples`" in capsys.readouterr().err


def test_quiet_with_verbose_is_refused(capsys, monkeypatch):
    monkeypatch.setenv("MASDSL_VERBOSE", "0")  # restored after the test, whatever main() sets
    assert cli.main(["--quiet", "--verbose", "check", str(BAD)]) == 2
    assert "--quiet and --verbose" in capsys.readouterr().err


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts_know_every_command(shell, capsys):
    assert cli.main(["completion", shell]) == 0
    script = capsys.readouterr().out
    assert "masdsl" in script
    for name in cli.COMMANDS:
        assert name in script, (shell, name)
    for flag in ("--step", "--checkpoint", "--color", "--quiet", "--diff"):
        assert flag.lstrip("-") in script, (shell, flag)
    assert "*.mas" in script  # workflows complete as .mas files


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_bash_completion_completes(tmp_path, capsys):
    assert cli.main(["completion", "bash"]) == 0
    (tmp_path / "masdsl.bash").write_text(capsys.readouterr().out)
    probe = ("source masdsl.bash; complete_for() { COMP_WORDS=(\"$@\"); COMP_CWORD=$(($# - 1)); "
             "_shtab_masdsl masdsl \"${@: -1}\" \"${@: -2:1}\"; echo \"${COMPREPLY[*]}\"; }; "
             "complete_for masdsl ''; complete_for masdsl trace --st; complete_for masdsl --color ''")
    out = subprocess.run(["bash", "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    commands, step, colors = out.stdout.splitlines()
    assert commands.split() == list(cli.COMMANDS)
    assert step == "--step" and colors.split() == ["auto", "always", "never"]


def test_env_reports_versions_devices_sandbox_and_cache(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MASDSL_CACHE", str(tmp_path))
    first = next(iter(model_names.BUILTINS))
    folder = tmp_path / "models" / first
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"")
    assert cli.main(["env", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["masdsl"] == importlib.metadata.version("masdsl")
    assert doc["python"].startswith(".".join(map(str, sys.version_info[:2])))
    for name in ("torch", "transformers", "vllm", "ray", "mlflow"):
        assert doc[name]  # a version, or "not installed"
    assert doc["torch"] == importlib.metadata.version("torch")
    assert doc["cpus"].split()[0].isdigit() and isinstance(doc["gpus"], list)
    assert doc["sandbox"].split()[0] in ("bwrap", "unshare", "none")
    assert doc["cache"] == str(tmp_path)
    assert set(doc["builtin_models"]) == set(model_names.BUILTINS)  # however many built-ins there are
    assert doc["builtin_models"][first] == str(folder)
    assert all(v is None for k, v in doc["builtin_models"].items() if k != first)
    assert cli.main(["env"]) == 0
    text = capsys.readouterr().out
    for field in ("masdsl", "python", "torch", "transformers", "vllm", "ray", "mlflow", "cpus", "gpus", "sandbox",
                  "cache", "builtin models"):
        assert any(line.split("  ")[0].strip() == field for line in text.splitlines()), (field, text)
    assert f"{first}: {folder}" in text


def test_env_imports_nothing_heavy():
    probe = ("import sys; from masdsl.cli import main; main(['env']); "
             "print(sorted(m for m in ('torch', 'transformers', 'vllm', 'ray', 'mlflow') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.splitlines()[-1] == "[]", r.stdout + r.stderr


def test_quiet_run_prints_only_the_final_table(tmp_path, tiny_model_dir):
    data = COUNTER_DIR
    for f in ("counter.mas", "counterenv.py", "tasks.jsonl"):
        shutil.copy(data / f, tmp_path / f)
    p = subprocess.run([sys.executable, "-m", "masdsl", "run", "counter.mas", f"policy.shared.model={tiny_model_dir}",
                        "train.steps=1", "train.batch=1", "train.eval_tasks=1", NO_TRACKING,
                        "runtime.engine=hf", "-q", "--json"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=600, env={**os.environ, "MASDSL_NO_VLLM": "1"})
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads(p.stdout)["steps"] == 1
    assert "masdsl run: rel_counter" in p.stderr and "run folder" in p.stderr  # the table's row
    assert not any(line.startswith(("run folder ", "step 1/1", "placement")) for line in p.stderr.splitlines()), p.stderr
