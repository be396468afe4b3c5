"""vLLM's engine processes and the process that owns them: a SIGKILLed owner must not leave
them running (they hold the model and CPUs, and a resumed run would start a second set beside
them), and an engine process that dies must not leave `generate` waiting forever."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time

import pytest

# the engines run in child processes: this one needs only to know vLLM is installed (importing
# it here cost every pytest worker ~5 s at collection)
if importlib.util.find_spec("vllm") is None:
    pytest.skip("vllm is not installed", allow_module_level=True)
psutil = pytest.importorskip("psutil")

# each child builds an engine over the tiny model, prints its vLLM processes' pids, then runs BODY
CHILD = """
import sys, time
from masdsl.errors import StepFailed
from masdsl.runtime.backends.base import GenRequest
from masdsl.runtime.backends.vllm import VLLMEngine, child_pids
engine = VLLMEngine(sys.argv[1], max_model_len=2048, reproducible=sys.argv[2] == "core_in_process")
print("PIDS", *child_pids(), flush=True)
"""

SLEEP = "time.sleep(600)\n"

GENERATE = """
try:  # long enough for the test to kill the engine core while this runs
    engine.generate([GenRequest(prompt_ids=[1, 2, 3], n=8, max_tokens=2000, temperature=1.0)] * 8)
    print("NO ERROR", flush=True)
except StepFailed as exc:
    print("STEPFAILED", exc, flush=True)
"""


def _start(body: str, model_dir, core: str) -> tuple[subprocess.Popen, dict[int, str]]:
    """The child process, and its vLLM processes' {pid: name} once the engine is up; `core`:
    where vLLM's engine core runs (`core_in_process`: `runtime.vllm_reproducible`, the default)."""
    proc = subprocess.Popen([sys.executable, "-c", CHILD + body, str(model_dir), core], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env={**os.environ, "VLLM_LOGGING_LEVEL": "ERROR"})
    line = ""
    while not line.startswith("PIDS"):
        line = proc.stdout.readline()
        assert line, "the engine process exited before starting vLLM"
    names = {p: psutil.Process(p).name() for p in map(int, line.split()[1:]) if psutil.pid_exists(p)}
    engine = {p: n for p, n in names.items() if n.startswith("VLLM")}
    assert engine, f"no vLLM engine processes among {names}"
    return proc, engine


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize("core", ["core_in_process", "core_own_process"])
def test_sigkilled_owner_takes_its_vllm_processes_along(tiny_model_dir, core):
    proc, engine = _start(SLEEP, tiny_model_dir, core)
    try:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while any(_alive(p) for p in engine) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not [p for p in engine if _alive(p)], "vLLM processes outlived their SIGKILLed owner"
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.parametrize("core, victim", [("core_own_process", "VLLM::EngineCor"), ("core_in_process", "VLLM::Worker")])
def test_engine_process_killed_during_generate_raises_instead_of_hanging(tiny_model_dir, core, victim):
    proc, engine = _start(GENERATE, tiny_model_dir, core)
    try:
        (pid,) = [p for p, name in engine.items() if name.startswith(victim)]
        time.sleep(3)  # generate is running
        os.kill(pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=120)  # a hang fails here
        last = out.strip().splitlines()[-1] if out.strip() else ""  # vLLM logs its own ERROR lines on stdout first
        assert last.startswith("STEPFAILED the vLLM engine process died during generate"), out[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
