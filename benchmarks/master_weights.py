"""Does an AdamW step of lr 1e-6 survive bfloat16 weights? The measurement behind `train.master_weights`.

    .venv/bin/python benchmarks/master_weights.py [--lr 1e-6] [--steps 3]

Loads the embedded SmolLM2-135M-Instruct twice: all in bfloat16 (`train.master_weights=compute`,
what configs/paper.yaml used to run) and as float32 master weights (the default). Gives both the
same gradients (one backward pass of a short text, in bfloat16 autocast for the master copy) and
takes `--steps` AdamW steps. Prints the fraction of weights the steps changed (in the copy the
optimizer updates) and the mean |change| of those with a gradient, against `steps * lr` (what
AdamW's first steps move a weight by when nothing rounds away).
"""

from __future__ import annotations

import argparse
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lr", type=float, default=1e-6)
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()

    import torch

    from masdsl.models.load import load_model, resolve_model

    path = str(resolve_model("smollm2-135m-instruct"))
    text = "Write a Python function that returns the sum of a list of numbers."
    for label, dtype, autocast in (("bfloat16 weights", "bfloat16", False), ("float32 master weights", "float32", True)):
        torch.manual_seed(0)
        model, tok = load_model(path, dtype=dtype)
        ids = tok(text, return_tensors="pt").input_ids
        before = [p.detach().clone() for p in model.parameters()]
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
        for _ in range(args.steps):
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
        total = sum(b.numel() for b in before)
        changed = sum(int((p.detach() != b).sum()) for p, b in zip(model.parameters(), before))
        with_grad = [(p, b) for p, b in zip(model.parameters(), before) if p.grad is not None]
        drift = sum(float((p.detach().float() - b.float()).abs().sum()) for p, b in with_grad)
        drift /= sum(b.numel() for _, b in with_grad)
        print(f"{label}: {args.steps} AdamW steps at lr {args.lr}: {100 * changed / total:.2f} % of the "
              f"{total / 1e6:.1f} M weights changed; mean |change| {drift:.2e} (steps x lr = {args.steps * args.lr:.0e})",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
