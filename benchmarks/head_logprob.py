"""The LM head's log-prob of the sampled token, forward and backward, for one logit chunk:
masdsl's `TokenLogProb` against autograd's chain (upcast, `gather` - `logsumexp`), alternating
in one process, with Qwen2.5's head shape (vocabulary 151,936, width 896) in bfloat16.

    .venv/bin/python benchmarks/head_logprob.py [--tokens 220] [--rounds 6]

Prints each path's seconds per chunk (the head's two matmuls included) and how far apart the two
paths' values and gradients are (float32 rounding: `TokenLogProb` sums the log-sum-exp over
slices of the vocabulary in another order).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from masdsl.learner.logit_chunks import TokenLogProb, at_least_float32


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=220)
    ap.add_argument("--vocab", type=int, default=151_936)
    ap.add_argument("--width", type=int, default=896)
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args()
    torch.manual_seed(0)
    head = torch.randn(args.vocab, args.width, dtype=torch.bfloat16) * 0.02
    target = torch.randint(0, args.vocab, (args.tokens,))

    def chain(h: torch.Tensor) -> torch.Tensor:
        logits = at_least_float32(h @ head.t())
        return logits.gather(-1, target.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)

    def fused(h: torch.Tensor) -> torch.Tensor:
        return TokenLogProb.apply(h @ head.t(), target)

    times: dict[str, list[float]] = {"autograd chain": [], "TokenLogProb": []}
    for i in range(args.rounds + 1):
        for name, fn in (("autograd chain", chain), ("TokenLogProb", fused)):
            h = torch.randn(args.tokens, args.width, dtype=torch.bfloat16, requires_grad=True)
            t0 = time.perf_counter()
            fn(h).sum().backward()
            if i:  # the first round warms up
                times[name].append(time.perf_counter() - t0)
    h = torch.randn(args.tokens, args.width, dtype=torch.bfloat16, requires_grad=True)
    (a, ga), (b, gb) = ((out, torch.autograd.grad(out.sum(), h)[0]) for out in (chain(h), fused(h)))
    for name, ts in times.items():
        print(f"{name}: median {statistics.median(ts):.3f} s per {args.tokens}-token chunk ({', '.join(f'{t:.3f}' for t in ts)})")
    print(f"max |value difference| {float((a - b).abs().max().detach()):.3g}, max |gradient difference| {float((ga - gb).abs().max()):.3g}")


if __name__ == "__main__":
    main()
