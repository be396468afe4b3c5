"""masdsl's update against a plain torch + peft loop on the same rows, with MFU against a matrix
product's peak measured in the same process (issue 29, item 3's update anchor).

    .venv/bin/python benchmarks/update_throughput.py [--model qwen2.5-coder-0.5b-instruct]
        [--random-weights] [--device cpu|cuda] [--dtype float32|bfloat16] [--lora 16]
        [--lora-input-cast autocast|always] [--prompts 4] [--k 4] [--prompt-tokens 300] [--response-tokens 128]
        [--micro-batch-tokens 4096] [--repeats 3] [--logits chunked|fused|whole|ROWSxPOSITIONS] [--out benchmarks/results/update_throughput.json]

`--model` is a built-in name or a model folder; `--random-weights` builds the model from the
folder's config.json with random weights (the same shapes, so the same time and memory), which
lets a machine that cannot hold the weights file (a device machine, 64 MiB carried) measure it:
a folder with config.json and the tokenizer's files is enough. `--lora 0` trains every weight.

Two paths, each in a fresh process (its own peak memory), on the same random rows: `--prompts`
prompts of about `--prompt-tokens` tokens, each with `--k` responses of about `--response-tokens`
(issue 29's step shape), advantages +-1:

- `masdsl`: `masdsl.learner.update.update_policy` with the default recipe (an optimizer step per
  `--mini-batch` rows, 16, PPO-clip, float32 master weights under autocast for a half dtype, chunked log-probs,
  a group's prompt run once for its K responses);
- `plain`: what a user writes with torch and peft: each row's prompt + response through the model
  (padded micro-batches of at most `--micro-batch-tokens` tokens), the full logits, log_softmax,
  gather, the same PPO-clip loss, backward, gradient clipping, AdamW (fused, as masdsl's), an
  optimizer step per `--mini-batch` rows as masdsl's (until 2026-12-04 the plain loop took one
  step over all rows, so on shapes of more than 16 rows it did less work than masdsl).

Each path runs one warm-up update, then `--repeats` timed ones (CUDA synchronised). Reported:
seconds per update (median) and, for masdsl, the part spent fixing old log-probs (a forward of
its own, which the recipe runs for a half dtype and the plain loop skips); response tokens per
second of the training part; peak memory (CUDA: `max_memory_allocated`; CPU: the process's
resident high-water mark); MFU: the FLOPs the update needs (below) over its seconds, over the
peak of a `torch.mm` in the compute dtype timed in the same process. The FLOPs needed are counted
the same for both paths, from the rows: every distinct prompt token and every response token
through the non-embedding weights N (forward 2N a token; backward 4N for full weights, 2N with
LoRA, whose frozen weights need no weight gradient) and the response tokens through the output
layer (2 d V forward, the same factor for backward). Attention's own FLOPs are left out (they
are small at these lengths), so MFU is a slight underestimate for both paths alike.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from step_memory import meminfo_gb, peak_gb, rows  # noqa: E402  (a script beside this one)


def sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def mm_peak_tflops(device: str, dtype: str, n: int) -> float:
    """TFLOP/s of an n x n x n `torch.mm` in `dtype` on `device` (median of 10 after 3 warm-ups)."""
    import torch

    a = torch.randn(n, n, device=device, dtype=getattr(torch, dtype))
    b = torch.randn(n, n, device=device, dtype=getattr(torch, dtype))
    times = []
    for i in range(13):
        sync(device)
        t0 = time.perf_counter()
        torch.mm(a, b)
        sync(device)
        if i >= 3:
            times.append(time.perf_counter() - t0)
    return 2 * n ** 3 / statistics.median(times) / 1e12


def load(args: argparse.Namespace):
    """(model, tokenizer, folder) on the device as masdsl's trainer holds it: full weights as float32
    masters; with LoRA, the frozen base in the compute dtype (`--dtype`) and the adapter in float32."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from masdsl.lang.workflow import LoraSettings
    from masdsl.learner.policies import cast_inputs_outside_autocast
    from masdsl.models.load import contiguous_head_input, load_model, resolve_model

    weights = args.dtype if args.lora else "float32"  # a LoRA base is frozen in the compute dtype (load_policies)
    torch.manual_seed(0)
    if args.random_weights:
        folder = Path(args.model)
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder), dtype=getattr(torch, weights))
        tok = AutoTokenizer.from_pretrained(folder)
        tok.pad_token = tok.pad_token or tok.eos_token
        contiguous_head_input(model)  # as load_model does for the trainer
        model = model.to(args.device).eval()
    else:
        folder = resolve_model(args.model)
        model, tok = load_model(folder, dtype=weights, device=args.device)
    if args.lora:
        lora = LoraSettings.of({"r": args.lora})
        model = get_peft_model(model, LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                                                 target_modules=lora.target_modules, task_type="CAUSAL_LM"),
                               adapter_name="p")
        for n, p in model.named_parameters():
            p.requires_grad_("lora_" in n)
        if args.lora_input_cast == "autocast" and args.path == "masdsl":  # as load_policies sets the trainer's; the plain loop keeps peft's
            cast_inputs_outside_autocast(model)
    return model, tok, str(folder)


