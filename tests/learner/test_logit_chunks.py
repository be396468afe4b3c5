"""Chunked response log-probs (`masdsl.learner.logit_chunks`) equal the full-logits ones, values
and gradients, on the plain and the shared-prefix paths, with chunks that split rows and
positions unevenly; on an untied and a tied tiny model and a peft LoRA model (adapter on the LM
head too). And the LM head really never sees a whole micro-batch; and the fused head
(`LinearTokenLogProb`: a plain linear head on a CPU) never writes a logits tensor at all."""

from __future__ import annotations

import copy
import random

import pytest
import torch

from masdsl.learner.logit_chunks import WHOLE, Chunks, scoring, supports_chunks
from masdsl.learner.logprobs import sequence_logprobs, shared_prefix_logprobs

CHUNKS = Chunks(rows=3, positions=2, fused=False)  # 8 or 9 rows -> 3+3+2(+1); 5 or 6 positions -> 2+2+1(+1)
FUSED = Chunks(fused=True)  # the fused head where `fuses` allows (the untied and tied models here)


@pytest.fixture(scope="module")
def models(tiny_model_dir, tmp_path_factory, one_thread):
    from peft import LoraConfig, get_peft_model

    from masdsl.models.load import load_model
    from masdsl.testing import build_tiny_model

    untied, tok = load_model(tiny_model_dir)
    tied, _ = load_model(build_tiny_model(tmp_path_factory.mktemp("tied") / "m", seed=1, tie_word_embeddings=True))
    assert tied.get_output_embeddings().weight is tied.get_input_embeddings().weight
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj", "lm_head"],
                      init_lora_weights=False)  # B != 0: the adapter changes the outputs
    adapted = get_peft_model(copy.deepcopy(untied), lora)
    return {"untied": untied, "tied": tied, "lora": adapted}, tok.pad_token_id


def batch(seed: int, prompts: int, k: int):
    rng = random.Random(seed)
    ps = [[rng.randrange(5, 500) for _ in range(rng.randrange(3, 11))] for _ in range(prompts)]
    group = [g for g in range(prompts) for _ in range(k)]
    responses = [[rng.randrange(5, 500) for _ in range(rng.randrange(1, 7))] for _ in group]
    return ps, group, responses


def scored(model, path: str, chunks, pad: int):
    """Log-probs, mask, and every trainable parameter's gradient of a position-weighted sum."""
    ps, group, responses = batch(seed=4, prompts=3, k=3)
    model.zero_grad(set_to_none=True)
    if path == "plain":
        lp, mask = sequence_logprobs(model, [ps[g] for g in group], responses, pad, chunks=chunks)
    else:
        lp, mask = shared_prefix_logprobs(model, ps, group, responses, pad, chunks=chunks)
    weights = torch.linspace(-1.0, 2.0, lp.numel()).view_as(lp)  # each position its own weight
    (lp * mask * weights).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return lp.detach(), mask, grads


@pytest.mark.parametrize("chunks", [CHUNKS, FUSED], ids=["module", "fused"])
@pytest.mark.parametrize("kind", ["untied", "tied", "lora"])
@pytest.mark.parametrize("path", ["plain", "shared"])
def test_chunked_equals_full_logits_values_and_gradients(models, kind, path, chunks):
    by_kind, pad = models
    model = by_kind[kind]
    assert supports_chunks(model)
    full, mask, full_grads = scored(model, path, WHOLE, pad)
    chunked, mask2, grads = scored(model, path, chunks, pad)
    assert torch.equal(mask, mask2) and chunked.shape == full.shape
    assert torch.allclose(chunked * mask, full * mask, atol=1e-5, rtol=0)
    assert grads.keys() == full_grads.keys() and len(grads) > 0
    if kind == "lora":
        assert all("lora_" in n for n in grads) and any("lm_head" in n for n in grads)
    for n, g in grads.items():
        assert torch.allclose(g, full_grads[n], atol=1e-5, rtol=1e-4), n


