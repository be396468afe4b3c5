#!/usr/bin/env bash
# A short plan_path training on the GPUs of this machine; prints tokens/s, step time and sync time.
#
#   benchmarks/gpu_smoke.sh                                  # the embedded SmolLM2-135M-Instruct
#   MASDSL_SMOKE_MODEL=/models/qwen3-1.7b benchmarks/gpu_smoke.sh    # a local model folder
#   benchmarks/gpu_smoke.sh train.steps=4                    # extra overrides go to `masdsl run`
#
# With 8 or more GPUs it runs configs/gpu_8.yaml (workflows/plan_path_per_role.mas), else
# configs/gpu_1.yaml (workflows/plan_path.mas), with the model replaced and the run cut down to
# 2 steps of 4 tasks. The numbers come from the run's last checkpoint (state.json, the per-step
# metrics the trainer logs: throughput/tokens_per_s, time/rollout_s, time/update_s, time/sync_s).
# Without a GPU (no nvidia-smi, or it lists none) it prints a SKIP line and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${MASDSL_PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3

gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then
  gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | grep -c . || true)
fi
if [ "${gpus:-0}" -lt 1 ]; then
  echo "gpu_smoke: SKIP: no GPU on this machine (nvidia-smi lists none)"
  exit 0
fi

model=${MASDSL_SMOKE_MODEL:-smollm2-135m-instruct}
if [ "$gpus" -ge 8 ]; then
  workflow=workflows/plan_path_per_role.mas config=configs/gpu_8.yaml policies="tool_p planner_p"
else
  workflow=workflows/plan_path.mas config=configs/gpu_1.yaml policies="shared"
fi
overrides=(train.steps=2 train.batch=4 train.eval_tasks=2 train.eval_every=0 train.checkpoint_every=0
           tracking.enabled=false)
for p in $policies; do overrides+=("policy.$p.model=$model"); done
echo "gpu_smoke: $gpus GPU(s): masdsl run $workflow --config $config ${overrides[*]} $*"

summary=$(mktemp)
trap 'rm -f "$summary"' EXIT
start=$(date +%s)
"$PY" -m masdsl.cli run "$workflow" --config "$config" "${overrides[@]}" "$@" --json >"$summary"
echo "gpu_smoke: finished in $(( $(date +%s) - start )) s"

"$PY" - "$summary" <<'PY'
import json, sys
from pathlib import Path

run_dir = Path(json.loads(Path(sys.argv[1]).read_text())["run_dir"])
state = sorted((run_dir / "checkpoints").glob("step_*/state.json"))[-1]
history = json.loads(state.read_text())["history"]
print(f"gpu_smoke: run {run_dir}")
print(f"{'step':>4} {'tokens/s':>10} {'step s':>8} {'rollout s':>10} {'update s':>9} {'sync s':>7}")
for h in history:
    step_s = h["time/rollout_s"] + h["time/update_s"]  # the update's time includes its sync
    print(f"{h['step']:>4} {h['throughput/tokens_per_s']:>10.1f} {step_s:>8.2f} {h['time/rollout_s']:>10.2f} "
          f"{h['time/update_s']:>9.2f} {h.get('time/sync_s', float('nan')):>7.2f}")
PY
