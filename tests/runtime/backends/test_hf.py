"""The `hf` engine: shapes, stop strings, determinism, log-probs, on-policy weight updates."""

from __future__ import annotations

import copy

import pytest
import torch

from masdsl.models.load import load_model
from masdsl.runtime.backends.base import GenRequest
from masdsl.runtime.backends.hf import HFEngine

from tests.support.engines import chat_ids, make_token_certain, teacher_forced_logprobs


@pytest.fixture(scope="module")
def prompts(hf_engine):
    tok = hf_engine.tokenizer
    return [
        chat_ids(tok, "Name the hidden digit."),
        chat_ids(tok, "def add(a, b):\n    return a + b\nassert add(1, 2) == 3"),
        chat_ids(tok, "Copy the digit 7."),
    ]


def test_shapes_and_order(hf_engine, prompts):
    reqs = [
        GenRequest(prompt_ids=prompts[0], n=3, max_tokens=12),
        GenRequest(prompt_ids=prompts[1], n=1, max_tokens=5, temperature=0.0),
        GenRequest(prompt_ids=prompts[2], n=2, max_tokens=7, temperature=0.7, top_p=0.9),
    ]
    out = hf_engine.generate(reqs)
    assert [len(c) for c in out] == [3, 1, 2]
    for req, cands in zip(reqs, out):
        for c in cands:
            assert 1 <= len(c.token_ids) <= req.max_tokens
            assert len(c.logprobs) == len(c.token_ids)
            assert all(lp <= 0.0 for lp in c.logprobs)
            assert c.finish_reason in ("stop", "length")
            if c.finish_reason == "length":
                assert len(c.token_ids) == req.max_tokens
            else:
                assert c.token_ids[-1] in hf_engine.eos_ids
            assert all(0 <= t < len(hf_engine.tokenizer) for t in c.token_ids)
    # three samples from a random 512-token model: not all identical
    assert len({tuple(c.token_ids) for c in out[0]}) > 1


def test_greedy_is_argmax_and_repeats(hf_engine, prompts):
    req = GenRequest(prompt_ids=prompts[1], n=2, max_tokens=6, temperature=0.0)
    a, b = hf_engine.generate([req])[0]
    assert a.token_ids == b.token_ids
    # each greedy token is the argmax of a teacher-forced forward pass
    ids = torch.tensor([req.prompt_ids + a.token_ids])
    with torch.no_grad():
        logits = hf_engine.model(ids).logits[0]
    p = len(req.prompt_ids)
    assert logits[p - 1 : -1].argmax(-1).tolist() == a.token_ids


def test_stop_string_truncates(hf_engine, prompts):
    base = GenRequest(prompt_ids=prompts[0], n=1, max_tokens=24, temperature=0.0)
    full = hf_engine.generate([base])[0][0]
    assert full.finish_reason == "length" and len(full.text) > 6
    stop = full.text[3:5]  # a stop string from the middle of the greedy text
    assert stop.strip() and stop not in full.text[:3]
    req = GenRequest(prompt_ids=prompts[0], n=1, max_tokens=24, temperature=0.0, stop=[stop, "@@@"])
    cut = hf_engine.generate([req])[0][0]
    assert cut.finish_reason == "stop"
    assert cut.text == full.text[: full.text.find(stop)]
    # ids: an exact prefix of the unstopped greedy ids, ending at the token completing the stop
    assert cut.token_ids == full.token_ids[: len(cut.token_ids)]
    decoded = hf_engine.tokenizer.decode(cut.token_ids)
    assert stop in decoded and stop not in hf_engine.tokenizer.decode(cut.token_ids[:-1])
    assert cut.logprobs == pytest.approx(full.logprobs[: len(cut.token_ids)], abs=1e-5)


def test_seeded_determinism(tiny_model_dir, prompts):
    reqs = [GenRequest(prompt_ids=p, n=2, max_tokens=10) for p in prompts]

    def run(seed):
        model, tok = load_model(tiny_model_dir)
        eng = HFEngine(model, tok, seed=seed)
        return [[c.token_ids for c in cands] for cands in eng.generate(reqs) + eng.generate(reqs)]

    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = run(0)
    assert torch.rand(1).item() == before.item()  # the global RNG is untouched
    assert a == run(0)
    assert a != run(1)
    # two calls on one engine draw fresh samples
    assert a[:3] != a[3:]


def test_logprobs_match_teacher_forcing(hf_engine, prompts):
    # mixed prompt lengths in one batch (left padding), tempered and top-p sampling
    reqs = [
        GenRequest(prompt_ids=p, n=2, max_tokens=16, temperature=t, top_p=tp)
        for p in prompts
        for t, tp in ((1.0, 1.0), (0.7, 0.9))
    ]
    out = hf_engine.generate(reqs)
    gap = 0.0
    for req, cands in zip(reqs, out):
        for c in cands:
            ref = teacher_forced_logprobs(hf_engine.model, req.prompt_ids, c.token_ids)
            gap = max(gap, max(abs(x - y) for x, y in zip(ref, c.logprobs)))
    print(f"hf log-prob gap vs teacher forcing: {gap:.2e}")
    assert gap < 1e-3


