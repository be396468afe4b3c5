"""Hand-made rollouts on a tiny model for the PPO update tests (no engine, no environment)."""

from __future__ import annotations

import random
import threading
from types import SimpleNamespace

import torch

from masdsl.learner.logprobs import sequence_logprobs
from masdsl.runtime.records import StepRecord


def make_policy(model, tok, compute_dtype="float32"):
    """What `update_policy` needs of a policy (one full model named `p`, no adapter)."""
    return SimpleNamespace(name="p", model=model, tokenizer=tok, lock=threading.Lock(), activate=lambda: None,
                           parameters=lambda m=model: [q for q in m.parameters() if q.requires_grad],
                           compute_dtype=compute_dtype, adapter=None)


def rollout_rows(model, tok, n_prompts=16, k=4, seed=0):
    """n_prompts decisions of K candidates each, with the sampler's log-probs = the model's."""
    rng = random.Random(seed)
    recs = []
    for g in range(n_prompts):
        prompt = [rng.randrange(5, 500) for _ in range(rng.randrange(3, 8))]
        for c in range(k):
            resp = [rng.randrange(5, 500) for _ in range(rng.randrange(2, 6))]
            recs.append(StepRecord(step=0, episode=g, task_id=f"t{g}", role="r", turn=0, node="r", candidate=c,
                                   selected=c == 0, policy="p", prompt_ids=prompt, response_ids=resp, logprobs=[],
                                   reward=float(rng.random()), reward_team=0.0, reward_local=0.0,
                                   finish_reason="stop", parse_ok=True))
    with torch.no_grad():
        lp, _ = sequence_logprobs(model, [r.prompt_ids for r in recs], [r.response_ids for r in recs],
                                  tok.pad_token_id)
    for i, r in enumerate(recs):
        r.logprobs = lp[i, : len(r.response_ids)].tolist()
    return recs
