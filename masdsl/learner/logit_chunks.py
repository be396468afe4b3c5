"""Response log-probs from a causal LM's last hidden states, chunk by chunk: a [rows, tokens, vocab]
logits tensor never exists for a whole micro-batch.

    with scoring(model, targets) as chunked:    # targets [B, L]: the token each kept position predicts
        out = model(..., logits_to_keep=L + 1)  # (or every position, L of them)
    logp = out.logits if chunked else ...       # chunked: [B, L] log pi(target), float32 or wider

While `scoring` is open, the model's output embedding (`get_output_embeddings()`, the LM head) is
run on the hidden states in chunks of rows and positions: per chunk the head, `logsumexp` and the
target's logit, and nothing else is kept. Under autograd each chunk is checkpointed
(`torch.utils.checkpoint`), so the backward recomputes that chunk's logits instead of keeping
them, as fused linear cross-entropy kernels do. A chunk holds about `LOGIT_CHUNK_ELEMENTS` (on a CPU; 10x that on a GPU: `logit_chunk_elements`)
logits: for Qwen2.5's 151,936-word vocabulary that is 220 tokens (134 MB in float32), where the
whole micro-batch of 2,000 response tokens would have been 1.2 GB, kept for the backward.

It works by two hooks on the head (inside the model's own forward: under FSDP the head's
weights are gathered then, and every rank makes the same module calls). The pre-hook scores the
chunks and hands the head an empty slice, the forward hook puts the log-probs where the logits
would be. The hooks act only in the thread that opened `scoring` (an hf engine may sample from
the same module in another thread). The head is called as a module, so a LoRA adapter on it and
tied embeddings work unchanged.

With `Chunks(fused=True)`, on a CPU, a head that is a plain `nn.Linear` outside a process group (no
LoRA adapter on it; tied embeddings included) is fused further: `LinearTokenLogProb` takes its matmul over slices of the
vocabulary, each slice's logits reduced to the log-sum-exp and the target's logit while they
are in cache, and the backward recomputes each slice, so no chunk's [tokens, vocab] logits are
ever written to memory and the whole micro-batch is one chunk. Other heads, and every head by
default, run as a module.

Models whose forward changes the logits after the head (Gemma 2 and 3: final logit
softcapping; Cohere: `logit_scale`; Granite: `logits_scaling`) and any model type not in
`CHUNKED_MODEL_TYPES` (each checked to return `lm_head(hidden)` as its logits) keep the
full-logits path: `scoring` then yields False.
"""

from __future__ import annotations

import contextlib
import threading
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

import torch
from torch import nn
from torch.autograd.function import FunctionCtx
from torch.utils.checkpoint import checkpoint

from masdsl.plan.logit_budget import LOGIT_CHUNK_ELEMENTS, logit_chunk_elements  # the memory model counts one chunk

if TYPE_CHECKING:
    from transformers import PreTrainedModel

# Causal LMs (transformers 5.19) whose logits are `lm_head(hidden_states[:, slice_indices, :])`
# and nothing more when no labels are given.
CHUNKED_MODEL_TYPES = frozenset({"llama", "mistral", "qwen2", "qwen2_moe", "qwen3", "phi", "phi3", "starcoder2",
                                 "olmo2", "smollm3", "gemma", "gpt2"})
_SCALING_KEYS = ("final_logit_softcapping", "logit_scale", "logits_scaling")  # a post-head change


