"""A LoRA layer's input cast, skipped under autocast (`cast_inputs_outside_autocast`), changes no
value: the update's log-probs and adapter gradients are those of peft's own cast, and outside
autocast (an engine sampling from the same modules) the cast still happens."""

from __future__ import annotations

import pytest
import torch

from masdsl.learner.logprobs import packed_logprobs
from masdsl.learner.policies import cast_inputs_outside_autocast
from masdsl.models.load import load_model

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/learner/conftest.py


def lora_model(folder):
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    base, _ = load_model(folder, dtype="bfloat16")
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"), adapter_name="p")
    for n, p in model.named_parameters():
        p.requires_grad_("lora_" in n)
        if "lora_B" in n:  # peft starts B at zero; a nonzero B makes the adapter's path count
            torch.nn.init.normal_(p, std=0.05)
    return model


def logprobs_and_grads(model):
    prompts, group_of_row = [[5, 9, 12, 7]], [0, 0, 0]
    responses = [[3, 4, 8], [6, 2], [11, 10, 13, 14]]
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logp, mask = packed_logprobs(model, prompts, group_of_row, responses, pad_id=0)
    (logp * mask).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logp.detach(), grads


def test_skipping_the_cast_under_autocast_changes_no_log_prob_and_no_gradient(tiny_model_dir):
    model = lora_model(tiny_model_dir)
    assert {p.dtype for n, p in model.named_parameters() if "lora_" in n} == {torch.float32}
    cast_logp, cast_grads = logprobs_and_grads(model)
    assert cast_inputs_outside_autocast(model) > 0
    logp, grads = logprobs_and_grads(model)
    assert torch.equal(logp, cast_logp)
    assert grads.keys() == cast_grads.keys() and len(grads) > 0
    for n, g in grads.items():
        assert torch.equal(g, cast_grads[n]), n


def test_outside_autocast_the_float32_adapter_still_takes_a_bfloat16_input(tiny_model_dir):
    model = lora_model(tiny_model_dir)
    cast_inputs_outside_autocast(model)  # a plain False here: "expected m1 and m2 to have the same dtype"
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([[5, 9, 12, 7]])).logits
    assert logits.dtype == torch.bfloat16 and torch.isfinite(logits).all()
