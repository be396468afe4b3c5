"""Every phase of one GRPO step beside its anchor (issue 29, item 3).

    .venv/bin/python benchmarks/step_breakdown.py --model smollm2-135m-instruct --lora 0 \
        [--engine vllm|hf] [--device cpu|cuda] [--dtype float32|bfloat16] [--random-weights] [--k 4] [--max-tokens 64] \
        [--steps 3] [--set runtime.lora_sync=merged ...] --json benchmarks/results/step_breakdown_X.json

Three parts, each in a fresh process:

- `ours`: masdsl's trainer as a user runs it (`benchmarks/vs_trl.py`'s single-agent workflow:
  8 prompts x K, at most `--max-tokens` new tokens, temperature 1, the length reward that is never
  flat; 16-row PPO mini-batches). Per step after the first (a warm-up): the rollout, its engine
  calls (`time/engine_s`) and env steps (`time/env_s`), the update (its old-log-prob pass
  apart), the weight or adapter sync, and the rest of the step (records, grouping, metrics,
  tracking, scheduling). The learner's peak resident memory is this process's high-water mark
  (with the hf engine the engine lives in it too; vLLM's engine core is a process of its own).
- `raw`: the anchor of the rollout, the same prompts (each user turn through the tokenizer's chat
  template) and sampling (n = K, temperature 1, no top-k/top-p, `--max-tokens`) through the
  engine's own API with nothing of masdsl around it: vLLM's `LLM.generate` on the very `vllm.LLM`
  masdsl builds (its settings are masdsl's), or transformers' `model.generate` on the plain model
  in the run's compute dtype (a LoRA adapter that has not trained is the base itself). One
  warm-up call, then the median of `--raw-repeats`.
- `update`: `benchmarks/update_throughput.py` on rows of the step's shape (8 prompts x K, the
  prompts' mean length, the mean response length the run generated): masdsl's `update_policy`
  against a plain torch + peft loop (forward, backward, AdamW) on the same rows, and the MFU of
  both against a `torch.mm` peak measured in the same process.

Written: the JSON (`--json`) and a markdown table on stdout for docs/performance.md
`## step breakdown`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from vs_trl import compute_dtype, random_weights_folder, run_ours  # noqa: E402  (scripts beside this one)
from vs_trl_env import PROMPTS  # noqa: E402


def chat_prompts(tok) -> list[list[int]]:
    """The benchmark's prompts as one user turn each, through the model's chat template."""
    return [list(tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=True,
                                         return_dict=False)) for p in PROMPTS]


def raw_vllm(opts: argparse.Namespace) -> dict:
    """`LLM.generate` on the `vllm.LLM` that masdsl's `VLLMEngine` builds with the run's settings."""
    from vllm import SamplingParams, TokensPrompt

    from masdsl.config import resolve_config
    from masdsl.runtime.backends import engine_kwargs, vllm_engine

    rt = resolve_config(overrides=[f"runtime.device={opts.device}", *_dtype(opts), *opts.overrides]).runtime
    engine = vllm_engine(opts.model, **engine_kwargs(rt, 0))
    prompts = [TokensPrompt(prompt_token_ids=ids) for ids in chat_prompts(engine.tokenizer)]
    params = SamplingParams(n=opts.k, temperature=1.0, top_p=1.0, top_k=0, max_tokens=opts.max_tokens, seed=0)

    def call() -> int:
        outs = engine.llm.generate(prompts, params, use_tqdm=False)
        return sum(len(c.token_ids) for o in outs for c in o.outputs)

    return _timed(call, opts.raw_repeats) | {"api": "vllm.LLM.generate", "prompt_tokens": _prompt_tokens(prompts)}


def raw_hf(opts: argparse.Namespace) -> dict:
    """transformers `generate` on the plain model in the compute dtype, every row in one batch."""
    import torch

    from masdsl.models.load import load_model

    dtype = compute_dtype(opts)
    model, tok = load_model(opts.model, dtype=dtype, device=opts.device)
    tok.padding_side = "left"
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    ids = [p for p in chat_prompts(tok) for _ in range(opts.k)]
    width = max(map(len, ids))
    batch = torch.tensor([[pad] * (width - len(p)) + p for p in ids], device=opts.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in ids], device=opts.device)

    def call() -> int:
        with torch.no_grad():
            out = model.generate(input_ids=batch, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0,
                                 top_p=1.0, max_new_tokens=opts.max_tokens, pad_token_id=pad)
        new = out[:, width:]
        stops = set(tok.all_special_ids)
        return sum(next((i for i, t in enumerate(row.tolist()) if t in stops), len(row)) for row in new)

    return _timed(call, opts.raw_repeats, opts.device) | {"api": "transformers generate", "dtype": dtype,
                                                          "prompt_tokens": sum(len(p) for p in chat_prompts(tok))}


def _dtype(opts: argparse.Namespace) -> list[str]:
    return [f"runtime.dtype={compute_dtype(opts)}"]


def _prompt_tokens(prompts: list) -> int:
    return sum(len(p["prompt_token_ids"]) for p in prompts)


def _timed(call, repeats: int, device: str = "cpu") -> dict:
    """Seconds and tokens per second of `call` (it returns the tokens it generated): one warm-up,
    then the median of `repeats`."""
    import torch

    call()
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        tokens = call()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        runs.append((time.perf_counter() - t0, tokens))
    seconds = statistics.median(s for s, _ in runs)
    tokens = statistics.median(t for _, t in runs)
    return {"seconds": round(seconds, 3), "tokens": tokens, "tokens_per_s": round(tokens / seconds, 1),
            "all": [[round(s, 3), t] for s, t in runs]}


def update_anchor(opts: argparse.Namespace, ours: dict) -> dict:
    """`update_throughput.py` on rows of the step's shape; its two paths' results by name."""
    tokens = statistics.mean(ours["completion_tokens"][1:] or ours["completion_tokens"])
    rows = len(PROMPTS) * opts.k
    out = Path(tempfile.mkdtemp(prefix="step-breakdown-")) / "update.json"
    cmd = [sys.executable, str(HERE / "update_throughput.py"), "--model", opts.model, "--device", opts.device,
           "--dtype", compute_dtype(opts), "--lora", str(opts.lora),
           "--prompts", str(len(PROMPTS)), "--k", str(opts.k), "--prompt-tokens", str(opts.prompt_tokens),
           "--response-tokens", str(max(1, round(tokens / rows))), "--micro-batch-tokens", str(opts.micro_batch_tokens),
           "--out", str(out), *(["--random-weights"] if opts.random_weights else [])]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    runs = json.loads(out.read_text())[-1]["runs"]
    return {r["path"]: r for r in runs} | {"command": " ".join(cmd[1:])}


def after_warmup(values: list[float]) -> float:
    return statistics.mean(values[1:] or values)


def breakdown(ours: dict, raw: dict, upd: dict) -> dict:
    """The phases of a mean step after the warm-up, each with its anchor where it has one."""
    step, rollout, engine = (after_warmup(ours[k]) for k in ("step_s", "rollout_s", "engine_s"))
    update, sync, old = (after_warmup(ours[k]) for k in ("update_s", "sync_s", "old_logprobs_s"))
    update -= sync  # `update_s` includes the sync
    tokens = after_warmup(ours["completion_tokens"])
    other = step - engine - update - sync
    out = {
        "step_s": step, "rollout_s": rollout, "engine_s": engine, "env_s": after_warmup(ours["env_s"]),
        "update_s": update, "old_logprobs_s": old, "sync_s": sync, "other_s": other, "other_share": other / step,
        "tokens": tokens, "rollout_tok_s": tokens / rollout, "engine_tok_s": tokens / engine,
        "raw_tok_s": raw["tokens_per_s"], "rollout_vs_raw": tokens / rollout / raw["tokens_per_s"],
        "learner_peak_rss_gb": ours["peak_rss_gb"],
    }
    if "masdsl" in upd and "plain" in upd:
        m, p = upd["masdsl"], upd["plain"]
        out |= {"update_tok_s_masdsl": m["response_tokens"] / m["update_s"],
                "update_tok_s_plain": p["response_tokens"] / p["update_s"],
                "update_vs_plain": p["update_s"] / m["update_s"], "mfu_masdsl": m["mfu"], "mfu_plain": p["mfu"],
                "mm_peak_tflops": m["mm_peak_tflops"], "update_peak_gb_masdsl": m["peak_gb"],
                "update_peak_gb_plain": p["peak_gb"]}
    if "peak_gpu_gb" in ours:
        out["peak_gpu_gb"] = ours["peak_gpu_gb"]
    return out


def markdown(name: str, b: dict) -> str:
    """One table row per phase: what it took, its anchor, and the ratio."""
    rows = [
        f"| {name}: step | {b['step_s']:.2f} s | | |",
        f"| rollout ({b['tokens']:.0f} tokens) | {b['rollout_s']:.2f} s, {b['rollout_tok_s']:.1f} tok/s "
        f"(engine calls {b['engine_s']:.2f} s) | raw {b['raw_tok_s']:.1f} tok/s | {b['rollout_vs_raw']:.2f}x |",
    ]
    if "update_vs_plain" in b:
        rows.append(f"| update (old log-probs {b['old_logprobs_s']:.2f} s) | {b['update_s']:.2f} s, "
                    f"{b['tokens'] / b['update_s']:.0f} tok/s; rows of its shape alone {b['update_tok_s_masdsl']:.0f} "
                    f"tok/s, MFU {100 * b['mfu_masdsl']:.1f} % | "
                    f"plain torch + peft {b['update_tok_s_plain']:.0f} tok/s, MFU {100 * b['mfu_plain']:.1f} % "
                    f"(mm peak {b['mm_peak_tflops']:.1f} TFLOP/s) | {b['update_vs_plain']:.2f}x |")
    rows += [f"| weight sync | {b['sync_s']:.3f} s | | |",
             f"| everything else | {b['other_s']:.2f} s ({100 * b['other_share']:.1f} % of the step) | | |",
             f"| learner peak RSS | {b['learner_peak_rss_gb']:.2f} GB | | |"]
    return "\n".join(rows)


def child(opts: argparse.Namespace) -> dict:
    if opts.part == "ours":
        opts.overrides = [f"train.micro_batch_tokens={opts.micro_batch_tokens}", f"runtime.engine={opts.engine}",
                          *opts.overrides]
        return run_ours(opts.steps, opts.engine, opts)
    return raw_vllm(opts) if opts.engine == "vllm" else raw_hf(opts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct", help="a built-in name or a model folder")
    ap.add_argument("--random-weights", action="store_true", help="random weights of the model's shapes")
    ap.add_argument("--lora", type=int, default=0, help="LoRA rank (0: full weights)")
    ap.add_argument("--engine", default="vllm", choices=("vllm", "hf"))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", choices=("float32", "bfloat16"),
                    help="the compute dtype of every part (default bfloat16 on cuda, float32 on cpu)")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--steps", type=int, default=3, help="training steps (the first is a warm-up)")
    ap.add_argument("--raw-repeats", type=int, default=2)
    ap.add_argument("--micro-batch-tokens", type=int, default=4096)
    ap.add_argument("--reward-cap", type=int, default=256)
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="a masdsl override (repeatable)")
    ap.add_argument("--parts", default="ours,raw,update")
    ap.add_argument("--json", help="write the result here")
    ap.add_argument("--part", help=argparse.SUPPRESS)
    opts = ap.parse_args()
    if opts.part:
        print("RESULT " + json.dumps(child(opts)), flush=True)
        return 0
    source = opts.model
    if opts.random_weights:
        opts.model = random_weights_folder(opts.model)
        opts.reward_cap = 64 * opts.max_tokens  # random text: never flat below this
    from transformers import AutoTokenizer

    from masdsl.models.load import resolve_model

    tok = AutoTokenizer.from_pretrained(opts.model if Path(opts.model).is_dir() else resolve_model(opts.model))
    opts.prompt_tokens = round(statistics.mean(len(p) for p in chat_prompts(tok)))
    result: dict = {"setting": {k: v for k, v in vars(opts).items() if k not in ("part", "json")} | {"model": source},
                    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cores": os.cpu_count()}
    passed = [a for a in sys.argv[1:] if a not in ("--random-weights",)]
    passed = _without(passed, ("--model", "--json", "--parts", "--reward-cap"))
    for part in ("ours", "raw"):
        if part not in opts.parts:
            continue
        proc = subprocess.run([sys.executable, __file__, *passed, "--model", opts.model, "--reward-cap",
                               str(opts.reward_cap), "--part", part], capture_output=True, text=True)
        line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
        if proc.returncode or not line:
            print(proc.stdout[-3000:], proc.stderr[-5000:], file=sys.stderr)
            return 1
        result[part] = json.loads(line[-1][7:])
        print(part, json.dumps(result[part]), flush=True)
    if "update" in opts.parts and "ours" in result:
        result["update"] = update_anchor(opts, result["ours"])
        print("update", json.dumps(result["update"]), flush=True)
    if "ours" in result and "raw" in result:
        result["breakdown"] = breakdown(result["ours"], result["raw"], result.get("update", {}))
        print(markdown(f"{Path(source).name}{f' + LoRA r{opts.lora}' if opts.lora else ''}", result["breakdown"]))
    result["load_avg_1m_end"] = round(os.getloadavg()[0], 2)
    if opts.json:
        Path(opts.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


def _without(args: list[str], flags: tuple[str, ...]) -> list[str]:
    """`args` without each of `flags` and its value."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a in flags:
            skip = True
        elif not any(a.startswith(f + "=") for f in flags):
            out.append(a)
    return out


if __name__ == "__main__":
    sys.exit(main())
