#!/usr/bin/env bash
# Start the Ray head node of a masdsl cluster on this machine.
#
# Run it on the machine that will run `masdsl run` (the driver: it holds the learner, so give
# it the GPU(s) the trainer uses). Then run start_worker.sh on every other machine with the
# address this script prints, and launch the workflow from this machine:
#
#   masdsl run workflows/coder_tester.mas runtime.ray=true runtime.ray_address=auto
#
# Environment (all optional):
#   RAY_PORT=6379            GCS port the workers connect to
#   MASDSL_ENV_SLOTS=N       env-worker slots this node offers (custom resource `masdsl_env`);
#                            default: the number of CPUs. 0 keeps sandboxed env tasks off the head.
#   MASDSL_INFER_SLOTS=N     inference-actor slots (custom resource `masdsl_infer`); default 0 on
#                            the head, so inference actors go to GPU workers when runtime asks for it
#   MASDSL_RAY_AUTH=token    token (default) or disabled; with token, a token is generated under
#                            $HOME/.ray/auth_token and workers need it (printed below)
#   DASHBOARD_HOST=127.0.0.1 set 0.0.0.0 to reach the dashboard from other machines
# Any extra arguments go to `ray start` unchanged (for example --block in a container,
# --num-gpus=2, --temp-dir=/scratch/ray).
set -euo pipefail

PORT=${RAY_PORT:-6379}
CPUS=$(python3 -c 'import os; print(len(os.sched_getaffinity(0)))' 2>/dev/null || nproc)
ENV_SLOTS=${MASDSL_ENV_SLOTS:-$CPUS}
INFER_SLOTS=${MASDSL_INFER_SLOTS:-0}
AUTH=${MASDSL_RAY_AUTH:-token}
RAY=${RAY:-ray}

case "$AUTH" in
  token)
    export RAY_AUTH_MODE=token
    "$RAY" get-auth-token --generate >/dev/null
    ;;
  disabled) export RAY_AUTH_MODE=disabled ;;
  *) echo "start_head.sh: MASDSL_RAY_AUTH must be token or disabled, got '$AUTH'" >&2; exit 2 ;;
esac

IP=$(python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect(("10.255.255.255", 1)); print(s.getsockname()[0])' 2>/dev/null || hostname -I | awk '{print $1}')

cat >&2 <<MSG
masdsl: starting Ray head at $IP:$PORT (env slots $ENV_SLOTS, inference slots $INFER_SLOTS, auth $AUTH)
masdsl: on each worker machine run:
MSG
if [ "$AUTH" = token ]; then
  echo "  RAY_AUTH_TOKEN=\$(ssh $IP cat ~/.ray/auth_token) runtime/start_worker.sh $IP:$PORT" >&2
  echo "  (or copy $HOME/.ray/auth_token to the same path on the worker)" >&2
else
  echo "  MASDSL_RAY_AUTH=disabled runtime/start_worker.sh $IP:$PORT" >&2
fi

ulimit -n 65536 2>/dev/null || true
exec "$RAY" start --head --port="$PORT" \
  --dashboard-host="${DASHBOARD_HOST:-127.0.0.1}" \
  --resources="{\"masdsl_env\": $ENV_SLOTS, \"masdsl_infer\": $INFER_SLOTS}" \
  "$@"
