"""The LM head's log-prob of the sampled token, forward and backward, for the response tokens of
one micro-batch, with Qwen2.5's head shape (vocabulary 151,936, width 896) in bfloat16, each path
in turn in one process:

- `module`: the head called as a module on chunks of 220 tokens, each chunk's logits reduced by
  `TokenLogProb` over vocabulary slices and recomputed in the backward (a checkpoint); the path
  a head with a LoRA adapter takes, and every head's before the fused one;
- `fused/<slice>`: `LinearTokenLogProb`, the head's matmul over slices of the vocabulary of
  <slice> logits each, no logits tensor (the default for a plain linear head on a CPU,
  `FUSED_SLICE_ELEMENTS`);
- `chain`: autograd's chain on one chunk's full logits (upcast, `gather` - `logsumexp`), for
  reference, only with `--chain`.

    .venv/bin/python benchmarks/head_logprob.py [--tokens 220 1024] [--slices 65536 262144 1048576] [--rounds 4]

Prints each path's seconds per micro-batch, forward + backward (as the update runs it) and
forward alone under `no_grad` (the old-log-prob pass), the head's useful TFLOP/s (2 matmuls
forward + backward: 4 x tokens x width x vocabulary, and 2 x for the forward alone), and how far
apart the paths' values and input gradients are (against the first path).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Callable

import torch

from masdsl.learner.logit_chunks import Chunks, LinearTokenLogProb, _chunked


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, nargs="+", default=[220, 1024])
    ap.add_argument("--slices", type=int, nargs="+", default=[1 << 16, 1 << 18, 1 << 20])
    ap.add_argument("--columns", type=int, nargs="*", default=[],
                    help="also fused paths of slices this many vocabulary columns wide, whatever the tokens")
    ap.add_argument("--no-module", action="store_true", help="leave out the module path (slow on several chunks)")
    ap.add_argument("--vocab", type=int, default=151_936)
    ap.add_argument("--width", type=int, default=896)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--json", type=Path, help="write the medians here")
    args = ap.parse_args()
    torch.manual_seed(0)
    head = torch.nn.Linear(args.width, args.vocab, bias=False).to(torch.bfloat16).requires_grad_(False)
    torch.nn.init.normal_(head.weight, std=0.02)
    results = []
    for tokens in args.tokens:
        target = torch.randint(0, args.vocab, (1, tokens))

        def module(h: torch.Tensor) -> torch.Tensor:
            return _chunked(head, h, target, Chunks(fused=False), {"inner": False})

        paths: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {} if args.no_module else {"module": module}
        for name, e in [*((f"fused/{e}", e) for e in args.slices), *((f"fused/{c}cols", c * tokens) for c in args.columns)]:
            paths[name] = (lambda e: lambda h: LinearTokenLogProb.apply(
                h.reshape(tokens, -1), head.weight, None, target.reshape(-1), torch.bfloat16, e).view(1, tokens))(e)
        times: dict[str, dict[str, list[float]]] = {name: {"train": [], "forward": []} for name in paths}
        for i in range(args.rounds + 1):
            for name, fn in paths.items():
                h = torch.randn(1, tokens, args.width, dtype=torch.bfloat16, requires_grad=True)
                t0 = time.perf_counter()
                fn(h).sum().backward()
                t1 = time.perf_counter()
                with torch.no_grad():
                    fn(h)
                t2 = time.perf_counter()
                if i:  # the first round warms up
                    times[name]["train"].append(t1 - t0)
                    times[name]["forward"].append(t2 - t1)
        h = torch.randn(1, tokens, args.width, dtype=torch.bfloat16, requires_grad=True)
        ref = next(iter(paths.values()))(h)  # the first path's values and gradient: the reference
        (ref_grad,) = torch.autograd.grad(ref.sum(), h)
        flops = 2 * tokens * args.width * args.vocab
        for name, ts in times.items():
            train, fwd = statistics.median(ts["train"]), statistics.median(ts["forward"])
            out = paths[name](h)
            (grad,) = torch.autograd.grad(out.sum(), h)
            row = {"tokens": tokens, "path": name, "train_s": train, "forward_s": fwd,
                   "train_tflops": 2 * flops / train / 1e12, "forward_tflops": flops / fwd / 1e12,
                   "max_value_diff": float((out - ref).abs().max().detach()),
                   "max_grad_diff": float((grad.float() - ref_grad.float()).abs().max())}
            results.append(row)
            print(f"{tokens:>5} tokens  {name:<14} train {train:.3f} s ({row['train_tflops']:.2f} TFLOP/s)  "
                  f"forward {fwd:.3f} s ({row['forward_tflops']:.2f})  "
                  f"|dvalue| {row['max_value_diff']:.2g} |dgrad| {row['max_grad_diff']:.2g}  "
                  f"[{', '.join(f'{t:.3f}' for t in ts['train'])}]")
    if args.json:
        args.json.write_text(json.dumps({"torch_threads": torch.get_num_threads(), "rows": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
