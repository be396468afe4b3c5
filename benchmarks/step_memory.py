"""The learner's peak resident memory and time of one LoRA update: chunked log-probs against the
full-logits path (issue 29), and the `train.micro_batch_tokens` budget.

    .venv/bin/python benchmarks/step_memory.py [--paths chunked,whole] [--budgets 4096,2048]
        [--model qwen2.5-coder-0.5b-instruct] [--prompts 4] [--k 4] [--prompt-tokens 300]
        [--response-tokens 128] [--threads 2] [--cap-gb 13] [--out benchmarks/results/step_memory.json]

Each (path, budget) runs in a fresh process: it loads the model in float32 with a LoRA adapter as
a policy's `lora: { r: 16 }` block makes one (alpha 32, peft's all-linear), then runs one
`update_policy` (the default recipe: one optimizer step of 16 rows, PPO-clip, no KL) on
`--prompts` random prompts of about `--prompt-tokens` tokens with `--k` responses of about
`--response-tokens` each, issue 29's step shape (4 boards x K 4, prompts ~300, responses ~128).
`whole` is the full-logits path (`masdsl.learner.logit_chunks.LOGITS.set(WHOLE)`), `chunked` the
default. Reported per run: the process's resident memory after loading (`load_gb`), its peak
over the whole run (`peak_gb`, the kernel's high-water mark `ru_maxrss`), the update's extra
(`peak_gb - load_gb`) and its wall seconds. A watchdog stops a run whose resident memory passes
`--cap-gb`, or when the machine's available memory falls under 1.5 GB (other work shares it):
the run is then recorded as stopped, with what it had reached. The runs go one after another;
each is merged into `--out` (a (path, budget) measured again replaces its older run).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

GB = 1 << 30
FLOOR_GB = 1.5  # the machine's available memory under which a run stops (other work shares it)


def meminfo_gb(key: str) -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024 / GB
    return float("nan")


def rss_gb() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / GB


def peak_gb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GB


def watchdog(cap_gb: float, report: dict) -> None:
    """Stop this process (exit 3, one JSON line) past `cap_gb` resident or under the machine's floor."""
    def watch() -> None:
        while True:
            rss, avail = rss_gb(), meminfo_gb("MemAvailable")
            if rss > cap_gb or avail < FLOOR_GB:
                why = f"resident {rss:.2f} GB > cap {cap_gb}" if rss > cap_gb else f"machine available {avail:.2f} GB"
                print(json.dumps({**report, "stopped": why, "peak_gb": round(peak_gb(), 3)}), flush=True)
                os._exit(3)
            time.sleep(0.02)

    threading.Thread(target=watch, daemon=True).start()


def rows(tok, prompts: int, k: int, prompt_tokens: int, response_tokens: int, seed: int = 0):
    """Random ordinary-token prompts (90-100 % of `prompt_tokens`) and responses (75-100 %)."""
    import random

    from masdsl.runtime.records import StepRecord

    rng = random.Random(seed)
    top = min(len(tok), 100_000)
    low = 1000 if top > 2000 else 5  # past the special and byte tokens (a tiny test vocabulary: 5)
    recs, adv = [], []
    for g in range(prompts):
        prompt = [rng.randrange(low, top) for _ in range(rng.randint(int(0.9 * prompt_tokens), prompt_tokens))]
        for c in range(k):
            resp = [rng.randrange(low, top) for _ in range(rng.randint(int(0.75 * response_tokens), response_tokens))]
            recs.append(StepRecord(step=0, episode=g, task_id=str(g), role="r", turn=0, node="r", candidate=c,
                                   selected=True, policy="p", prompt_ids=prompt, response_ids=resp,
                                   logprobs=[float("nan")] * len(resp), reward=0.0, reward_team=0.0,
                                   reward_local=0.0, finish_reason="stop", parse_ok=True))
            adv.append(1.0 if c % 2 else -1.0)
    return recs, adv


