"""A closed vLLM engine leaves no shared memory behind: vLLM's engine core creates its executor's
broadcast queue as a POSIX segment (`/dev/shm/psm_*`) and does not unlink it when the core is
stopped, so the process that owned the engine ended (Ctrl-C included: `masdsl run` closes its
engines on the way out) with `resource_tracker: There appear to be 1 leaked shared_memory
objects`. `VLLMEngine.close` removes the segments its processes mapped."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

if importlib.util.find_spec("vllm") is None:  # the engine runs in a child process (see test_vllm_orphans.py)
    pytest.skip("vllm is not installed", allow_module_level=True)

# builds an engine over the tiny model, says which segments its processes map, is interrupted
# (KeyboardInterrupt, as Ctrl-C in `masdsl run`), closes the engine on the way out
CHILD = """
import sys
from masdsl.runtime.backends.vllm import VLLMEngine, child_pids
from masdsl.runtime.backends.vllm.supervision import shared_segments
engine = VLLMEngine(sys.argv[1], max_model_len=512)
print("SEGMENTS", *sorted(shared_segments(child_pids())), flush=True)
try:
    raise KeyboardInterrupt
except KeyboardInterrupt:
    engine.close()
print("CLOSED", flush=True)
"""


def test_a_closed_engine_leaves_no_shared_memory(tiny_model_dir):
    p = subprocess.run([sys.executable, "-c", CHILD, str(tiny_model_dir)], capture_output=True, text=True,
                       timeout=540, env={**os.environ, "VLLM_LOGGING_LEVEL": "ERROR"})
    assert p.returncode == 0 and "CLOSED" in p.stdout, p.stderr[-3000:]
    (line,) = [x for x in p.stdout.splitlines() if x.startswith("SEGMENTS")]
    segments = line.split()[1:]
    assert segments, "vLLM's processes mapped no shared memory: nothing was tested"
    assert not [s for s in segments if (Path("/dev/shm") / s).exists()], segments
    assert "leaked shared_memory" not in p.stderr, p.stderr[-3000:]