def needed_flops(model, recs, lora: bool) -> float:
    """The update's FLOPs counted from the rows alone (module docstring), the same for both paths."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    emb = base.get_input_embeddings().weight
    non_embedding = sum(p.numel() for n, p in base.named_parameters()
                        if "lora_" not in n and p is not emb and "lm_head" not in n and "embed" not in n)
    prompts = {tuple(r.prompt_ids) for r in recs}
    through = sum(len(p) for p in prompts) + sum(len(r.response_ids) for r in recs)
    responses = sum(len(r.response_ids) for r in recs)
    backward = 1.0 if lora else 2.0  # times the forward
    forward = 2 * non_embedding * through + 2 * emb.shape[0] * emb.shape[1] * responses
    return forward * (1 + backward)


def plain_update(model, optimizer, recs, adv, budget: int, device: str, dtype: str, pad_id: int,
                 mini_batch: int) -> None:
    """PPO-clip as a plain torch loop, one optimizer step per `mini_batch` rows (0: all of them),
    as masdsl's recipe steps: full sequences, full logits."""
    size = mini_batch or len(recs)
    for start in range(0, len(recs), size):
        plain_step(model, optimizer, recs[start:start + size], adv[start:start + size], budget, device, dtype, pad_id)


def plain_step(model, optimizer, recs, adv, budget: int, device: str, dtype: str, pad_id: int) -> None:
    """One PPO-clip optimizer step over `recs`."""
    import contextlib

    import torch

    half = dtype in ("bfloat16", "float16")
    autocast = torch.autocast(device, dtype=getattr(torch, dtype)) if half else contextlib.nullcontext()
    n_tokens = sum(len(r.response_ids) for r in recs)
    batches, current = [], []
    for i, r in enumerate(recs):
        longest = max([len(recs[j].prompt_ids) + len(recs[j].response_ids) for j in current + [i]])
        if current and longest * (len(current) + 1) > budget:
            batches.append(current)
            current = []
        current.append(i)
    batches.append(current)
    optimizer.zero_grad(set_to_none=True)
    for idx in batches:
        seqs = [recs[i].prompt_ids + recs[i].response_ids for i in idx]
        width = max(len(s) for s in seqs)
        ids = torch.tensor([[pad_id] * (width - len(s)) + s for s in seqs], device=device)
        attn = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in seqs], device=device)
        resp = max(len(recs[i].response_ids) for i in idx)
        mask = torch.tensor([[0] * (resp - len(recs[i].response_ids)) + [1] * len(recs[i].response_ids)
                             for i in idx], device=device, dtype=torch.float32)
        # left-padded: every row's response ends at the last position
        resp_ids = torch.tensor([[pad_id] * (resp - len(recs[i].response_ids)) + recs[i].response_ids
                                 for i in idx], device=device)
        with autocast:
            logits = model(input_ids=ids, attention_mask=attn).logits[:, -resp - 1:-1]
        logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, resp_ids.unsqueeze(-1)).squeeze(-1)
        a = torch.tensor([adv[i] for i in idx], device=device).unsqueeze(-1)
        ratio = torch.exp(logp - logp.detach())
        loss = -(torch.minimum(ratio * a, ratio.clamp(0.8, 1.2) * a) * mask).sum() / n_tokens
        loss.backward()
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
    optimizer.step()


def replayed(path: str, step: int, grouping: str, live_groups: int = 0) -> tuple[list, list[float]]:
    """A real rollout's rows and the advantages the trainer gave them: step `step`'s records of a
    run folder's records.jsonl, grouped and scored by masdsl's own `group_records` and
    `compute_advantages` (flat groups get 0 and stay out of the forward, as in training)."""
    from masdsl.learner.advantages import compute_advantages
    from masdsl.learner.grouping import group_records
    from masdsl.runtime.records import read_records

    recs = [r for r in read_records(Path(path)) if r.step == step]
    if not recs:
        raise SystemExit(f"{path}: no records of step {step}")
    for r in recs:  # one policy, whatever the run called it: the benchmark trains one model
        r.policy = "p"
    groups = group_records(recs, grouping)
    adv, _ = compute_advantages(groups, len(recs))
    if live_groups:  # N of the groups that train, evenly spread over the step (roles and turns alike)
        live = [g for g in groups if any(adv[i] != 0.0 for i in g.indices)]
        chosen = [live[round(j * len(live) / live_groups)] for j in range(min(live_groups, len(live)))]
        keep = sorted(i for g in chosen for i in g.indices)
        recs, adv = [recs[i] for i in keep], [adv[i] for i in keep]
    return recs, adv