def child(args: argparse.Namespace) -> int:
    """One run: load, one update, one JSON line."""
    report = {"path": args.path, "micro_batch_tokens": args.budget, "threads": args.threads}
    watchdog(args.cap_gb, report)
    import torch
    from peft import LoraConfig, get_peft_model

    from masdsl.config import resolve_config
    from masdsl.learner.logit_chunks import LOGITS, WHOLE
    from masdsl.learner.policies import Policy
    from masdsl.learner.update import update_policy
    from masdsl.learner.workers import build_optimizer
    from masdsl.lang.workflow import LoraSettings
    from masdsl.models.load import load_model, resolve_model

    torch.set_num_threads(args.threads)
    if args.path == "whole":
        LOGITS.set(WHOLE)
    path = str(resolve_model(args.model))
    model, tok = load_model(path, dtype="float32")
    lora = LoraSettings.of({"r": 16})
    torch.manual_seed(0)  # the same adapter in every run: the grad norms compare across paths
    model = get_peft_model(model, LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                                             target_modules=lora.target_modules, task_type="CAUSAL_LM"),
                           adapter_name="p")
    for n, p in model.named_parameters():
        p.requires_grad_("lora_" in n)
    policy = Policy("p", None, ["r"], model, tok, path, adapter="p")
    tc = resolve_config(overrides=[f"train.micro_batch_tokens={args.budget}"]).train
    recs, adv = rows(tok, args.prompts, args.k, args.prompt_tokens, args.response_tokens)
    report.update(load_gb=round(rss_gb(), 3), rows=len(recs), vocab=len(tok),
                  response_tokens=sum(len(r.response_ids) for r in recs),
                  prompt_tokens=sum(len(recs[g * args.k].prompt_ids) for g in range(args.prompts)))
    t0 = time.perf_counter()
    stats = update_policy(policy, build_optimizer(policy.parameters(), tc), recs, adv, tc)
    report.update(update_s=round(time.perf_counter() - t0, 2), peak_gb=round(peak_gb(), 3),
                  optimizer_steps=stats.optimizer_steps, loss=stats.loss, grad_norm=stats.grad_norm)
    report["update_extra_gb"] = round(report["peak_gb"] - report["load_gb"], 3)
    print(json.dumps(report), flush=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--paths", default="chunked,whole")
    ap.add_argument("--budgets", default="4096")
    ap.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--prompt-tokens", type=int, default=300)
    ap.add_argument("--response-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--cap-gb", type=float, default=13.0)
    ap.add_argument("--out", default="benchmarks/results/step_memory.json")
    ap.add_argument("--child", nargs=2, metavar=("PATH", "BUDGET"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        args.path, args.budget = args.child[0], int(args.child[1])
        return child(args)
    from masdsl.models.load import resolve_model

    resolve_model(args.model)  # the one-time conversion, before any run is timed
    runs = []
    for budget in [int(b) for b in args.budgets.split(",")]:
        for path in args.paths.split(","):
            before = {"available_gb": round(meminfo_gb("MemAvailable"), 2), "load_avg_1m": os.getloadavg()[0]}
            cmd = [sys.executable, __file__, *sys.argv[1:], "--child", path, str(budget)]
            done = subprocess.run(cmd, capture_output=True, text=True)
            lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
            run = {**(json.loads(lines[-1]) if lines else {"path": path, "micro_batch_tokens": budget,
                                                           "error": done.stderr[-2000:]}),
                   "exit": done.returncode, "machine_before": before}
            print(json.dumps(run), flush=True)
            runs.append(run)
    write(Path(args.out), args.model, runs)
    return 0


def write(out: Path, model: str, runs: list[dict]) -> None:
    """Merge `runs` into `out`: a (path, budget) measured again replaces its older run, others stay
    (on a shared machine the runs can be taken one at a time, when there is memory for each)."""
    command = " ".join([".venv/bin/python", *sys.argv])
    key = lambda r: (r.get("path"), r.get("micro_batch_tokens"))  # noqa: E731
    old = json.loads(out.read_text())["runs"] if out.is_file() else []
    new = {key(r) for r in runs}
    merged = [r for r in old if key(r) not in new] + [{**r, "command": command} for r in runs]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"model": model, "cores": os.cpu_count(), "memory_gb": round(meminfo_gb("MemTotal"), 1),
                               "runs": sorted(merged, key=lambda r: (-r["micro_batch_tokens"], r["path"]))},
                              indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    sys.exit(main())
