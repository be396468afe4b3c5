"""Shared checks for the engine tests (hf and vllm): chat prompt ids, teacher-forced log-probs, a model edit that makes one token certain."""

from __future__ import annotations


def chat_ids(tokenizer, text: str) -> list[int]:
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True, return_dict=False
    )
    return list(ids)


def teacher_forced_logprobs(model, prompt_ids: list[int], token_ids: list[int]) -> list[float]:
    """log_softmax of one plain forward pass over prompt + response, at the response ids."""
    import torch

    ids = torch.tensor([prompt_ids + token_ids])
    with torch.no_grad():
        logp = model(ids).logits[0].float().log_softmax(-1)
    p = len(prompt_ids)
    return logp[p - 1 : -1].gather(1, torch.tensor(token_ids)[:, None]).squeeze(1).tolist()


def make_token_certain(model, token: int) -> None:
    """Edit a tiny (untied) Llama in place so that `token` has probability ~1 at every step.

    A huge constant in residual dimension 0 (added by every embedding) dominates the final
    RMSNorm, so the normed hidden state is ~ sqrt(d) * e_0; the LM head then reads dimension 0
    only for `token`.
    """
    import torch

    with torch.no_grad():
        model.get_input_embeddings().weight[:, 0] += 1000.0
        head = model.get_output_embeddings().weight
        head[:, 0] = 0.0
        head[token, 0] = 5.0
