"""`runtime.lora_sync=merged` (issue 29): a LoRA policy's engine without LoRA receives base +
adapter merged, so a plain model loaded with `merged_state` must compute what the `PeftModel`
computes with the adapter active, and the learner's own model must not change."""

from __future__ import annotations

import copy

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

from masdsl.config import resolve_config
from masdsl.runtime.backends.lora_merge import merged_model, merged_state
from masdsl.plan.placement import plan_placement


def tiny_llama(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, tie_word_embeddings=True)
    return LlamaForCausalLM(cfg).eval()


def test_a_plain_model_with_the_merged_weights_computes_what_the_adapter_does():
    base = tiny_llama()
    plain = copy.deepcopy(base)
    peft = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"), adapter_name="tool_p")
    peft.add_adapter("planner_p", LoraConfig(r=2, lora_alpha=2, target_modules="all-linear"))
    with torch.no_grad():
        for name, w in peft.named_parameters():
            if "lora_B" in name:
                w.normal_(0, 0.5)  # a trained adapter: B is no longer 0
    before = {k: v.clone() for k, v in peft.state_dict().items()}
    ids = torch.tensor([[1, 5, 9, 3, 7]])
    for adapter in ("tool_p", "planner_p"):
        state = merged_state(peft, adapter)
        assert not any("lora_" in k or "base_layer" in k for k in state)
        assert set(state) == set(plain.state_dict())
        plain.load_state_dict(state)
        peft.set_adapter(adapter)
        with torch.no_grad():
            want, got = peft(ids).logits, plain(ids).logits
        assert torch.allclose(want, got, atol=1e-5), (adapter, (want - got).abs().max())
        assert not torch.allclose(got, tiny_llama()(ids).logits, atol=1e-3)  # the adapter did change the output
    assert all(torch.equal(before[k], v) for k, v in peft.state_dict().items())  # nothing merged in place


@pytest.mark.parametrize("targets", ["all-linear", ["q_proj", "v_proj"]])
def test_changed_only_holds_the_changed_modules_with_their_siblings(targets):
    """`changed_only`: the merged weights of every adapted module and the rest of the module that
    holds it (k beside q and v), nothing else (no embedding, no norm), each as in the whole state."""
    peft = get_peft_model(tiny_llama(), LoraConfig(r=4, lora_alpha=8, target_modules=targets), adapter_name="a")
    with torch.no_grad():
        for name, w in peft.named_parameters():
            if "lora_B" in name:
                w.normal_(0, 0.5)
    whole, part = merged_state(peft, "a"), merged_state(peft, "a", changed_only=True)
    attn = {f"model.layers.{i}.self_attn.{m}_proj.weight" for i in range(2) for m in "qkvo"}
    mlp = {f"model.layers.{i}.mlp.{m}_proj.weight" for i in range(2) for m in ("gate", "up", "down")}
    assert set(part) == (attn | mlp if targets == "all-linear" else attn)
    assert all(torch.equal(part[k], whole[k]) for k in part)
    changed = {k for k in whole if not torch.equal(whole[k], tiny_llama().state_dict()[k])}
    assert changed and changed <= set(part)  # nothing that moved is left out


def test_merged_model_is_a_plain_model_computing_what_its_adapter_does():
    base = tiny_llama()
    peft = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"), adapter_name="tool_p")
    peft.add_adapter("planner_p", LoraConfig(r=2, lora_alpha=2, target_modules="all-linear"))
    with torch.no_grad():
        for name, w in peft.named_parameters():
            if "lora_B" in name:
                w.normal_(0, 0.5)
    before = {k: v.clone() for k, v in peft.state_dict().items()}
    ids = torch.tensor([[1, 5, 9, 3, 7]])
    plain = merged_model(peft, "planner_p", "float32")
    assert not any("lora_" in n for n, _ in plain.named_parameters()) and not hasattr(plain, "peft_config")
    assert not any(p.requires_grad for p in plain.parameters())
    peft.set_adapter("planner_p")
    with torch.no_grad():
        assert torch.allclose(peft(ids).logits, plain(ids).logits, atol=1e-5)
    assert all(torch.equal(before[k], v) for k, v in peft.state_dict().items())  # the learner's object is as it was
    assert {p.dtype for p in merged_model(peft, "tool_p", "bfloat16").parameters()} == {torch.bfloat16}


@pytest.mark.parametrize("sync, note", [("adapter", "one engine with LoRA for"), ("merged", "merged")])
def test_the_plan_says_which_engine_a_lora_policy_gets(sync, note):
    import masdsl

    wf = masdsl.load("workflows/math_arith_per_role.mas")
    cfg = resolve_config(overrides=["runtime.engine=vllm", f"runtime.lora_sync={sync}", "policy.reasoner_p.lora.r=8",
                                    "policy.tool_p.lora.r=8"])
    from masdsl.plan.run_plan import effective_policies

    placement = plan_placement(wf, effective_policies(wf, cfg), cfg.runtime)
    assert all(note in p.engine.note for p in placement.policies)


def test_lora_sync_takes_only_its_two_values():
    with pytest.raises(Exception, match="lora_sync"):
        resolve_config(overrides=["runtime.lora_sync=merge"])
