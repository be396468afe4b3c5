"""LoRA adapters on a shared `VLLMEngine`: one `Engine` per adapter.

`VLLMEngine(..., lora={"max_lora_rank": 16, "max_loras": 2})`, then
`engine.adapter(name, peft_config)` is a `VLLMAdapterEngine`: its `update_weights` writes the
adapter (peft format) to a new folder under the base engine's LoRA folder and switches to a new
`LoRARequest` (a new id per version, so vLLM cannot serve a stale cached adapter); the previous
version is unloaded and its folder removed.
"""

from __future__ import annotations

import itertools
import json
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from masdsl.runtime.backends.base import GenRequest, LocalEngine, Results

if TYPE_CHECKING:
    from masdsl.runtime.backends.vllm.engine import VLLMEngine


class AdapterFolders:
    """Where a LoRA-enabled engine writes its adapters' versions, and the ids it gives them."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="masdsl-lora-"))
        self.ids = itertools.count(1)

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


class VLLMAdapterEngine(LocalEngine):
    """One LoRA adapter on a shared `VLLMEngine` base; a new `LoRARequest` per weight version."""

    takes_adapter = True
    base: VLLMEngine

    def __init__(self, base: "VLLMEngine", name: str, peft_config: Any) -> None:
        if base.lora_folders is None:
            raise ValueError("this VLLMEngine was built without `lora=`; LoRA is off")
        self.base = base
        self.name = name
        self.tokenizer = base.tokenizer
        self.version = 0
        self.lora_request = None
        self._folders: AdapterFolders = base.lora_folders
        cfg = peft_config.to_dict() if hasattr(peft_config, "to_dict") else dict(peft_config)
        self._config = {k: (sorted(v) if isinstance(v, set) else v) for k, v in cfg.items()}
        self._config.setdefault("peft_type", "LORA")

    def generate(self, requests: list[GenRequest]) -> Results:
        return self.base.generate(requests, lora_request=self.lora_request)

    def update_weights(self, state_dict: dict[str, Any]) -> None:
        """`state_dict`: the adapter's weights (peft `get_peft_model_state_dict` names)."""
        from safetensors.torch import save_file  # optional: safetensors comes with transformers (the train extra)
        from vllm.lora.request import LoRARequest  # heavy: vllm is optional

        self.version += 1
        folder = self._folders.root / f"{self.name}-v{self.version}"
        folder.mkdir(parents=True)
        tensors = {k: v.detach().to("cpu").contiguous() for k, v in state_dict.items()}
        save_file(tensors, str(folder / "adapter_model.safetensors"))
        (folder / "adapter_config.json").write_text(json.dumps(self._config, default=str))
        old = self.lora_request
        self.lora_request = LoRARequest(f"{self.name}-v{self.version}", next(self._folders.ids), str(folder))
        if old is not None:
            try:
                self.base.llm.llm_engine.remove_lora(old.lora_int_id)
            except Exception:  # not loaded yet or evicted already: nothing to free
                pass
            shutil.rmtree(old.lora_path, ignore_errors=True)

    def close(self) -> None:
        """The adapter's folders go with its base engine (`VLLMEngine.close`)."""
