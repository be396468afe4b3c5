#!/usr/bin/env bash
# The GPU rows of docs/performance.md `## step breakdown` (issue 29), as run on the device machine:
# random weights of each model's shapes (from a folder of config.json and the tokenizer's files),
# the hf engine (vLLM is not installed there), bfloat16 autocast, 8 prompts x K 8, 256 new tokens.
#   bash benchmarks/gpu_step_breakdown.sh OUT_DIR
set -u
out=${1:?OUT_DIR}
mkdir -p "$out"
common=(--random-weights --engine hf --device cuda --k 8 --max-tokens 256 --steps 4 --raw-repeats 2)
run() {  # name, seconds allowed, then the step_breakdown arguments
  local name=$1 limit=$2; shift 2
  echo "== $name $(date -u +%T)"
  timeout "$limit" python3 benchmarks/step_breakdown.py "${common[@]}" "$@" --json "$out/step_breakdown_gpu_$name.json" \
    > "$out/$name.log" 2>&1
  echo "exit $? $(date -u +%T)"; tail -8 "$out/$name.log"
}
run 05b_lora_merged 230 --model .devmodels/qwen2.5-coder-0.5b-instruct --lora 16 --set runtime.lora_sync=merged
run 135m_full 200 --model .devmodels/smollm2-135m-instruct --lora 0
run 05b_lora_adapter 110 --model .devmodels/qwen2.5-coder-0.5b-instruct --lora 16 --parts ours
