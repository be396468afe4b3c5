"""How many logits the learner scores at once (`masdsl.learner.logit_chunks`), per device kind:
what the update's memory holds for its output layer, and so what the GPU memory model counts."""

from __future__ import annotations

LOGIT_CHUNK_ELEMENTS = 1 << 25  # logits per chunk of the learner's scoring on a CPU (128 MB in float32)
# On a GPU, 10x: 2,208 tokens of Qwen2.5's vocabulary (1.3 GB in float32). On an H200 it took the
# training part of a 0.5B LoRA update from 1.76 to 1.37 s for 4.1 GB more at its peak
# (docs/performance.md, "update on a GPU"); the CPU's smaller chunk was no faster there.
LOGIT_CHUNK_ELEMENTS_GPU = 5 << 26


def logit_chunk_elements(device_type: str) -> int:
    """Logits per chunk of the learner's scoring on a device of this kind ("cpu", "cuda", ...).

    >>> logit_chunk_elements("cpu") // 151_936, logit_chunk_elements("cuda") // 151_936
    (220, 2208)
    """
    return LOGIT_CHUNK_ELEMENTS if device_type == "cpu" else LOGIT_CHUNK_ELEMENTS_GPU
