#!/usr/bin/env bash
# Join this machine to a masdsl Ray cluster started by start_head.sh.
#
#   runtime/start_worker.sh HEAD_IP:6379 [extra `ray start` arguments]
#
# A GPU machine offers its GPUs to inference actors (each policy's engine asks for
# `num_gpus`); a CPU machine offers env-worker slots for sandboxed env steps.
# Environment (all optional):
#   MASDSL_ENV_SLOTS=N     env-worker slots (custom resource `masdsl_env`); default: CPUs when the
#                          machine has no GPU, else 0 (keep sandboxes off GPU boxes)
#   MASDSL_INFER_SLOTS=N   inference-actor slots (custom resource `masdsl_infer`); default: the
#                          number of GPUs
#   MASDSL_RAY_AUTH=token  token (default; needs RAY_AUTH_TOKEN or ~/.ray/auth_token from the
#                          head) or disabled (must match the head)
set -euo pipefail

if [ $# -lt 1 ] || [[ "$1" == -* ]]; then
  echo "usage: start_worker.sh HEAD_IP:PORT [ray start arguments]" >&2
  exit 2
fi
ADDRESS=$1; shift
RAY=${RAY:-ray}

CPUS=$(python3 -c 'import os; print(len(os.sched_getaffinity(0)))' 2>/dev/null || nproc)
GPUS=0
if command -v nvidia-smi >/dev/null 2>&1; then
  GPUS=$(nvidia-smi --list-gpus 2>/dev/null | wc -l || echo 0)
fi
if [ "$GPUS" -gt 0 ]; then DEFAULT_ENV=0; else DEFAULT_ENV=$CPUS; fi
ENV_SLOTS=${MASDSL_ENV_SLOTS:-$DEFAULT_ENV}
INFER_SLOTS=${MASDSL_INFER_SLOTS:-$GPUS}
AUTH=${MASDSL_RAY_AUTH:-token}

case "$AUTH" in
  token)
    export RAY_AUTH_MODE=token
    if [ -z "${RAY_AUTH_TOKEN:-}" ] && [ ! -f "$HOME/.ray/auth_token" ]; then
      echo "start_worker.sh: token auth is on but neither RAY_AUTH_TOKEN nor ~/.ray/auth_token is set;" >&2
      echo "  copy ~/.ray/auth_token from the head, or start both with MASDSL_RAY_AUTH=disabled" >&2
      exit 2
    fi
    ;;
  disabled) export RAY_AUTH_MODE=disabled ;;
  *) echo "start_worker.sh: MASDSL_RAY_AUTH must be token or disabled, got '$AUTH'" >&2; exit 2 ;;
esac

echo "masdsl: joining $ADDRESS (GPUs $GPUS, env slots $ENV_SLOTS, inference slots $INFER_SLOTS)" >&2
ulimit -n 65536 2>/dev/null || true
exec "$RAY" start --address="$ADDRESS" \
  --resources="{\"masdsl_env\": $ENV_SLOTS, \"masdsl_infer\": $INFER_SLOTS}" \
  "$@"