def alternate(args: argparse.Namespace, policy, optimizer, recs, adv) -> int:
    """`--alternate KEY=A,B`: masdsl's update with KEY=A, then KEY=B, round after round, in this one
    process; prints each value's median seconds (and its old-log-prob part) and B's time over A's."""
    from masdsl.config import resolve_config
    from masdsl.learner.update import update_policy

    key, values = args.alternate.split("=", 1)
    base = [f"train.micro_batch_tokens={args.micro_batch_tokens}", f"train.mini_batch_size={args.mini_batch}", *args.set]
    tcs = {v: resolve_config(overrides=[*base, f"{key}={v}"]).train for v in values.split(",")}
    seconds: dict[str, list[float]] = {v: [] for v in tcs}
    old: dict[str, list[float]] = {v: [] for v in tcs}
    for i in range(args.warmup + args.repeats):
        for v, tc in tcs.items():
            t0 = time.perf_counter()
            stats = update_policy(policy, optimizer, recs, adv, tc)
            if i >= args.warmup:
                seconds[v].append(time.perf_counter() - t0)
                old[v].append(stats.old_logprobs_s)
            print(f"round {i} {key}={v}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    med = {v: statistics.median(t) for v, t in seconds.items()}
    a, b = list(med)
    print(json.dumps({"path": "masdsl", "alternate": key, "update_s": {v: round(t, 3) for v, t in med.items()},
                      "old_logprobs_s": {v: round(statistics.median(t), 3) for v, t in old.items()},
                      "all_s": {v: [round(x, 3) for x in t] for v, t in seconds.items()},
                      "b_over_a": round(med[b] / med[a], 4), "rows": len(recs),
                      "trained_rows": sum(1 for x in adv if x != 0.0),
                      "response_tokens": sum(len(r.response_ids) for r, x in zip(recs, adv) if x != 0.0),
                      "peak_gb": round(peak_gb(), 3)}), flush=True)
    return 0


def child(args: argparse.Namespace) -> int:
    import torch

    from masdsl.config import resolve_config
    from masdsl.learner.policies import Policy
    from masdsl.learner.update import update_policy
    from masdsl.learner.workers import build_optimizer

    from masdsl.learner.logit_chunks import LOGITS, WHOLE, Chunks

    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    if args.logits == "whole":
        LOGITS.set(WHOLE)
    elif args.logits == "fused":  # the fused head where it applies (`LinearTokenLogProb`)
        LOGITS.set(Chunks(fused=True))
    elif args.logits != "chunked":  # ROWSxPOSITIONS: chunks of that shape, the head as a module
        rows_, positions = (int(x) for x in args.logits.split("x"))
        LOGITS.set(Chunks(rows=rows_, positions=positions, fused=False))
    model, tok, folder = load(args)
    recs, adv = (replayed(args.records, args.step, args.grouping, args.live_groups) if args.records
                 else rows(tok, args.prompts, args.k, args.prompt_tokens, args.response_tokens))
    tc = resolve_config(overrides=[f"train.micro_batch_tokens={args.micro_batch_tokens}",
                                   f"train.mini_batch_size={args.mini_batch}", *args.set]).train
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = build_optimizer(trainable, tc)
    policy = Policy("p", None, sorted({r.role for r in recs}), model, tok, folder, adapter="p" if args.lora else None,
                    compute_dtype=args.dtype)
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    load_gb = (torch.cuda.memory_allocated() if args.device == "cuda" else 0) / (1 << 30)
    if args.alternate:
        return alternate(args, policy, optimizer, recs, adv)
    times, old_s = [], []
    for i in range(args.warmup + args.repeats):
        sync(args.device)
        t0 = time.perf_counter()
        if args.path == "masdsl" and args.profile and i == args.warmup + args.repeats - 1:  # the last, taken apart
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CPU]) as prof:
                stats = update_policy(policy, optimizer, recs, adv, tc)
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.profile), file=sys.stderr)
            old = stats.old_logprobs_s if stats.old_logprobs_s == stats.old_logprobs_s else 0.0
        elif args.path == "masdsl":
            stats = update_policy(policy, optimizer, recs, adv, tc)
            sync(args.device)
            old = stats.old_logprobs_s if stats.old_logprobs_s == stats.old_logprobs_s else 0.0
        else:
            model.train()
            plain_update(model, optimizer, recs, adv, args.micro_batch_tokens, args.device, args.dtype, pad,
                         args.mini_batch)
            sync(args.device)
            model.eval()
            old = 0.0
        if i >= args.warmup:
            times.append(time.perf_counter() - t0)
            old_s.append(old)
    peak = (torch.cuda.max_memory_allocated() / (1 << 30) if args.device == "cuda" else peak_gb())
    update_s, old_logprobs_s = statistics.median(times), statistics.median(old_s)
    train_s = update_s - old_logprobs_s
    flops = needed_flops(model, [r for r, a in zip(recs, adv) if a != 0.0], bool(args.lora))  # the rows that run
    # the peak in the compute dtype on either device: an AMX CPU's bfloat16 peak is 5-7x its float32 one
    tflops = mm_peak_tflops(args.device, args.dtype, 8192 if args.device == "cuda" else 2048)
    responses = sum(len(r.response_ids) for r in recs)
    print(json.dumps({
        "path": args.path, "update_s": round(update_s, 4), "old_logprobs_s": round(old_logprobs_s, 4),
        "train_s": round(train_s, 4), "all_s": [round(t, 4) for t in times],
        "response_tokens": responses, "train_tokens_per_s": round(responses / train_s, 1),
        "peak_gb": round(peak, 3), "weights_gb": round(load_gb, 3), "needed_tflop": round(flops / 1e12, 3),
        "mm_peak_tflops": round(tflops, 2), "mfu": round(flops / train_s / (tflops * 1e12), 4),
        "rows": len(recs)}), flush=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    ap.add_argument("--random-weights", action="store_true")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--lora", type=int, default=16, help="LoRA rank; 0: train every weight")
    ap.add_argument("--lora-input-cast", default="autocast", choices=["autocast", "always"],
                    help="LoRA layers cast their input to the adapter's dtype outside autocast only (masdsl's "
                         "setting, `cast_inputs_outside_autocast`) or always (peft's own, masdsl's until 2026-12-07)")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--prompt-tokens", type=int, default=300)
    ap.add_argument("--response-tokens", type=int, default=128)
    ap.add_argument("--micro-batch-tokens", type=int, default=4096)
    ap.add_argument("--mini-batch", type=int, default=16,
                    help="rows per optimizer step on both paths (the recipe's 16; 0: all rows in one step)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--logits", default="chunked",
                    help="masdsl's log-prob path: chunked (the default chunk size, the head as a module), fused "
                         "(the fused head where it applies), ROWSxPOSITIONS (chunks of that shape) or whole (the full logits)")
    ap.add_argument("--records", help="replay a real rollout: a run folder's records.jsonl (with --step)")
    ap.add_argument("--step", type=int, default=1, help="which step's records --records replays")
    ap.add_argument("--live-groups", type=int, default=0,
                    help="with --records: only N of the step's groups that train (0: the whole step)")
    ap.add_argument("--grouping", default="at", help="how --records' rows are grouped (train.grouping)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a train.* override for masdsl's path (e.g. train.pack_rows=false); repeatable")
    ap.add_argument("--warmup", type=int, default=1, help="untimed updates first")
    ap.add_argument("--alternate", help="KEY=A,B: masdsl's path only, one process, updates alternating the "
                    "train.* setting KEY between A and B (each --warmup + --repeats times): an A/B that load drift "
                    "on a shared machine hits alike")
    ap.add_argument("--profile", type=int, default=0,
                    help="masdsl path: take its last update apart with torch.profiler, print the N costliest ops")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--paths", default="masdsl,plain")
    ap.add_argument("--out", default="benchmarks/results/update_throughput.json")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        args.path = args.child
        return child(args)
    runs = []
    for path in args.paths.split(","):
        done = subprocess.run([sys.executable, __file__, *sys.argv[1:], "--child", path], capture_output=True, text=True)
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
        if args.profile:
            sys.stderr.write(done.stderr[-30000:])
        run = json.loads(lines[-1]) if lines else {"path": path, "error": done.stderr[-3000:]}
        run["exit"] = done.returncode
        print(json.dumps(run), flush=True)
        runs.append(run)
    setting = {k: getattr(args, k) for k in ("model", "random_weights", "device", "dtype", "lora", "lora_input_cast", "logits", "prompts", "k",
                                             "prompt_tokens", "response_tokens", "micro_batch_tokens", "repeats",
                                             "mini_batch", "records", "step", "grouping", "set", "warmup", "live_groups", "alternate")}
    setting["model"] = Path(args.model).name
    key = json.dumps(setting, sort_keys=True)
    out = Path(args.out)
    old = json.loads(out.read_text()) if out.is_file() else []
    merged = [r for r in old if json.dumps(r["setting"], sort_keys=True) != key]
    merged.append({"setting": setting, "command": " ".join(["python", *sys.argv]), "cores": os.cpu_count(),
                   "memory_gb": round(meminfo_gb("MemTotal"), 1), "load_avg_1m": round(os.getloadavg()[0], 2),
                   "runs": runs})
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(merged, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
