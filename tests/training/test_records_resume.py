"""On `--resume`, the trainer drops the step records written after the checkpoint
(`RunDir.truncate_records`). A run killed while appending records leaves a torn last line;
a run killed while truncating must not lose the records the checkpoint covers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


def _record(step: int, i: int, pad: int = 0) -> str:
    from masdsl.runtime.records import StepRecord

    r = StepRecord(step, i, f"t{i}", "a", 0, "a", 0, True, "p", list(range(pad)), [1, 2], [0.0, 0.0],
                   1.0, 0.0, 1.0, "stop", True)
    return r.to_json() + "\n"


def test_torn_last_line_is_dropped(tmp_path):
    from masdsl.runtime.records import read_records
    from masdsl.runtime.rundir import RunDir

    path = tmp_path / "records.jsonl"
    good = "".join(_record(s, i) for s in range(1, 4) for i in range(2))
    path.write_text(good + _record(4, 0)[:40])  # killed in the middle of appending step 4
    RunDir(tmp_path).truncate_records(2)  # resume from the checkpoint of step 2: it covers the rollouts of steps 1 and 2
    assert [(r.step, r.episode) for r in read_records(path)] == [(1, 0), (1, 1), (2, 0), (2, 1)]


CHILD = """
import sys
from pathlib import Path
from masdsl.runtime.rundir import RunDir
print("go", flush=True)
RunDir(Path(sys.argv[1]).parent).truncate_records(int(sys.argv[2]))
print("done", flush=True)
"""


@pytest.mark.parametrize("fraction", [0.2, 0.6, 0.95])
def test_kill_during_truncation_keeps_the_records(tmp_path, fraction):
    """SIGKILL while truncating a 25 MB records file: afterwards the file holds either all the
    old records or exactly those before the checkpoint, never fewer."""
    from masdsl.runtime.rundir import RunDir

    path = tmp_path / "records.jsonl"
    lines = [_record(s, i, pad=1600) for s in range(10) for i in range(160)]
    path.write_text("".join(lines))
    keep = [line for line in lines if json.loads(line)["step"] <= 8]
    # how long a whole truncation takes here, on a copy
    probe = RunDir(tmp_path / "probe")
    probe.records_path.write_text("".join(lines))
    t0 = time.perf_counter()
    probe.truncate_records(8)
    duration = time.perf_counter() - t0
    assert probe.records_path.read_text() == "".join(keep)

    child = subprocess.Popen([sys.executable, "-c", CHILD, str(path), "8"], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "go"
    time.sleep(fraction * duration)
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=30)
    text = path.read_text()
    assert text == "".join(lines) or text == "".join(keep), f"{len(text.splitlines())} lines left"