@dataclass(frozen=True)
class Chunks:
    """Rows and positions of one chunk of logits (0: chosen from the vocabulary size so that a
    chunk holds about `LOGIT_CHUNK_ELEMENTS` logits); `whole`: no chunks, the full-logits path.

    >>> Chunks().sizes(vocab=151_936, rows=16, positions=128)  # 220 tokens: one row, 128 positions
    (1, 128)
    >>> Chunks().sizes(vocab=49_152, rows=16, positions=128)   # 682 tokens: 5 rows of 128
    (5, 128)
    >>> Chunks().sizes(vocab=151_936, rows=4, positions=1000)  # a long row: 220 positions at a time
    (1, 220)
    >>> Chunks(rows=3, positions=2).sizes(vocab=10, rows=8, positions=5)
    (3, 2)
    >>> Chunks().sizes(vocab=151_936, rows=64, positions=512, elements=logit_chunk_elements("cuda"))  # a GPU's
    (4, 512)
    """

    rows: int = 0
    positions: int = 0
    whole: bool = False
    # where `fuses` allows: the head's matmul inside `LinearTokenLogProb`. Off by default: on the
    # replayed 0.5B update it was no faster (docs/performance.md `### The head fused with its log-softmax`)
    fused: bool = False

    def sizes(self, vocab: int, rows: int, positions: int, elements: int = LOGIT_CHUNK_ELEMENTS) -> tuple[int, int]:
        """(rows, positions) of a chunk holding about `elements` logits (the device's, see `_chunked`)."""
        if self.rows and self.positions:
            return self.rows, self.positions
        tokens = max(1, elements // max(vocab, 1))
        if positions >= tokens:
            return 1, tokens
        return max(1, min(rows, tokens // positions)), positions


# Elements of one slice of a chunk's logits on a CPU (1 MB in float32): the log-softmax's passes
# over the vocabulary run slice by slice, so their float32 temporaries stay in a core's cache
# instead of each pass writing a fresh [tokens, vocab] tensor to memory (benchmarks/head_logprob.py:
# a 220-token chunk of Qwen2.5's head in bfloat16, forward and backward, 0.30 -> 0.23 s; 2^16 and
# 2^20-2^22 were slower). A GPU takes the chunk as one slice: there each slice is kernel launches.
VOCAB_SLICE_ELEMENTS = 1 << 18


class TokenLogProb(torch.autograd.Function):
    """log softmax(logits)[target] per row, in at least float32, without a [rows, vocab] float32
    tensor on a CPU: the log-sum-exp and the backward's softmax are taken over slices of the
    vocabulary (`VOCAB_SLICE_ELEMENTS`; a GPU's chunk is one slice), each upcast on its own, and
    the backward writes the gradient in the logits' dtype slice by slice (softmax times the
    gradient, the target's one added in float32 before the one rounding). The same values as autograd's chain through the upcast, `logsumexp`
    and `gather` up to float32 rounding (the log-sum-exp sums the slices in another order), and
    for a chunk of Qwen2.5's head about a fifth faster on a CPU (docs/performance.md
    `### The update taken apart`).

    >>> x = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    >>> t = torch.tensor([0, 4, 2])
    >>> ref = torch.log_softmax(x, -1).gather(-1, t[:, None]).squeeze(-1)
    >>> torch.allclose(TokenLogProb.apply(x, t), ref)
    True
    >>> torch.autograd.gradcheck(TokenLogProb.apply, (x, t))
    True
    >>> torch.allclose(TokenLogProb.apply(x, t, 2), ref)  # slices of two elements: the same values
    True
    >>> torch.autograd.gradcheck(lambda x, t: TokenLogProb.apply(x, t, 2), (x, t))
    True
    """

    @staticmethod
    def forward(ctx: FunctionCtx, logits: torch.Tensor, target: torch.Tensor,
                slice_elements: int | None = None) -> torch.Tensor:
        if slice_elements is None:  # the device's: slices on a CPU, the whole chunk elsewhere
            slice_elements = VOCAB_SLICE_ELEMENTS if logits.device.type == "cpu" else logits.numel()
        wide = torch.promote_types(logits.dtype, torch.float32)
        vocab = logits.shape[-1]
        width = max(1, slice_elements // max(1, logits.numel() // max(vocab, 1)))  # columns a slice
        top = logits.amax(-1, keepdim=True).to(wide)  # exact in any dtype: the shift that keeps exp() finite
        total = torch.zeros(top.shape[:-1], dtype=wide, device=logits.device)
        for a in range(0, vocab, width):  # `copy=True`: a float32 slice is not changed in place
            total += logits[..., a:a + width].to(wide, copy=True).sub_(top).exp_().sum(-1)
        lse = top.squeeze(-1) + total.log()
        ctx.save_for_backward(logits, target, lse)
        ctx.width = width  # type: ignore[attr-defined]  # torch types ctx without its attributes
        return logits.gather(-1, target.unsqueeze(-1)).squeeze(-1).to(wide) - lse

    @staticmethod
    def backward(ctx: FunctionCtx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:  # type: ignore[override]
        logits, target, lse = ctx.saved_tensors  # type: ignore[attr-defined]
        width, shift, g = ctx.width, lse.unsqueeze(-1), grad.unsqueeze(-1)  # type: ignore[attr-defined]
        out = torch.empty_like(logits)
        for a in range(0, logits.shape[-1], width):  # d/dlogits of -logsumexp: -softmax
            out[..., a:a + width] = logits[..., a:a + width].to(lse.dtype, copy=True).sub_(shift).exp_().mul_(-g)
        picked = target.unsqueeze(-1)  # and of the target's logit: one, added before rounding
        own = logits.gather(-1, picked).to(lse.dtype).sub_(shift).exp_().mul_(-g).add_(g)
        out.scatter_(-1, picked, own.to(out.dtype))
        return out, None, None


# Logits of one slice of the fused head (`LinearTokenLogProb`) on a CPU: the micro-batch's tokens
# times the slice's vocabulary columns (1 MB in float32), so that a slice's logits stay in a core's
# cache between the matmul that writes them and the passes that reduce them. Not tuned: at 1,024
# tokens 512 columns (2 MB) were faster than this (256), at 220 tokens wider slices were
# (benchmarks/head_logprob.py; docs/performance.md `### The head fused with its log-softmax`).
FUSED_SLICE_ELEMENTS = 1 << 18


class LinearTokenLogProb(torch.autograd.Function):
    """log softmax(hidden @ weight.T + bias)[target] per row, without the logits: the head's matmul
    runs over slices of the vocabulary, each slice reduced (a running log-sum-exp, the target's
    logit) before the next is computed; the backward recomputes each slice and adds its share of
    the input's (and, where they train, the weight's and bias's) gradient. The logits of a slice
    are computed in `compute_dtype` (the autocast dtype of the caller, or the hidden states'),
    rounded as the module's own call rounds them, then reduced in at least float32. The same values
    as `TokenLogProb` on the module's logits up to float32 rounding; the input's gradient sums one
    rounded product per slice where the module's backward rounds one product.

    >>> torch.manual_seed(0) is not None
    True
    >>> h = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    >>> w = torch.randn(7, 3, dtype=torch.float64, requires_grad=True)
    >>> b = torch.randn(7, dtype=torch.float64, requires_grad=True)
    >>> t = torch.tensor([0, 6, 2, 2])
    >>> ref = torch.log_softmax(h @ w.t() + b, -1).gather(-1, t[:, None]).squeeze(-1)
    >>> torch.allclose(LinearTokenLogProb.apply(h, w, b, t, torch.float64, 8), ref)  # slices of 2 columns
    True
    >>> torch.autograd.gradcheck(lambda h, w, b: LinearTokenLogProb.apply(h, w, b, t, torch.float64, 8), (h, w, b))
    True
    """

    @staticmethod
    def forward(ctx: FunctionCtx, hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                target: torch.Tensor, compute_dtype: torch.dtype, slice_elements: int = FUSED_SLICE_ELEMENTS
                ) -> torch.Tensor:
        wide = torch.promote_types(compute_dtype, torch.float32)
        rows, vocab = hidden.shape[0], weight.shape[0]
        width = max(1, slice_elements // max(1, rows))
        h = hidden.to(compute_dtype)
        top = torch.full((rows,), float("-inf"), dtype=wide, device=hidden.device)
        total = torch.zeros(rows, dtype=wide, device=hidden.device)
        picked = torch.zeros(rows, dtype=wide, device=hidden.device)
        with torch.autocast(hidden.device.type, enabled=False):  # the dtypes here are chosen, not cast
            for a in range(0, vocab, width):
                z = _slice_logits(h, weight, bias, a, width).to(wide)
                new_top = torch.maximum(top, z.amax(-1))
                total.mul_((top - new_top).exp_()).add_(z.sub(new_top.unsqueeze(-1)).exp_().sum(-1))
                top = new_top
                inside = (target >= a) & (target < a + z.shape[1])
                column = (target - a).clamp_(0, z.shape[1] - 1).unsqueeze(-1)
                picked = torch.where(inside, z.gather(-1, column).squeeze(-1), picked)
        lse = top + total.log()
        ctx.save_for_backward(hidden, weight, bias, target, lse)  # type: ignore[arg-type]  # None saves as None
        ctx.compute_dtype, ctx.width = compute_dtype, width  # type: ignore[attr-defined]
        return picked - lse

    @staticmethod
    def backward(ctx: FunctionCtx, grad: torch.Tensor  # type: ignore[override]
                 ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None, None, None, None]:
        hidden, weight, bias, target, lse = ctx.saved_tensors  # type: ignore[attr-defined]
        compute_dtype, width = ctx.compute_dtype, ctx.width  # type: ignore[attr-defined]
        need_h, need_w, need_b = ctx.needs_input_grad[:3]  # type: ignore[attr-defined]
        g = grad.to(lse.dtype)
        h = hidden.to(compute_dtype)
        grad_h = torch.zeros(hidden.shape, dtype=lse.dtype, device=hidden.device) if need_h else None
        grad_w = torch.zeros_like(weight) if need_w else None
        grad_b = torch.zeros_like(bias) if need_b else None
        with torch.autocast(hidden.device.type, enabled=False):
            for a in range(0, weight.shape[0], width):
                z = _slice_logits(h, weight, bias, a, width).to(lse.dtype)
                d = z.sub_(lse.unsqueeze(-1)).exp_().mul_(-g.unsqueeze(-1))  # d/dz of -logsumexp: -softmax
                rows = ((target >= a) & (target < a + d.shape[1])).nonzero().squeeze(-1)
                d.index_put_((rows, target[rows] - a), g[rows], accumulate=True)  # the target's logit: one
                low = d.to(compute_dtype)
                block = weight[a:a + width].to(compute_dtype)
                if grad_h is not None:
                    grad_h += low @ block
                if grad_w is not None:
                    grad_w[a:a + width] = (low.t() @ h).to(weight.dtype)
                if grad_b is not None:
                    grad_b[a:a + width] = d.sum(0).to(bias.dtype)
        return (grad_h.to(hidden.dtype) if grad_h is not None else None), grad_w, grad_b, None, None, None


def _slice_logits(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, start: int, width: int
                  ) -> torch.Tensor:
    """The logits of vocabulary columns [start, start + width), in `h`'s dtype."""
    block = weight[start:start + width].to(h.dtype)
    z = h @ block.t()
    return z if bias is None else z + bias[start:start + width].to(h.dtype)


def fuses(head: nn.Module, hidden: torch.Tensor) -> bool:
    """Whether `LinearTokenLogProb` can stand in for calling `head`: a plain `nn.Linear` (a LoRA
    adapter or another wrapper on it runs as a module) on a CPU (measured there: docs/performance.md
    `### The head fused with its log-softmax`), outside a process group (FSDP may reshard
    a weight that a saved tensor would still point at).

    >>> fuses(torch.nn.Linear(2, 3), torch.zeros(1, 2))
    True
    >>> fuses(torch.nn.Sequential(torch.nn.Linear(2, 3)), torch.zeros(1, 2))
    False
    """
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    return type(head) is nn.Linear and hidden.device.type == "cpu" and not distributed


def at_least_float32(t: torch.Tensor) -> torch.Tensor:
    """`t` upcast from half precision; float32 and float64 unchanged (a float64 run stays float64).

    >>> at_least_float32(torch.zeros(1, dtype=torch.bfloat16)).dtype, at_least_float32(torch.zeros(1, dtype=torch.float64)).dtype
    (torch.float32, torch.float64)
    """
    return t.to(torch.promote_types(t.dtype, torch.float32))


AUTO = Chunks()
WHOLE = Chunks(whole=True)
# what `scoring(chunks=None)` uses: a benchmark measures the full-logits path with `LOGITS.set(WHOLE)`
LOGITS: ContextVar[Chunks] = ContextVar("masdsl_logit_chunks", default=AUTO)


def supports_chunks(model: object) -> bool:
    """Whether `model`'s logits are its output embedding's output, unchanged (see the module doc).

    >>> from types import SimpleNamespace as NS
    >>> head = lambda: torch.nn.Linear(2, 3)
    >>> supports_chunks(NS(config=NS(model_type="qwen2"), get_output_embeddings=head))
    True
    >>> supports_chunks(NS(config=NS(model_type="gemma2", final_logit_softcapping=30.0), get_output_embeddings=head))
    False
    >>> supports_chunks(NS(config=NS(model_type="llama", logit_scale=0.5), get_output_embeddings=head))
    False
    """
    config = getattr(model, "config", None)
    if getattr(config, "model_type", None) not in CHUNKED_MODEL_TYPES:
        return False
    if any(getattr(config, k, None) not in (None, 1, 1.0) for k in _SCALING_KEYS):
        return False
    get = getattr(model, "get_output_embeddings", None)
    return callable(get) and isinstance(get(), torch.nn.Module)


@contextlib.contextmanager
def scoring(model: PreTrainedModel, targets: torch.Tensor, chunks: Chunks | None = None,
            needed: torch.Tensor | None = None) -> Iterator[bool]:
    """While open, `model(...)`'s logits are the log-probs of `targets` [B, L] at the first L kept
    positions, computed chunk by chunk; yields False (and changes nothing) where the model or
    `chunks` asks for the full-logits path. `needed` (bool [B, L]): the positions whose log-probs
    are read; the fused head computes only those (the others are 0, with no gradient), the module
    path all of them."""
    chunks = LOGITS.get() if chunks is None else chunks
    if chunks.whole or not supports_chunks(model):
        yield False
        return
    head = model.get_output_embeddings()
    me = threading.get_ident()
    state: dict[str, Any] = {"inner": False, "logp": None}

    def before(module: nn.Linear, args: tuple) -> tuple | None:
        if threading.get_ident() != me or state["inner"]:
            return None
        hidden = args[0]
        state["logp"] = _chunked(module, hidden[:, : targets.shape[1]], targets, chunks, state, needed)
        return (hidden[:, :0], *args[1:])  # the head's own call: no positions, no logits

    def after(module: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor | None:
        if threading.get_ident() != me or state["inner"] or state["logp"] is None:
            return None
        logp, state["logp"] = state["logp"], None
        return logp

    handles = [head.register_forward_pre_hook(before), head.register_forward_hook(after)]
    try:
        yield True
    finally:
        for h in handles:
            h.remove()


def _chunked(head: nn.Linear, hidden: torch.Tensor, targets: torch.Tensor, chunks: Chunks, state: dict,
             needed: torch.Tensor | None = None) -> torch.Tensor:
    """log pi(targets) [B, L] from `hidden` [B, L, H], one chunk of rows x positions at a time, or
    with the fused head the `needed` positions at once."""
    def piece(h: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        state["inner"] = True  # the head's hooks pass this call (and its recomputation) through
        try:  # as a 2D input: a 3D slice of a larger tensor took a CPU's bfloat16 linear 10x longer
            logits = head(h.reshape(-1, h.shape[-1])).view(*h.shape[:-1], -1)
        finally:
            state["inner"] = False
        return TokenLogProb.apply(logits, tgt)

    n, length = targets.shape
    if chunks.fused and fuses(head, hidden):  # no logits in memory: the micro-batch is one chunk
        compute = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else hidden.dtype
        flat_hidden, flat_targets = hidden.reshape(n * length, -1), targets.reshape(-1)
        if needed is None:
            return LinearTokenLogProb.apply(flat_hidden, head.weight, head.bias, flat_targets, compute).view(n, length)
        where = needed.reshape(-1).nonzero().squeeze(-1)  # padding between packed rows skips the head
        picked = LinearTokenLogProb.apply(flat_hidden[where], head.weight, head.bias, flat_targets[where], compute)
        return picked.new_zeros(n * length).index_put((where,), picked).view(n, length)
    vocab = getattr(head, "out_features", None) or head.weight.shape[0]
    rows, positions = chunks.sizes(vocab, n, length, logit_chunk_elements(hidden.device.type))
    grad = torch.is_grad_enabled()
    last = (range(0, n, rows)[-1], range(0, length, positions)[-1])
    out = []
    for r in range(0, n, rows):
        cols = []
        for p in range(0, length, positions):
            h, tgt = hidden[r : r + rows, p : p + positions], targets[r : r + rows, p : p + positions]
            # The last chunk keeps its logits for the backward instead of recomputing them: the
            # backward runs it first (autograd takes the newest node first), so its logits are
            # freed before any other chunk is recomputed, and no more than one chunk's logits
            # ever live at once, as with recomputing it. A micro-batch of one chunk recomputes nothing.
            # A chunk draws no random numbers: restoring the global RNG around its recompute would rewind
            # the stream of a rollout sampling beside the update (train.async_rollout), so it is not saved.
            cols.append(checkpoint(piece, h, tgt, use_reentrant=False, preserve_rng_state=False)
                        if grad and (r, p) != last else piece(h, tgt))
        out.append(torch.cat(cols, dim=1))
    return torch.cat(out, dim=0)
