"""How far the sampler's log-probs are from the trainer's: the measurement behind `train.old_logprobs`.

    .venv/bin/python benchmarks/logprob_gap.py [--engine vllm|hf] [--prompts 8] [--k 4] [--max-tokens 64]

Samples K responses per prompt from the embedded model with the chosen engine (float32), then
recomputes every sampled token's log-prob with the learner's forward pass (`sequence_logprobs`)
in float32 and in bfloat16 autocast over float32 weights (what the learner does with
`runtime.dtype=bfloat16`). Prints the mean and max |engine - trainer| per token.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys

PROMPTS = [
    "Write a Python function that returns the sum of a list.",
    "What is the capital of France?",
    "Walk to the goal on the 5x5 grid. Reply with the moves as a JSON list.",
    "Explain recursion in one sentence.",
    "Write assert statements that test a function add(a, b).",
    "List three prime numbers.",
    "Complete: def is_even(n):",
    "Say hello in French.",
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", default="vllm", choices=("vllm", "hf"))
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=64)
    args = ap.parse_args()

    import torch

    from masdsl.learner.logprobs import sequence_logprobs
    from masdsl.runtime.backends import build_engine, hf_engine_on
    from masdsl.runtime.backends.base import GenRequest
    from masdsl.models.load import load_model, resolve_model

    path = str(resolve_model("smollm2-135m-instruct"))
    model, tok = load_model(path)
    engine = (build_engine("vllm", path, seed=0, dtype="float32", device="cpu") if args.engine == "vllm"
              else hf_engine_on(model, tok, seed=0))
    prompts = [tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True)
               for p in PROMPTS[: args.prompts]]
    prompts = [p if isinstance(p, list) else p["input_ids"] for p in prompts]
    reqs = [GenRequest(prompt_ids=list(p), n=args.k, temperature=1.0, top_p=1.0, max_tokens=args.max_tokens,
                       stop=[], seed=i) for i, p in enumerate(prompts)]
    outs = engine.generate(reqs)
    rows = [(list(p), c.token_ids, c.logprobs) for p, cands in zip(prompts, outs) for c in cands if c.token_ids]
    engine.close()
    for label, ctx in (("float32", contextlib.nullcontext()),
                       ("bfloat16 autocast", torch.autocast("cpu", dtype=torch.bfloat16))):
        diffs = []
        with torch.no_grad(), ctx:
            for i in range(0, len(rows), 8):
                chunk = rows[i : i + 8]
                lp, _ = sequence_logprobs(model, [r[0] for r in chunk], [r[1] for r in chunk], tok.pad_token_id)
                for j, (_, resp, eng) in enumerate(chunk):
                    diffs += [abs(a - b) for a, b in zip(eng, lp[j, : len(resp)].float().tolist())]
        print(f"{args.engine} sampler vs trainer ({label}): {len(diffs)} tokens, mean |diff| "
              f"{statistics.mean(diffs):.2e}, max {max(diffs):.2e}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
