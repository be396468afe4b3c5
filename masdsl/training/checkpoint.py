"""Checkpoints: everything needed to continue a run exactly where it stopped.

A checkpoint is a folder `RUN_DIR/checkpoints/step_000012/` holding
- `policies/<name>.safetensors`   the policy's weights (full state dict, or only its LoRA
  adapter); tensors sharing memory (SmolLM2's tied embedding and LM head) are stored once, the
  other names listed in the file's metadata (`save_weights`, `load_weights`). Checkpoints of
  earlier versions hold `policies/<name>.pt` (a torch file); they still load.
- `optim/<name>.pt`      its AdamW state
- `rng.pt`               python, numpy and torch RNG states
- `state.json`           step, data cursor, workflow name, text hash and fingerprint (what it
  means, `masdsl.lang.fingerprint`), metrics history, eval results
- `config.yaml`          the run plan's record (`RunPlan.record`: the resolved configuration)
It is written to a hidden temporary folder and renamed into place (atomic on POSIX), so a kill
during a save never leaves a folder `latest()` would pick; `state.json` is written last. What
reads a folder without torch (where it is, its state, its configuration, its trained policies)
is `masdsl.training.checkpoint_folder`.

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
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from masdsl.errors import CheckpointError
# the folder's torch-free half, also `checkpoint.<name>` (the commands' light halves import it alone)
from masdsl.training.checkpoint_folder import (WEIGHTS, TrainState, checkpoint_name, checkpoints_dir, find,  # noqa: F401
                                               latest, list_complete, read_state, trained_policies)

KEEP = 2  # newest checkpoints kept on disk (older ones are deleted after a successful save)
_ALIASES = "masdsl_aliases"  # metadata key: {name: name of the stored tensor it shares memory with}


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
                save_weights(policy.state_dict(), tmp / "policies" / f"{name}{WEIGHTS}")
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


def restore(path: str | os.PathLike, *, policies: Mapping[str, Any], optimizers: Mapping[str, Any]) -> None:
    """Load weights, optimizer states and RNG states from a checkpoint folder (in place)."""

    path = Path(path)
    for name, policy in policies.items():
        if policy.trainable:
            policy.load_state_dict(policy_weights(path, name))
    for name, opt in optimizers.items():
        file = path / "optim" / f"{name}.pt"
        if not file.is_file():
            raise CheckpointError(f"checkpoint `{path}` has no optimizer state for policy `{name}`")
        opt.load_state_dict(torch.load(file, map_location="cpu", weights_only=True))
    set_rng_state(torch.load(path / "rng.pt", weights_only=False))


def save_weights(state: Mapping[str, torch.Tensor], file: str | os.PathLike) -> None:
    """Write a state dict as safetensors. Tensors that are the same view of one storage (tied
    weights) are stored once and the other names recorded in the metadata; safetensors refuses
    shared memory. Any other overlap is copied.

    >>> import tempfile, pathlib
    >>> w = torch.arange(6.0).reshape(2, 3)
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "w.safetensors"
    >>> save_weights({"embed": w, "head": w, "bias": torch.zeros(2)}, f)
    >>> back = load_weights(f)
    >>> sorted(back), torch.equal(back["head"], w), back["head"] is back["embed"]
    (['bias', 'embed', 'head'], True, True)
    """
    stored: dict[str, torch.Tensor] = {}
    aliases: dict[str, str] = {}
    views: dict[tuple, str] = {}  # (storage, offset, shape, stride, dtype) -> stored name
    storages: set[int] = set()
    for name, t in state.items():
        t = t.detach()
        ptr = t.untyped_storage().data_ptr() if t.numel() else 0
        view = (ptr, t.storage_offset(), tuple(t.shape), t.stride(), t.dtype)
        if ptr and view in views:
            aliases[name] = views[view]
            continue
        if ptr and ptr in storages:  # another view of a stored tensor's memory: keep a copy
            t = t.clone()
        views[view] = name
        storages.add(ptr)
        stored[name] = t.contiguous().cpu()
    save_file(stored, str(file), metadata={"format": "pt", _ALIASES: json.dumps(aliases)})


def load_weights(file: str | os.PathLike) -> dict[str, torch.Tensor]:
    """A state dict written by `save_weights` (tied names point at one tensor again)."""
    try:
        state = load_file(str(file), device="cpu")
        with safe_open(str(file), "pt") as f:
            meta = f.metadata() or {}
    except (OSError, ValueError, SafetensorError) as exc:
        raise CheckpointError(f"weights file `{file}` is unreadable: {exc}") from None
    for name, stored in json.loads(meta.get(_ALIASES, "{}")).items():
        state[name] = state[stored]
    return state


def policy_weights(path: str | os.PathLike, name: str) -> dict[str, torch.Tensor]:
    """Policy `name`'s weights (or LoRA adapter) in the checkpoint folder `path`; a checkpoint of
    an earlier version (`policies/<name>.pt`) loads too."""
    folder = Path(path) / "policies"
    if (folder / f"{name}{WEIGHTS}").is_file():
        return load_weights(folder / f"{name}{WEIGHTS}")
    if (folder / f"{name}.pt").is_file():
        try:
            return torch.load(folder / f"{name}.pt", map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001 - torch raises many types for a bad file
            raise CheckpointError(f"weights file `{folder / name}.pt` is unreadable: {exc}") from None
    raise CheckpointError(f"checkpoint `{path}` has no weights for policy `{name}`")
