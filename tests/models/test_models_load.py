"""Model resolution, loading, the embedded default model, and the engine factory."""

from __future__ import annotations

import json

import pytest

from masdsl.errors import ModelError, UserError
from masdsl.models.load import cache_dir, load_model, resolve_model
from masdsl.runtime import backends
from masdsl.runtime.backends.base import GenRequest
from masdsl.runtime.backends.hf import HFEngine


def test_local_folder_resolves(tiny_model_dir):
    assert resolve_model(tiny_model_dir) == tiny_model_dir.resolve()
    assert resolve_model(str(tiny_model_dir)) == tiny_model_dir.resolve()


def test_folder_that_is_not_a_model(tmp_path):
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(ModelError, match="not a Hugging Face model folder"):
        resolve_model(tmp_path)
    (tmp_path / "config.json").write_text("{}")  # a config but no weights
    with pytest.raises(ModelError, match="config.json plus"):
        resolve_model(tmp_path)
    with pytest.raises(ModelError, match="is a file"):
        resolve_model(tmp_path / "notes.txt")


def test_unknown_name_suggests_builtin():
    with pytest.raises(ModelError, match="did you mean `smollm2-135m-instruct`"):
        resolve_model("smollm2-135m-instruc")
    with pytest.raises(ModelError, match="built-in: `smollm2-135m-instruct`"):
        resolve_model("./no/such/model")
    with pytest.raises(ModelError, match="empty model name"):
        resolve_model("  ")


def test_hub_id_offline_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))  # empty hub cache
    with pytest.raises(ModelError, match="HF_HUB_OFFLINE is set"):
        resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct")


def test_cache_dir_override(monkeypatch, tmp_path):
    monkeypatch.setenv("MASDSL_CACHE", str(tmp_path))
    assert cache_dir() == tmp_path


def test_load_model_pads_left_and_rejects_bad_dtype(tiny_model_dir):
    model, tok = load_model(tiny_model_dir)
    assert tok.padding_side == "left" and tok.pad_token is not None
    assert not model.training
    assert next(model.parameters()).dtype.is_floating_point
    with pytest.raises(ModelError, match="unknown dtype"):
        load_model(tiny_model_dir, dtype="float99")


def test_the_lm_head_gets_a_contiguous_input_and_the_same_logits(tiny_model_dir):
    """A frozen head given `hidden[:, -1:, :]` took PyTorch's expand-and-copy matmul path (3.5 s
    instead of 18 ms for Qwen's head, masdsl.models.load.contiguous_head_input)."""
    import torch

    model, _ = load_model(tiny_model_dir)
    model.requires_grad_(False)
    head = model.get_output_embeddings()
    seen = []
    # strides as a new tensor's: `is_contiguous()` is True for the [1, 1, H] view of a [1, P, H], which is slow all the same
    head.register_forward_pre_hook(lambda m, args: seen.append(args[0].stride() == torch.empty(args[0].shape).stride()))
    for rows in (4, 1):
        ids = torch.arange(5, 5 + 10 * rows).reshape(rows, 10)
        with torch.no_grad():  # the pre-hook above runs after masdsl's
            last = model(input_ids=ids, logits_to_keep=1).logits
            every = model(input_ids=ids).logits
        torch.testing.assert_close(last[:, 0], every[:, -1])
    assert seen == [True, True, True, True]


@pytest.mark.slow
def test_embedded_default_model_resolves_and_generates():
    # first run on a machine converts the GGUF (about 40 s), later runs load the cache
    path = resolve_model("smollm2-135m-instruct")
    assert json.loads((path / "config.json").read_text())["num_hidden_layers"] == 30
    model, tok = load_model(path)
    eng = HFEngine(model, tok, seed=0)
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        return_dict=False,
    )
    out = eng.generate([GenRequest(prompt_ids=list(prompt), max_tokens=12, temperature=0.0)])
    assert "Paris" in out[0][0].text


def test_factory(tiny_model_dir, monkeypatch, tmp_path, capsys):
    with pytest.raises(UserError, match="unknown engine"):
        backends.build_engine("gpu", tiny_model_dir)
    eng = backends.build_engine("hf", tiny_model_dir, seed=3, max_model_len=99)
    assert isinstance(eng, HFEngine) and eng.seed == 3
    assert "engine hf" in capsys.readouterr().err
    # the learner's own object: shared, not copied
    shared = backends.hf_engine_on(eng.model, eng.tokenizer)
    assert shared.model is eng.model and shared.tokenizer is eng.tokenizer
    # auto without a usable vLLM falls back to hf and says so
    monkeypatch.setenv("MASDSL_NO_VLLM", "1")
    monkeypatch.setattr(backends, "_vllm_status", None)
    auto = backends.build_engine("auto", tiny_model_dir)
    assert isinstance(auto, HFEngine)
    assert "vllm not usable (MASDSL_NO_VLLM is set); using hf" in capsys.readouterr().err
    with pytest.raises(UserError, match="engine `vllm` requested"):
        backends.build_engine("vllm", tiny_model_dir)
    # replay is RUNTIME's engine, imported lazily
    f = tmp_path / "r.jsonl"
    f.write_text(json.dumps({"task_id": "t", "role": "r", "turn": 0, "output": "x"}) + "\n")
    rep = backends.build_engine("replay", f)
    assert rep.generate([GenRequest([1], key=("t", "r", 0))])[0][0].text == "x"


def test_tiny_model_can_tie_its_embeddings(tiny_model_dir, tmp_path):
    from masdsl.runtime.backends.vllm import checkpoint_names
    from masdsl.testing import build_tiny_model

    tied_dir = build_tiny_model(tmp_path / "tied", seed=0, tie_word_embeddings=True)
    model, _ = load_model(tied_dir)
    assert model.config.tie_word_embeddings
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert "lm_head.weight" not in checkpoint_names(tied_dir)  # the checkpoint stores it once
    untied, _ = load_model(tiny_model_dir)  # the default stays untied
    assert not untied.config.tie_word_embeddings and "lm_head.weight" in checkpoint_names(tiny_model_dir)
