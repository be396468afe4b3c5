"""`masdsl trace` on a training run's evaluations and its refusals (issue 22), and `masdsl fmt`'s
modes: stdin to stdout, `--diff`, a folder, `--check`.

The run folders are built by hand: `records.jsonl` holds the training rollouts (steps 0, 1) and
`eval/step_N.jsonl` the evaluations after N steps, as `masdsl run` writes them
(`masdsl.runtime.rundir`, `masdsl.training.evaluation.evaluate`).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from masdsl.cli import main
from masdsl.runtime.records import StepRecord, write_records

ROOT = Path(__file__).parents[1]
UGLY = "env  code ;flow{start->end}"
TIDY = "env code\nflow {\n  start -> end\n}\n"


def rec(step: int, task: str, role: str, text: str, candidate: int = 0) -> StepRecord:
    return StepRecord(step, 0, task, role, 0, role, candidate, candidate == 0, "shared", [1, 2], [3], [-0.5], 1.0, 1.0,
                      0.0, "stop", True, {"answer": text}, prompt_text=f"prompt of {role}", response_text=text,
                      episode_success=1.0, episode_reward=1.0)


def training_run(tmp_path: Path, evals: bool = True) -> Path:
    run = tmp_path / "runs" / "toy" / "20260101-000000"
    (run / "eval").mkdir(parents=True)
    write_records(run / "records.jsonl", [rec(s, f"t{s}", role, f"train {s} {role} {k}", k)
                                          for s in (0, 1) for role in ("coder", "tester") for k in (0, 1)])
    if evals:
        for s in (0, 2):
            write_records(run / "eval" / f"step_{s:06d}.jsonl",
                          [rec(s, "e0", role, f"eval {s} {role}") for role in ("coder", "tester")])
    return run


def test_step_minus_one_reads_the_evaluation_files(tmp_path, capsys):
    run = training_run(tmp_path)
    assert main(["trace", str(run), "--step", "-1"]) == 0
    out = capsys.readouterr().out
    assert "eval at step 0" in out and "eval at step 2" in out
    assert "eval 0 coder" in out and "eval 2 tester" in out and "train" not in out
    assert main(["trace", str(run), "--step", "-1", "--role", "tester", "--no-prompt"]) == 0
    out = capsys.readouterr().out
    assert "eval 2 tester" in out and "── coder" not in out and "prompt of" not in out
    assert main(["trace", str(run.parent), "--step", "1"]) == 0  # runs/<workflow>: the newest run
    out = capsys.readouterr().out
    assert "step 1" in out and "train 1 coder 1" in out and "train 0" not in out and "eval" not in out
    assert main(["trace", str(run)]) == 0  # no --step: the rollouts of records.jsonl
    out = capsys.readouterr().out
    assert "train 0 coder 0" in out and "train 1 tester 1" in out and "eval at" not in out


def test_an_eval_runs_own_records_are_its_evaluation(tmp_path, capsys):
    run = tmp_path / "evalrun"
    run.mkdir()
    write_records(run / "records.jsonl", [rec(-1, "e0", "coder", "only eval")])
    assert main(["trace", str(run), "--step", "-1"]) == 0
    out = capsys.readouterr().out
    assert "only eval" in out and "· eval ·" in out
    assert main(["trace", str(run), "--step", "0"]) == 2
    assert "no step 0" in capsys.readouterr().err


def test_misspelled_role_and_unknown_step_are_refused_with_a_hint(tmp_path, capsys):
    run = training_run(tmp_path)
    assert main(["trace", str(run), "--role", "codr"]) == 2
    err = capsys.readouterr().err
    assert "no role `codr`" in err and "did you mean `coder`?" in err and "roles: coder, tester" in err
    assert main(["trace", str(run), "--step", "-1", "--role", "testr"]) == 2
    assert "did you mean `tester`?" in capsys.readouterr().err
    assert main(["trace", str(run), "--step", "7"]) == 2
    err = capsys.readouterr().err
    assert "no step 7" in err and "steps: 0, 1, -1 (evaluation)" in err
    assert main(["trace", str(run), "--step", "10"]) == 2
    assert "did you mean 1?" in capsys.readouterr().err
    assert main(["trace", str(run), "--task", "t9"]) == 2
    assert "no task `t9`" in capsys.readouterr().err
    bare = training_run(tmp_path / "bare", evals=False)
    assert main(["trace", str(bare), "--step", "-1"]) == 2
    assert "no evaluation records" in capsys.readouterr().err


def fmt(*args, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "masdsl", "fmt", *map(str, args)], input=stdin, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_fmt_stdin_to_stdout():
    p = fmt("-", stdin=UGLY)
    assert p.returncode == 0 and p.stdout == TIDY and p.stderr == ""
    assert fmt("-", stdin=TIDY).stdout == TIDY
    check = fmt("--check", "-", stdin=UGLY)
    assert check.returncode == 1 and check.stdout == "would reformat  <stdin>\n"
    assert fmt("--check", "-", stdin=TIDY).returncode == 0
    broken = fmt("-", stdin="flow { a => b }")
    assert broken.returncode == 2 and broken.stdout == "" and "<stdin>" in broken.stderr


def test_fmt_diff_prints_a_unified_diff_and_writes_nothing(tmp_path):
    ugly, tidy = tmp_path / "ugly.mas", tmp_path / "tidy.mas"
    ugly.write_text(UGLY)
    tidy.write_text(TIDY)
    p = fmt("--diff", ugly, tidy)
    assert p.returncode == 0
    assert p.stdout.startswith(f"--- {ugly}\n+++ {ugly} (formatted)\n@@ ")
    assert "-env  code ;flow{start->end}\n" in p.stdout and "+  start -> end\n" in p.stdout
    assert str(tidy) not in p.stdout
    assert ugly.read_text() == UGLY
    assert fmt("--diff", "--check", ugly).returncode == 1
    assert fmt("--diff", "-", stdin=UGLY).stdout.startswith("--- <stdin>\n")


def test_fmt_walks_a_folder(tmp_path):
    for rel in ("a.mas", "sub/b.mas", "sub/deeper/c.mas", ".git/skip.mas", "notes.txt"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(UGLY)
    check = fmt("--check", tmp_path)
    assert check.returncode == 1
    assert check.stdout.splitlines() == [f"would reformat  {tmp_path / r}" for r in ("a.mas", "sub/b.mas",
                                                                                     "sub/deeper/c.mas")]
    assert "3 files would be reformatted" in check.stderr
    p = fmt(tmp_path)
    assert p.returncode == 0 and len(p.stdout.splitlines()) == 3
    assert (tmp_path / "sub/deeper/c.mas").read_text() == TIDY
    assert (tmp_path / ".git/skip.mas").read_text() == UGLY and (tmp_path / "notes.txt").read_text() == UGLY
    assert fmt("--check", tmp_path).returncode == 0
    empty = tmp_path / "empty"
    empty.mkdir()
    assert fmt(empty).returncode == 0


@pytest.mark.parametrize("args", [("nope.mas",), ("-", "-")])
def test_fmt_mistakes_exit_2(args):
    p = fmt(*args, stdin="")
    assert p.returncode == 2 and "Traceback" not in p.stderr
