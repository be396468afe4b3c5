"""`packed_logprobs` (each group one row, no padding between its responses) computes what the
padded shared-prefix path computes: the same log-probs and the same gradients, on llama- and
qwen2-shaped random models, with the chunked and the full-logits head, sdpa and eager attention."""

from __future__ import annotations

import random

import pytest
import torch

from masdsl.learner.logit_chunks import WHOLE
from masdsl.learner.logprobs import packed_logprobs, packs, shared_prefix_logprobs


def rows(seed: int, prompts: int, k: int):
    rng = random.Random(seed)
    ps = [[rng.randrange(5, 500) for _ in range(rng.randrange(1, 9))] for _ in range(prompts)]
    group_of_row, responses = [], []
    for g in range(prompts):
        for _ in range(k):
            group_of_row.append(g)
            responses.append([rng.randrange(5, 500) for _ in range(rng.randrange(1, 12))])
    order = list(range(len(responses)))
    rng.shuffle(order)  # rows of a group need not be adjacent
    return ps, [group_of_row[i] for i in order], [responses[i] for i in order]


def model_of(kind: str, attn: str):
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    torch.manual_seed(0)
    shape = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    config = LlamaConfig(**shape) if kind == "llama" else Qwen2Config(**shape)
    config._attn_implementation = attn
    return AutoModelForCausalLM.from_config(config).eval()


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("chunks", [None, WHOLE])
def test_packed_equals_shared_prefix(kind, attn, chunks):
    torch.set_num_threads(1)
    model = model_of(kind, attn)
    assert packs(model)
    ps, groups, responses = rows(seed=len(kind) + len(attn), prompts=3, k=4)
    out = []
    for fn in (shared_prefix_logprobs, packed_logprobs):
        model.zero_grad()
        lp, mask = fn(model, ps, groups, responses, 0, chunks=chunks)
        (lp * mask * torch.linspace(0.5, 1.5, lp.shape[1])).sum().backward()
        grad = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        out.append((lp.detach(), mask, grad))
    (a, ma, ga), (b, mb, gb) = out
    assert torch.equal(ma, mb)
    assert torch.allclose(a * ma, b * mb, atol=1e-5), (a * ma - b * mb).abs().max()
    assert torch.allclose(ga, gb, atol=1e-5, rtol=1e-4), (ga - gb).abs().max()


def test_a_segment_never_sees_another():
    """Changing one response changes no other response's log-probs, in its group or another."""
    model = model_of("qwen2", "sdpa")
    ps, groups, responses = rows(seed=7, prompts=2, k=3)
    with torch.no_grad():
        a, mask = packed_logprobs(model, ps, groups, responses, 0)
        changed = [r[:] for r in responses]
        changed[0] = [x + 1 for x in changed[0]]
        b, _ = packed_logprobs(model, ps, groups, changed, 0)
    assert not torch.allclose(a[0] * mask[0], b[0] * mask[0])
    assert torch.allclose(a[1:] * mask[1:], b[1:] * mask[1:], atol=1e-6)


def test_flash_attention_is_not_packable():
    model = model_of("llama", "sdpa")
    model.config._attn_implementation = "flash_attention_2"
    assert not packs(model)
