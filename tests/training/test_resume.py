"""`masdsl run` SIGKILLed after its first checkpoint, then `--resume`d, ends with exactly the
weights, optimizer state and step records of an uninterrupted run with the same seed (CPU,
tiny model). A checkpoint of another workflow is refused with a clear message."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.support.overrides import NO_TRACKING
from tests.support.paths import COUNTER_DIR

DATA = COUNTER_DIR
TIMING = ("gen_s", "env_s")  # wall-clock fields of a record: the only ones allowed to differ


def _cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "masdsl.cli", "run", *args]


def _env() -> dict:
    return {**os.environ, "MASDSL_NO_VLLM": "1", "RAY_AUTH_MODE": "disabled"}


def _run_dir(cwd: Path) -> Path | None:
    found = sorted(cwd.glob("runs/rel_lengths/*/"))
    return found[0] if found else None


def _records(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]


def _final(run_dir: Path, step: int) -> dict:
    import torch

    from masdsl.training.checkpoint import policy_weights

    ck = run_dir / "checkpoints" / f"step_{step:06d}"
    return {"weights": policy_weights(ck, "shared"),
            "optim": torch.load(ck / "optim" / "shared.pt", weights_only=True),
            "state": json.loads((ck / "state.json").read_text())}


@pytest.mark.slow
def test_sigkill_after_checkpoint_then_resume_equals_uninterrupted_run(tmp_path, tiny_model_dir):
    # long: one scenario end to end (a run SIGKILLed after a checkpoint, resumed, and an uninterrupted run, compared)
    import torch

    steps = 3
    args = [str(DATA / "lengths.mas"), "runtime.engine=hf", f"policy.shared.model={tiny_model_dir}",
            NO_TRACKING, f"train.steps={steps}", "train.checkpoint_every=1", "train.seed=7"]
    full, killed = tmp_path / "full", tmp_path / "killed"
    full.mkdir(), killed.mkdir()

    # the uninterrupted run, and beside it the interrupted one: SIGKILLed as soon as its first
    # checkpoint is complete
    logs = {name: (tmp_path / f"{name}.log").open("w") for name in ("full", "killed")}
    reference = subprocess.Popen(_cmd(*args), cwd=full, env=_env(), stdout=logs["full"], stderr=subprocess.STDOUT)
    proc = subprocess.Popen(_cmd(*args), cwd=killed, env=_env(), stdout=logs["killed"], stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None:
            rd = _run_dir(killed)
            if rd is not None and (rd / "checkpoints" / "step_000001" / "state.json").is_file():
                os.kill(proc.pid, signal.SIGKILL)
                break
            time.sleep(0.02)
        proc.wait(timeout=60)
        reference.wait(timeout=600)
    finally:
        for p in (proc, reference):
            if p.poll() is None:
                p.kill()
        for f in logs.values():
            f.close()
    assert proc.returncode == -signal.SIGKILL, (tmp_path / "killed.log").read_text()[-3000:]
    assert reference.returncode == 0, (tmp_path / "full.log").read_text()[-3000:]
    run_dir = _run_dir(killed)
    assert not (run_dir / "checkpoints" / f"step_{steps:06d}").exists()  # it really was cut short

    # resume: picks the newest complete checkpoint, drops the records written after it
    p = subprocess.run(_cmd(str(DATA / "lengths.mas"), "--resume", str(run_dir)), cwd=killed, env=_env(),
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "resumed from" in p.stderr

    a, b = _final(_run_dir(full), steps), _final(run_dir, steps)
    assert a["weights"].keys() == b["weights"].keys()
    assert all(torch.equal(a["weights"][k], b["weights"][k]) for k in a["weights"])
    assert all(torch.equal(x, y) for k in a["optim"]["state"]
               for x, y in zip(a["optim"]["state"][k].values(), b["optim"]["state"][k].values())
               if isinstance(x, torch.Tensor))
    assert (a["state"]["step"], a["state"]["cursor"]) == (b["state"]["step"], b["state"]["cursor"]) == (steps, steps * 2)
    ra, rb = _records(_run_dir(full)), _records(run_dir)
    assert len(ra) == len(rb) > 0 and ra == rb
    assert sorted({r["step"] for r in rb}) == list(range(1, steps + 1))
    # and training changed the weights at all (the comparison is not between two no-ops)
    from safetensors.torch import load_file

    (st,) = Path(tiny_model_dir).glob("*.safetensors")
    init = load_file(st)
    assert any(not torch.equal(init[k], a["weights"][k]) for k in init if k in a["weights"])

    # a checkpoint from another workflow is refused before anything loads
    p = subprocess.run(_cmd(str(DATA / "counter.mas"), "--resume", str(run_dir)), cwd=killed, env=_env(),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "was trained on workflow `rel_lengths`" in p.stderr and "the workflow's name changed" in p.stderr