def test_the_head_never_sees_a_whole_micro_batch(models):
    """Each call of the LM head gets at most one chunk of rows x positions, the model's own call
    none (with the gradients' recomputation included); the full-logits path gives it all."""
    by_kind, pad = models
    model = by_kind["untied"]
    head = model.get_output_embeddings()
    seen: list[tuple[int, ...]] = []  # the leading shape of each call's input: (rows, positions) or (tokens,)
    handle = head.register_forward_hook(lambda m, a, out: seen.append(tuple(a[0].shape[:-1])))
    try:
        lp, mask, _ = scored(model, "plain", CHUNKS, pad)
        chunk_calls = list(seen)
        seen.clear()
        scored(model, "plain", WHOLE, pad)
    finally:
        handle.remove()
    rows, positions = lp.shape
    assert (rows, 0) in chunk_calls  # the model's own call of the head: no positions
    pieces = [s[0] for s in chunk_calls if len(s) == 1]  # a chunk reaches the head as [tokens, hidden]
    assert len(pieces) == len(chunk_calls) - 1 and max(pieces) == 3 * 2
    last = (rows - (rows - 1) // 3 * 3) * (positions - (positions - 1) // 2 * 2)  # the last chunk's tokens
    # the forward, then the backward's recomputation of every chunk but the last (which keeps its logits)
    assert sum(pieces) == 2 * rows * positions - last
    assert seen == [(rows, positions + 1)]  # logits_to_keep: the whole micro-batch at once


@pytest.mark.parametrize("chunks", [CHUNKS, Chunks(rows=64, positions=64, fused=False)], ids=["many", "one"])
def test_the_backward_keeps_at_most_one_chunk_of_logits(models, chunks):
    """Of the tensors autograd saves for the backward outside the chunks' own checkpoints, those of
    vocabulary width (logits) hold at most one chunk: the last, which is not recomputed. With a
    micro-batch that is one chunk, that chunk is kept and nothing is recomputed."""
    by_kind, pad = models
    model = by_kind["untied"]
    vocab = model.get_output_embeddings().out_features
    kept: dict[int, tuple[int, ...]] = {}  # storage -> [rows, positions] of saved logits (not the head's weight)

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.dim() == 3 and t.shape[-1] == vocab:
            kept[t.untyped_storage().data_ptr()] = tuple(t.shape[:-1])
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        lp, _, _ = scored(model, "plain", chunks, pad)
    rows, positions = lp.shape
    chunk_r, chunk_p = min(chunks.rows, rows), min(chunks.positions, positions)
    assert len(kept) == 1, kept  # one chunk's logits, the last
    (shape,) = kept.values()
    assert torch.Size(shape).numel() <= chunk_r * chunk_p
    if chunks.rows >= rows and chunks.positions >= positions:
        assert shape == (rows, positions)


def test_hooks_leave_other_threads_and_later_calls_alone(models):
    """While `scoring` is open in one thread, the same model called from another thread (an hf
    engine sampling) gets real logits; after it closes, so does this thread."""
    import threading

    by_kind, pad = models
    model = by_kind["untied"]
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        ref = model(input_ids=ids).logits
        got = {}
        with scoring(model, ids[:, 1:], CHUNKS) as chunked:
            t = threading.Thread(target=lambda: got.update(other=model(input_ids=ids).logits))
            t.start()
            t.join()
            mine = model(input_ids=ids, logits_to_keep=4).logits
        after = model(input_ids=ids).logits
    assert chunked and mine.shape == (1, 3)
    assert torch.equal(got["other"], ref) and torch.equal(after, ref)
    assert torch.allclose(mine, torch.log_softmax(ref[:, :-1], -1).gather(-1, ids[:, 1:, None])[..., 0], atol=1e-5)


def test_models_that_change_logits_after_the_head_keep_the_full_path(models):
    by_kind, pad = models
    model = copy.deepcopy(by_kind["untied"])
    model.config.final_logit_softcapping = 30.0  # as Gemma 2 (this Llama ignores it: only the check reads it)
    with scoring(model, torch.zeros(1, 1, dtype=torch.long)) as chunked:
        assert not chunked
    model.config.final_logit_softcapping = None
    model.config.model_type = "cohere"
    assert not supports_chunks(model)


def test_under_the_models_own_gradient_checkpointing(models):
    """`train.gradient_checkpointing` (transformers' per-layer checkpoints, in train mode) around
    the chunks' own checkpoints: the same values and gradients as the full logits."""
    by_kind, pad = models
    model = copy.deepcopy(by_kind["tied"])
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    full, mask, full_grads = scored(model, "plain", WHOLE, pad)
    chunked, _, grads = scored(model, "plain", CHUNKS, pad)
    assert torch.allclose(chunked * mask, full * mask, atol=1e-5, rtol=0)
    for n, g in grads.items():
        assert torch.allclose(g, full_grads[n], atol=1e-5, rtol=1e-4), n


@pytest.mark.parametrize("slice_elements", [1, 16, 1 << 18])  # a column, uneven slices, the whole vocabulary
def test_token_log_prob_over_vocabulary_slices_equals_the_upcast_chain(slice_elements):
    from masdsl.learner.logit_chunks import TokenLogProb

    torch.manual_seed(0)
    logits = (torch.randn(2, 7, 50) * 4).to(torch.bfloat16).requires_grad_()
    target = torch.randint(0, 50, (2, 7))
    weights = torch.randn(2, 7)
    chain = torch.log_softmax(logits.float(), dim=-1).gather(-1, target.unsqueeze(-1)).squeeze(-1)
    (chain_grad,) = torch.autograd.grad((chain * weights).sum(), logits)
    sliced = TokenLogProb.apply(logits, target, slice_elements)
    (sliced_grad,) = torch.autograd.grad((sliced * weights).sum(), logits)
    assert sliced.dtype == torch.float32 and sliced_grad.dtype == torch.bfloat16
    torch.testing.assert_close(sliced, chain, rtol=0, atol=2e-6)
    torch.testing.assert_close(sliced_grad, chain_grad, rtol=1e-2, atol=1e-5)  # bfloat16: one rounding


@pytest.mark.parametrize("kind", ["untied", "tied"])
def test_the_fused_head_keeps_no_logits_and_calls_the_head_only_empty(models, kind):
    """With a plain linear head on a CPU the default path writes no [.., vocab] tensor for the
    backward, and the head module runs only the model's own call (no positions)."""
    by_kind, pad = models
    model = by_kind[kind]
    head = model.get_output_embeddings()
    vocab = head.out_features
    seen: list[tuple[int, ...]] = []
    kept: list[tuple[int, ...]] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.shape and t.shape[-1] == vocab and t.dim() >= 2 and t.shape != head.weight.shape[::-1]:
            kept.append(tuple(t.shape))
        return t

    handle = head.register_forward_hook(lambda m, a, out: seen.append(tuple(a[0].shape[:2])))
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            lp, _, grads = scored(model, "plain", FUSED, pad)
    finally:
        handle.remove()
    assert seen == [(lp.shape[0], 0)] and kept == []
    assert "lm_head.weight" in grads or kind == "tied"  # the head's weight trains (tied: through the embedding)


@pytest.mark.parametrize("slice_elements", [1, 37, 1 << 18])  # a column, uneven slices, the whole vocabulary
def test_the_fused_head_in_bfloat16_matches_the_module_path(slice_elements):
    """In bfloat16 (as a CPU update runs the 0.5B) the fused head's log-probs equal the module's
    logits through `TokenLogProb` up to float32 rounding (each slice's logits are rounded to
    bfloat16 as the module's are); the gradients to bfloat16 rounding."""
    from masdsl.learner.logit_chunks import LinearTokenLogProb, TokenLogProb

    torch.manual_seed(0)
    hidden = torch.randn(9, 16).to(torch.bfloat16).requires_grad_()
    weight = (torch.randn(50, 16) * 0.5).to(torch.bfloat16).requires_grad_()
    target = torch.randint(0, 50, (9,))
    weights = torch.randn(9)
    module = TokenLogProb.apply(hidden @ weight.t(), target)
    module_grads = torch.autograd.grad((module * weights).sum(), (hidden, weight))
    fused = LinearTokenLogProb.apply(hidden, weight, None, target, torch.bfloat16, slice_elements)
    fused_grads = torch.autograd.grad((fused * weights).sum(), (hidden, weight))
    assert fused.dtype == torch.float32 and [g.dtype for g in fused_grads] == [torch.bfloat16] * 2
    torch.testing.assert_close(fused, module, rtol=0, atol=2e-6)
    for got, want in zip(fused_grads, module_grads):
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-3)
