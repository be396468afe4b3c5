"""A SIGKILL during a checkpoint save never leaves a checkpoint that `--resume` would pick and
cannot load: the newest complete checkpoint is always whole, with the weights of its step."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

# The child saves checkpoints step 1, 2, 3, ... forever; every tensor of step s is filled with
# s, so a loaded checkpoint can be checked against its own step number. 24 MB of weights plus
# 48 MB of optimizer state per save: long enough to be killed in the middle.
CHILD = r"""
import sys, torch
from pathlib import Path
from masdsl.training import checkpoint as ckpt

class P:
    trainable = True
    def __init__(self): self.sd = {}
    def state_dict(self): return self.sd
    def load_state_dict(self, sd): self.sd = sd

class O(P):
    pass

run_dir = Path(sys.argv[1])
p, o = P(), O()
import time
step = 0
while True:
    step += 1
    t0 = time.perf_counter()
    p.sd = {"w": torch.full((1_500_000, 4), float(step))}
    o.sd = {"state": {0: {"exp_avg": torch.full((3_000_000, 4), float(step))}}, "param_groups": [{"params": [0]}]}
    state = ckpt.TrainState(step=step, cursor=step * 2, workflow="w", workflow_hash="h")
    ckpt.save(run_dir, state, policies={"shared": p}, optimizers={"shared": o}, config_yaml="x: 1\n")
    print(step, time.perf_counter() - t0, flush=True)
"""


class _P:
    trainable = True

    def __init__(self):
        self.sd = None

    def state_dict(self):
        return self.sd

    def load_state_dict(self, sd):
        self.sd = sd


@pytest.mark.parametrize("fraction", [0.1, 0.5, 0.9])
def test_kill_during_save_leaves_newest_complete_checkpoint_loadable(tmp_path, fraction):
    """Kill at 10 %, 50 % and 90 % of a save's duration (measured on the first save): while
    the weights, the optimizer state, or the last files and the rename are being written."""
    from masdsl.training import checkpoint as ckpt

    run_dir = tmp_path / "run"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(run_dir)], stdout=subprocess.PIPE, text=True)
    try:
        step, duration = child.stdout.readline().split()  # step 1 is complete; step 2 starts now
        assert step == "1"
        time.sleep(fraction * float(duration))
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    path = ckpt.find(run_dir)  # what --resume picks
    state = ckpt.read_state(path)
    p, o = _P(), _P()
    import torch

    ckpt.restore(path, policies={"shared": p}, optimizers={"shared": o})
    assert path.name == ckpt.checkpoint_name(state.step) and state.cursor == 2 * state.step
    assert torch.equal(p.sd["w"], torch.full((1_500_000, 4), float(state.step)))
    assert torch.equal(o.sd["state"][0]["exp_avg"], torch.full((3_000_000, 4), float(state.step)))
    # every folder that counts as complete loads; a half-written save is only a hidden .tmp-*
    for done in ckpt.list_complete(run_dir):
        ckpt.read_state(done)
        assert (done / "policies" / "shared.safetensors").is_file() and (done / "rng.pt").is_file()
