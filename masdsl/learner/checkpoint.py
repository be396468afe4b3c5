"""Checkpoints: everything needed to continue a run exactly where it stopped.

A checkpoint is a folder `RUN_DIR/checkpoints/step_000012/` holding
- `policies/<name>.pt`   the policy's weights (full state dict, or only its LoRA adapter)
- `optim/<name>.pt`      its AdamW state
- `rng.pt`               python, numpy and torch RNG states
- `state.json`           step, data cursor, workflow name and hash, metrics history, eval results
- `config.yaml`          the resolved configuration
It is written to a hidden temporary folder and renamed into place (atomic on POSIX), so a kill
during a save never leaves a folder `latest()` would pick; `state.json` is written last.

>>> checkpoint_name(12)
'step_000012'
>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> latest(d) is None
True
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

from masdsl.errors import CheckpointError

KEEP = 2  # newest checkpoints kept on disk (older ones are deleted after a successful save)


def checkpoint_name(step: int) -> str:
    return f"step_{step:06d}"


def checkpoints_dir(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / "checkpoints"


def list_complete(run_dir: str | os.PathLike) -> list[Path]:
    """Complete checkpoints of a run, oldest first (a folder counts once its state.json exists)."""
    root = checkpoints_dir(run_dir)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.name.startswith("step_") and (p / "state.json").is_file()]
    return sorted(found, key=lambda p: int(p.name.split("_")[1]))


def latest(run_dir: str | os.PathLike) -> Path | None:
    done = list_complete(run_dir)
    return done[-1] if done else None


@dataclass
class TrainState:
    """The small, JSON-safe part of a checkpoint."""

    step: int  # optimizer steps completed
    cursor: int  # tasks consumed from the train split (see trainer.next_batch)
    workflow: str
    workflow_hash: str
    history: list[dict[str, Any]] = field(default_factory=list)  # per-step metrics
    evals: list[dict[str, Any]] = field(default_factory=list)  # {"step", "success", ...}
    extra: dict[str, Any] = field(default_factory=dict)


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: Mapping[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def save(
    run_dir: str | os.PathLike,
    state: TrainState,
    *,
    policies: Mapping[str, Any],
    optimizers: Mapping[str, Any],
    config_yaml: str,
    keep: int = KEEP,
) -> Path:
    """Write a checkpoint atomically and return its folder; prune all but the newest `keep`."""

    root = checkpoints_dir(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / checkpoint_name(state.step)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=root))
    try:
        (tmp / "policies").mkdir()
        (tmp / "optim").mkdir()
        for name, policy in policies.items():
            if policy.trainable:
                torch.save(policy.state_dict(), tmp / "policies" / f"{name}.pt")
        for name, opt in optimizers.items():
            torch.save(opt.state_dict(), tmp / "optim" / f"{name}.pt")
        torch.save(rng_state(), tmp / "rng.pt")
        (tmp / "config.yaml").write_text(config_yaml)
        (tmp / "state.json").write_text(json.dumps(state.__dict__, indent=1, default=str))
        if final.exists():  # a re-save of the same step (e.g. the end of a resumed run)
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for old in list_complete(run_dir)[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


def read_state(path: str | os.PathLike, workflow_hash: str | None = None) -> TrainState:
    """The JSON part of a checkpoint; refuses one of another workflow (CheckpointError)."""
    path = Path(path)
    try:
        state = TrainState(**json.loads((path / "state.json").read_text()))
    except (OSError, ValueError, TypeError) as exc:
        raise CheckpointError(f"checkpoint `{path}` is incomplete or unreadable: {exc}") from None
    if workflow_hash is not None and state.workflow_hash != workflow_hash:
        raise CheckpointError(
            f"checkpoint `{path}` belongs to workflow `{state.workflow}` with a different source "
            f"(hash {state.workflow_hash[:12]}, this file {workflow_hash[:12]}); "
            "resume with the same .mas file, or start a new run"
        )
    return state


def find(run_dir: str | os.PathLike) -> Path:
    """The newest complete checkpoint of `run_dir` (a run folder or a checkpoint folder)."""
    run_dir = Path(run_dir)
    if (run_dir / "state.json").is_file():
        return run_dir
    if not run_dir.is_dir():
        raise CheckpointError(f"`{run_dir}` is not a run folder")
    path = latest(run_dir)
    if path is None:
        raise CheckpointError(f"run folder `{run_dir}` has no complete checkpoint under checkpoints/")
    return path


def restore(path: str | os.PathLike, *, policies: Mapping[str, Any], optimizers: Mapping[str, Any]) -> None:
    """Load weights, optimizer states and RNG states from a checkpoint folder (in place)."""

    path = Path(path)
    for name, policy in policies.items():
        if not policy.trainable:
            continue
        file = path / "policies" / f"{name}.pt"
        if not file.is_file():
            raise CheckpointError(f"checkpoint `{path}` has no weights for policy `{name}`")
        policy.load_state_dict(torch.load(file, map_location="cpu", weights_only=True))
    for name, opt in optimizers.items():
        file = path / "optim" / f"{name}.pt"
        if not file.is_file():
            raise CheckpointError(f"checkpoint `{path}` has no optimizer state for policy `{name}`")
        opt.load_state_dict(torch.load(file, map_location="cpu", weights_only=True))
    set_rng_state(torch.load(path / "rng.pt", weights_only=False))
