#!/usr/bin/env bash
# Screenshots of the MLflow UI for docs/tracking.md (a docs asset, not a test).
#
#   docs/img/mlflow_screenshot.sh path/to/mlflow.db [EXPERIMENT]
#   SWEEP=1 docs/img/mlflow_screenshot.sh path/to/mlflow.db [EXPERIMENT]
#
# Starts `mlflow server` on the given SQLite store (its own process group, stopped at the end),
# picks the newest masdsl parent run (of EXPERIMENT if given), and writes
# docs/img/mlflow_run.png (run overview), docs/img/mlflow_metrics.png (metric charts) and
# docs/img/mlflow_artifacts.png (the run's progress plot in the artifact browser)
# with headless Chromium (Debian: apt-get install -y chromium). With SWEEP=1 it picks the newest
# `masdsl sweep` parent instead and writes docs/img/mlflow_sweep_compare.png (its children in
# MLflow's compare view) and docs/img/mlflow_sweep_table.png (the parent's comparison.md).
#
# The page is opened as http://masdsl-mlflow:PORT (mapped to 127.0.0.1 by Chromium) because
# MLflow 3 opens its assistant side panel automatically when the host is 127.0.0.1/localhost.
set -euo pipefail
DB=$(realpath "$1"); EXP=${2:-}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PYTHON:-$ROOT/.venv/bin/python}
MLFLOW=$(dirname "$PY")/mlflow
PORT=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
WORK=$(mktemp -d)
MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false setsid "$MLFLOW" server --host 127.0.0.1 --port "$PORT" \
  --backend-store-uri "sqlite:///$DB" --artifacts-destination "$WORK/artifacts" --workers 1 \
  --allowed-hosts "masdsl-mlflow:$PORT,127.0.0.1:$PORT,localhost:$PORT" \
  --cors-allowed-origins "http://masdsl-mlflow:$PORT" >"$WORK/server.log" 2>&1 &
PGID=$!
trap 'kill -- -$PGID 2>/dev/null || true' EXIT
for _ in $(seq 180); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 1; done
read -r EXP_ID RUN_ID CHILDREN < <("$PY" - "http://127.0.0.1:$PORT" "$EXP" "${SWEEP:-}" <<'PY'
import sys
from mlflow.tracking import MlflowClient
c = MlflowClient(sys.argv[1])
exps = [c.get_experiment_by_name(sys.argv[2])] if sys.argv[2] else c.search_experiments()
runs = c.search_runs([e.experiment_id for e in exps if e], "tags.`masdsl.kind` != ''",
                     order_by=["attributes.start_time DESC"])
kind = "sweep" if sys.argv[3] else None
parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags
              and (kind is None) == (r.data.tags.get("masdsl.kind") != "sweep"))
children = [r.info.run_id for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
print(parent.info.experiment_id, parent.info.run_id, ",".join(f'"{i}"' for i in children))
PY
)
shot() {  # shot OUT URL [VIRTUAL_TIME_MS]
  timeout 300 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$(mktemp -d)" --host-resolver-rules="MAP masdsl-mlflow 127.0.0.1" \
    --screenshot="$1" --window-size=1400,900 --virtual-time-budget="${3:-15000}" "$2" >/dev/null 2>&1
}
BASE="http://masdsl-mlflow:$PORT/#/experiments/$EXP_ID/runs/$RUN_ID"
Q="?workflowType=machine_learning"  # the UI's "Model training" layout (default: GenAI)
if [ -n "${SWEEP:-}" ]; then
  shot "$ROOT/docs/img/mlflow_sweep_compare.png" \
    "http://masdsl-mlflow:$PORT/#/compare-runs?runs=[$CHILDREN]&experiments=[\"$EXP_ID\"]&workflowType=machine_learning" 60000
  shot "$ROOT/docs/img/mlflow_sweep_table.png" "$BASE/artifacts/comparison.md$Q"
  echo "sweep $RUN_ID of experiment $EXP_ID -> docs/img/mlflow_sweep_{compare,table}.png"
  exit 0
fi
shot "$ROOT/docs/img/mlflow_run.png" "$BASE$Q"
shot "$ROOT/docs/img/mlflow_metrics.png" "$BASE/model-metrics$Q" 60000  # charts load slowly
shot "$ROOT/docs/img/mlflow_artifacts.png" "$BASE/artifacts/plots/progress.png$Q"
echo "run $RUN_ID of experiment $EXP_ID -> docs/img/mlflow_{run,metrics,artifacts}.png"
