"""Progress in a log file (issue 31): when stderr is a file, `masdsl run` prints one plain line per
phase and per step, each whole and flushed while the run goes on; engines announce their start
with a heartbeat; nothing wraps; other libraries' INFO lines and loading bars stay hidden
unless `-v`.

The real run is a subprocess whose stdout and stderr are files, read while it runs.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from masdsl import cli
from masdsl.commands import output
from masdsl.runtime import heartbeat
from masdsl.training.display import Progress, print_summary
from masdsl.training.loglines import LogLines
from tests.support.overrides import NO_TRACKING
from tests.support.paths import COUNTER_DIR

ROOT = Path(__file__).parents[2]
DATA = COUNTER_DIR
STEP = re.compile(r"^step (\d)/3  elapsed \d:\d\d:\d\d  rollout \d+\.\d s  update \d+\.\d s  .*\d+ tok/s  .*success \d\.\d\d")
NOISE = ("Loading weights", "Writing model shards", "INFO mlflow", "Triton is installed", "\r")


class Flushes(io.StringIO):
    """A file that records what it held at each flush."""

    def __init__(self) -> None:
        super().__init__()
        self.at_flush: list[str] = []

    def flush(self) -> None:
        self.at_flush.append(self.getvalue())


@pytest.fixture(autouse=True)
def _reset_output():
    yield
    output.configure()


def test_log_lines_one_per_phase_and_step_each_flushed_whole():
    f = Flushes()
    show = Progress(output.console(stream=f), steps=3)
    with show.live():
        advance = show.counter("step 1/3: rollout", 4)
        advance(1)
        advance(3)  # all 4 episodes: the phase's line now
        show.status("step 1/3: update")
        show.step(1, {"time/rollout_s": 5.0, "time/update_s": 2.0, "throughput/tokens_per_s": 80.0,
                      "reward/a/turn0/mean": 0.5, "success/train": 0.25, "success/train/a": 0.25, "entropy/p": 1.5})
        show.evaluated(1, {"success/eval": 0.5, "reward/eval": 1.0})
    lines = f.getvalue().splitlines()
    assert [re.sub(r"\d+\.\d s", "T s", line) for line in lines] == [
        "step 1/3: rollout 4/4 episodes in T s",
        "step 1/3: update done in T s",
        "step 1/3  elapsed 0:00:00  rollout T s  update T s  80 tok/s  a/t0 0.50  success 0.25 (a 0.25)  entropy p 1.50",
        "eval at step 1/3  success 0.50  reward 1.00"]
    # every line reached the file with its newline, flushed on its own (rich may flush as well)
    assert sorted({text.count("\n") for text in f.at_flush}) == [1, 2, 3, 4]
    assert all(t.endswith("\n") for t in f.at_flush)


def test_a_long_phase_gets_a_heartbeat_and_a_busy_one_none():
    f = io.StringIO()
    lines = LogLines(output.console(stream=f), every=0.2)
    with lines.live():
        phase = lines.begin("step 2/3: rollout", 8)
        lines.advance(phase, 3)
        time.sleep(1.0)  # silent for 5 heartbeat periods
        beats = f.getvalue().splitlines()
        for _ in range(10):  # a line every 0.05 s: no heartbeat needed
            lines.say("busy")
            time.sleep(0.05)
    assert 2 <= len(beats) <= 6, beats
    assert all(re.fullmatch(r"step 2/3: rollout 3/8 episodes, \d+ s so far", b) for b in beats), beats
    text = f.getvalue().splitlines()
    first, last = text.index("busy"), len(text) - 1 - text[::-1].index("busy")
    assert text[first:last + 1] == ["busy"] * 10  # no heartbeat between lines 0.05 s apart
    assert re.fullmatch(r"step 2/3: rollout 3/8 episodes in \d+\.\d s", text[-1])  # its line at the end


def test_engine_start_says_when_it_begins_while_it_runs_and_when_ready():
    said: list[str] = []
    with heartbeat.starting("engine vllm for /m", "vllm 0.32.0 (cpu)", say=said.append, every=0.2):
        time.sleep(0.9)
    assert said[0] == "engine vllm for /m: starting (vllm 0.32.0 (cpu))"
    beats = said[1:-1]
    assert 2 <= len(beats) <= 5 and all(re.fullmatch(r"engine vllm for /m: still starting \(\d s\)", b) for b in beats)
    assert re.fullmatch(r"engine vllm for /m: ready in \d+\.\d s", said[-1]) and said[-1] != "engine vllm for /m: ready in 0.0 s"
    with pytest.raises(RuntimeError), heartbeat.starting("engine x", say=said.append):
        raise RuntimeError("no")
    assert said[-1] == "engine x: starting"  # a failed start says no "ready"


def test_say_is_flushed_and_quiet_under_q(capsys):
    heartbeat.say("engine hf for m: starting")
    output.configure(quiet=True)
    heartbeat.say("hidden")
    heartbeat.warn("vllm not usable (x); using hf")
    assert capsys.readouterr().err.splitlines() == ["masdsl: engine hf for m: starting",
                                                    "masdsl: vllm not usable (x); using hf"]


def test_a_long_mlflow_ui_command_is_never_broken_in_a_file():
    ui = "mlflow ui --backend-store-uri sqlite:////" + "/".join(["a-rather-long-folder-name"] * 6) + "/mlflow.db"
    result = SimpleNamespace(workflow="w", eval_before={"success/eval": 0.0}, eval_after={"success/eval": 0.5},
                             history=[], evals=[], steps=3, wall_s=1.0, run_dir=Path("/r" * 60), checkpoints=[],
                             mlflow_run_id="abc", ui_command=ui)
    f = io.StringIO()
    console = output.console(stream=f)
    print_summary(console, result)
    console.print("warning: " + "x " * 100, highlight=False)  # a long line: one line too
    text = f.getvalue().splitlines()
    assert len(ui) > 160 and f"dashboard: {ui}" in text, text
    assert any(line.startswith("warning: ") and len(line) > 200 for line in text)
    assert any("/r/r" in line and len(line) > 120 for line in text)  # the run folder's row: one line
    # a terminal keeps its width (a table fits the screen there), and the command still its own line
    tty = _Tty()
    print_summary(output.console(stream=tty), result)
    assert output.console(stream=_Tty()).width != output.WIDE and f"dashboard: {ui}" in tty.getvalue().splitlines()
    quiet = io.StringIO()  # -q keeps the final results
    print_summary(output.console(stream=quiet, warnings_only=True), result)
    assert "masdsl run: w" in quiet.getvalue() and f"dashboard: {ui}" in quiet.getvalue().splitlines()


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_v_is_verbose_and_without_it_libraries_are_quiet(monkeypatch):
    for key in [*output.LIBRARY_ENV, "MASDSL_VERBOSE"]:
        monkeypatch.delenv(key, raising=False)
    bad = ROOT / "tests" / "lang" / "errors" / "many-errors.mas"
    assert cli.main(["check", str(bad)]) == 2
    assert {k: os.environ.get(k) for k in output.LIBRARY_ENV} == output.LIBRARY_ENV
    for key in output.LIBRARY_ENV:
        monkeypatch.delenv(key)
    assert cli.main(["check", str(bad), "-v"]) == 2
    assert os.environ.get("MASDSL_VERBOSE") == "1" and not any(k in os.environ for k in output.LIBRARY_ENV)


def _read_while_running(proc: subprocess.Popen, path: Path, timeout: float = 600) -> list[tuple[bool, str]]:
    """Snapshots of the file (running?, text) every 0.1 s until the process ends, and one after."""
    seen, end = [], time.monotonic() + timeout
    while time.monotonic() < end:
        alive = proc.poll() is None
        seen.append((alive, path.read_text(errors="replace")))
        if not alive:
            return seen
        time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"the run took over {timeout} s:\n{seen[-1][1][-3000:]}")


def test_a_run_into_files_prints_each_step_while_it_runs(tmp_path, tiny_model_dir):
    for f in ("counter.mas", "counterenv.py", "tasks.jsonl"):
        shutil.copy(DATA / f, tmp_path / f)
    env = {k: v for k, v in os.environ.items() if k not in (*output.LIBRARY_ENV, "MASDSL_VERBOSE")}
    env.update(MASDSL_NO_VLLM="1", RAY_AUTH_MODE="disabled")
    out, err = tmp_path / "out.log", tmp_path / "err.log"
    with out.open("w") as o, err.open("w") as e:
        proc = subprocess.Popen([sys.executable, "-m", "masdsl", "run", "counter.mas", f"policy.shared.model={tiny_model_dir}",
                                 "runtime.engine=hf", "train.steps=3", "train.eval_tasks=2", 'sample."*".max_tokens=4'],
                                cwd=tmp_path, env=env, stdout=o, stderr=e)
        seen = _read_while_running(proc, err)
    log = seen[-1][1]
    assert proc.returncode == 0, log[-3000:]
    lines = log.splitlines()
    # each step's line, once, read from the file before the run ended
    for step in (1, 2, 3):
        mine = [line for line in lines if line.startswith(f"step {step}/3  ")]
        assert len(mine) == 1 and STEP.match(mine[0]), (step, mine)
        assert sum(line.startswith(f"step {step}/3: rollout 2/2 episodes in") for line in lines) == 1
    while_running = [text for alive, text in seen if alive]
    assert any(re.search(r"^step 1/3  elapsed .*\n", text, re.M) for text in while_running), log[-3000:]
    # never half a line: a progress line is in the file with its newline or not at all
    for text in while_running:
        tail = text.rpartition("\n")[2]
        assert not tail.startswith(("step ", "eval", "evaluating", "masdsl:")), tail
    assert not any(n in log for n in NOISE), log[-3000:]
    assert "eval at step 0/3  success" in log and "eval at step 3/3  success" in log
    ui = next(line for line in lines if line.startswith("dashboard: "))
    assert re.fullmatch(r"dashboard: mlflow ui --backend-store-uri sqlite:///\S+/mlflow\.db", ui), ui
    assert len(lines) < 80, log  # a rate a log can bear
    assert out.read_text() == ""  # progress is on stderr; stdout holds results only (--json)


def test_eval_into_a_file_says_when_the_engine_starts_and_is_ready(tmp_path, tiny_model_dir):
    for f in ("counter.mas", "counterenv.py", "tasks.jsonl"):
        shutil.copy(DATA / f, tmp_path / f)
    env = {**os.environ, "MASDSL_NO_VLLM": "1"}
    with (tmp_path / "err.log").open("w") as e:
        p = subprocess.run([sys.executable, "-m", "masdsl", "eval", "counter.mas", f"policy.shared.model={tiny_model_dir}",
                            "runtime.engine=hf", "train.eval_tasks=2", 'sample."*".max_tokens=4', NO_TRACKING],
                           cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=e, timeout=600)
    log = (tmp_path / "err.log").read_text()
    assert p.returncode == 0, log[-3000:]
    lines = log.splitlines()
    started = lines.index(f"masdsl: engine hf for {tiny_model_dir}: starting (transformers generate)")
    assert re.fullmatch(rf"masdsl: engine hf for {re.escape(str(tiny_model_dir))}: ready in \d+\.\d s", lines[started + 1])
    assert any(re.fullmatch(r"eval 2/2 episodes in \d+\.\d s", line) for line in lines), log
    assert not any(n in log for n in NOISE), log