def test_on_policy_after_update_from_another_copy(tiny_model_dir, prompts):
    model, tok = load_model(tiny_model_dir)
    engine = HFEngine(model, tok, seed=0)
    target = 300
    req = GenRequest(prompt_ids=prompts[0], n=4, max_tokens=6)
    before = engine.generate([req])[0]
    assert not all(set(c.token_ids) == {target} for c in before)

    trained = copy.deepcopy(model)  # the "learner's" copy, changed by an update
    make_token_certain(trained, target)
    engine.update_weights(trained.state_dict())
    after = engine.generate([req])[0]
    assert all(c.token_ids == [target] * 6 for c in after)
    assert all(lp > -1e-3 for c in after for lp in c.logprobs)

    with pytest.raises(Exception, match="unknown parameter"):
        engine.update_weights({"not.a.weight": torch.zeros(1)})


def test_on_policy_shared_object(tiny_model_dir, prompts):
    model, tok = load_model(tiny_model_dir)
    engine = HFEngine(model, tok, seed=0)
    make_token_certain(model, 301)  # the learner edits the shared model in place
    engine.update_weights(dict(model.named_parameters()))  # no copy needed, still correct
    out = engine.generate([GenRequest(prompt_ids=prompts[1], n=3, max_tokens=4)])[0]
    assert all(c.token_ids == [301] * 4 for c in out)



def test_candidates_of_one_prompt_share_one_prefill(hf_engine, prompts, monkeypatch):
    """K candidates of a request reuse one prompt prefill, and sample what a prefill per row
    samples (same seeds): same tokens, log-probs equal up to float rounding."""
    import torch

    import masdsl.runtime.backends.hf as hf

    rows = [tuple(prompts[0])] * 3 + [tuple(prompts[1])]
    width = max(len(r) for r in rows)
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, width - len(r):], mask[i, width - len(r):] = torch.tensor(r), 1
    cache = hf._shared_prompt_cache(hf_engine.model, ids, mask, rows)
    assert cache is not None and cache.get_seq_length() == width - 1
    assert cache.layers[0].keys.shape[0] == len(rows)
    assert hf._shared_prompt_cache(hf_engine.model, ids[2:], mask[2:], rows[2:]) is None  # nothing repeats

    reqs = [GenRequest(prompt_ids=prompts[0], n=3, max_tokens=12, seed=11),
            GenRequest(prompt_ids=prompts[1], n=2, max_tokens=12, seed=12)]
    shared = hf_engine.generate(reqs)
    monkeypatch.setattr(hf, "_shared_prompt_cache", lambda *a: None)
    per_row = hf_engine.generate(reqs)
    for a_cands, b_cands in zip(shared, per_row):
        for a, b in zip(a_cands, b_cands):
            assert a.token_ids == b.token_ids
            assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-5


def test_autocast_samples_under_half_precision_and_only_a_gpu_asks_for_it(hf_engine, prompts, monkeypatch):
    """`autocast="bfloat16"` runs generate under that autocast (CPU autocast here, the same code
    path a GPU takes); `hf_engine_on` asks for it only for a LoRA adapter on a GPU with a half
    `runtime.dtype`."""
    from masdsl.runtime import backends

    seen: list[torch.dtype] = []
    model = hf_engine.model
    real = model.generate

    def spy(*args, **kw):
        seen.append(torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else torch.float32)
        return real(*args, **kw)

    monkeypatch.setattr(model, "generate", spy)
    engine = HFEngine(model, hf_engine.tokenizer, seed=0, autocast="bfloat16")
    ((cand,),) = engine.generate([GenRequest(prompt_ids=prompts[0], n=1, max_tokens=6)])
    assert seen == [torch.bfloat16]
    assert len(cand.logprobs) == len(cand.token_ids) and all(lp <= 0.0 for lp in cand.logprobs)
    hf_engine.generate([GenRequest(prompt_ids=prompts[0], n=1, max_tokens=2)])
    assert seen[-1] == torch.float32  # the default engine: no autocast
    made = {dev: backends.hf_engine_on(model, hf_engine.tokenizer, seed=0, dtype="bfloat16", device=dev,
                                       adapter="p").autocast for dev in ("cpu", "cuda")}
    assert made == {"cpu": None, "cuda": "bfloat16"}
    assert backends.hf_engine_on(model, hf_engine.tokenizer, seed=0, dtype="float32", device="cuda",
                                 adapter="p").autocast is None
    # full weights sample as they are: autocast measured no faster there (docs/performance.md `## step breakdown`)
    assert backends.hf_engine_on(model, hf_engine.tokenizer, seed=0, dtype="bfloat16", device="cuda").autocast is None
