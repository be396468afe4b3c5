"""A run killed with SIGKILL must not leave vLLM's engine processes behind (they hold the model
and CPUs, and a resumed run would start a second set beside them)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("vllm")

CHILD = """
import sys, time
from masdsl.runtime.backends.vllm import VLLMEngine, descendant_pids
engine = VLLMEngine(sys.argv[1], max_model_len=256)
print("PIDS", *descendant_pids(), flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_sigkilled_owner_takes_its_vllm_processes_along(tiny_model_dir):
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(tiny_model_dir)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env={**os.environ, "VLLM_LOGGING_LEVEL": "ERROR"})
    try:
        line = ""
        while not line.startswith("PIDS"):
            line = proc.stdout.readline()
            assert line, "the engine process exited before starting vLLM"
        pids = [int(p) for p in line.split()[1:]]
        engine_pids = [p for p in pids if open(f"/proc/{p}/cmdline", "rb").read().startswith(b"VLLM")]
        assert engine_pids, f"no vLLM engine processes among {pids}"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while any(_alive(p) for p in engine_pids) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not [p for p in engine_pids if _alive(p)], "vLLM processes outlived their SIGKILLed owner"
    finally:
        if proc.poll() is None:
            proc.kill()


DYING = """
import sys
from masdsl.errors import StepFailed
from masdsl.runtime.backends.base import GenRequest
from masdsl.runtime.backends.vllm import VLLMEngine, descendant_pids
engine = VLLMEngine(sys.argv[1], max_model_len=2048)
print("PIDS", *descendant_pids(), flush=True)
try:  # long enough for the test to kill the engine core while this runs
    engine.generate([GenRequest(prompt_ids=[1, 2, 3], n=8, max_tokens=2000, temperature=1.0)] * 8)
    print("NO ERROR", flush=True)
except StepFailed as exc:
    print("STEPFAILED", exc, flush=True)
"""


def test_engine_core_killed_during_generate_raises_instead_of_hanging(tiny_model_dir):
    proc = subprocess.Popen([sys.executable, "-c", DYING, str(tiny_model_dir)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env={**os.environ, "VLLM_LOGGING_LEVEL": "ERROR"})
    try:
        line = ""
        while not line.startswith("PIDS"):
            line = proc.stdout.readline()
            assert line, "the engine process exited before starting vLLM"
        core = [p for p in map(int, line.split()[1:])
                if open(f"/proc/{p}/cmdline", "rb").read().startswith(b"VLLM::EngineCore")]
        assert core
        time.sleep(3)  # generate is running
        os.kill(core[0], signal.SIGKILL)
        out, _ = proc.communicate(timeout=120)  # a hang fails here
        assert out.startswith("STEPFAILED the vLLM engine process died during generate"), out
    finally:
        if proc.poll() is None:
            proc.kill()
