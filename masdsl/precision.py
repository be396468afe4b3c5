"""`runtime.dtype=auto`: the compute dtype this machine runs fastest without losing the update.

bfloat16 where the hardware multiplies it natively: a CUDA device (Ampere and newer; older GPUs
should name float16 or float32), or a CPU with AVX512-BF16 or AMX (`/proc/cpuinfo` flags), where
a `torch.mm` runs 3-7x faster than in float32 (docs/performance.md `## step breakdown`); float32
elsewhere. The weights the optimizer updates stay float32 either way (`train.master_weights`).
Read once per process, without importing torch: `masdsl check` and the plan stay light.
"""

from __future__ import annotations

import functools
from pathlib import Path

BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


@functools.lru_cache(maxsize=1)
def cpu_multiplies_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether this CPU has a native bfloat16 matrix instruction (False where unknown).

    >>> import tempfile, os
    >>> with tempfile.NamedTemporaryFile("w", suffix="cpuinfo", delete=False) as f:
    ...     _ = f.write("flags\\t\\t: fpu avx512f avx512_bf16 sse\\n")
    >>> cpu_multiplies_bf16(f.name), cpu_multiplies_bf16("/nonexistent")
    (True, False)
    >>> os.unlink(f.name)
    """
    try:
        text = Path(cpuinfo).read_text(errors="replace")
    except OSError:
        return False
    for line in text.splitlines():
        if line.startswith("flags"):
            return any(flag in line.split() for flag in BF16_CPU_FLAGS)
    return False


def resolve_dtype(requested: str, device: str, cpu_bf16: bool | None = None) -> str:
    """The compute dtype a run uses: `requested`, or for `auto` what this machine runs fastest.

    >>> resolve_dtype("float32", "cuda"), resolve_dtype("auto", "cuda:0")
    ('float32', 'bfloat16')
    >>> resolve_dtype("auto", "cpu", cpu_bf16=True), resolve_dtype("auto", "cpu", cpu_bf16=False)
    ('bfloat16', 'float32')
    """
    if requested != "auto":
        return requested
    if device.startswith("cuda"):
        return "bfloat16"
    return "bfloat16" if (cpu_multiplies_bf16() if cpu_bf16 is None else cpu_bf16) else "float32"
