#!/usr/bin/env bash
# `train.micro_batch_tokens` against the update's time and peak memory (docs/performance.md
# `## step memory`, "The default"): masdsl's update alone (`update_throughput.py --paths masdsl`)
# on a skill-like shape (8 prompts of ~300 tokens x K 4 responses of ~128, two optimizer steps of
# 16 rows), each budget in a fresh process, one after another (run it on a quiet machine).
#     bash benchmarks/micro_batch_budget.sh [OUT.json]   (default benchmarks/results/micro_batch_budget.json)
# The 0.5B in float32 is left out (an update of this shape takes about 7 minutes there; its
# memory at each budget is in `## step memory`). BUDGETS="1024 2048" runs only those.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-benchmarks/results/micro_batch_budget.json}
shape=(--prompts 8 --k 4 --prompt-tokens 300 --response-tokens 128 --paths masdsl --repeats 2 --out "$out")
run() { .venv/bin/python benchmarks/update_throughput.py "${shape[@]}" "$@" | grep -v '^wrote' || true; }
for budget in ${BUDGETS:-512 1024 2048 4096}; do
  run --model smollm2-135m-instruct --lora 0 --dtype float32 --micro-batch-tokens "$budget"
  run --model smollm2-135m-instruct --lora 0 --dtype bfloat16 --micro-batch-tokens "$budget"
  run --model qwen2.5-coder-0.5b-instruct --lora 16 --dtype bfloat16 --micro-batch-tokens "$budget"
done
