"""Send the metrics a run kept in `<run_dir>/metrics.jsonl` because the tracking server was away.

    python -m masdsl.tracking.resend RUN_DIR [--uri URI]

A run that ended during an outage keeps its unsent metrics in that file (one line per logged
step: step, timestamp, metrics, run_id, uri; and a last line with the run's final status). This
sends them to the same MLflow run and to its policy child runs, with their original steps and
timestamps, and ends the runs that are still marked running. Sending twice is harmless: MLflow
ignores a metric identical in key, step, timestamp and value.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from masdsl.tracking import lineage
from masdsl.tracking.store import TrackingError, resolve_uri

BUFFER_FILE = "metrics.jsonl"


def read_rows(run_dir: Path) -> list[dict[str, Any]]:
    """The buffered rows of a run folder; TrackingError when there is no readable file.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> _ = (d / "metrics.jsonl").write_text('{"step": 1, "timestamp": 5, "metrics": {"a": 1.0}, "run_id": "r"}\\n')
    >>> read_rows(d)[0]["metrics"]
    {'a': 1.0}
    """
    path = Path(run_dir) / BUFFER_FILE
    if not path.is_file():
        raise TrackingError(f"`{path}` does not exist: this run kept no metrics for later")
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            raise TrackingError(f"`{path}` line {n} is not JSON (was the file cut short?)") from None
    return rows


def resend(run_dir: Path, uri: str | None = None) -> int:
    """Send the buffered metrics of `run_dir`; returns how many metric values were sent."""
    from mlflow.entities import Metric  # heavy, optional: mlflow (masdsl[train])
    from mlflow.tracking import MlflowClient  # heavy, optional: mlflow (masdsl[train])

    rows = read_rows(run_dir)
    missing = sum(1 for r in rows if not r.get("run_id"))
    if missing:
        print(f"{missing} buffered steps were kept before their run existed; if the server never came "
              "back during that run, the run was not created and they cannot be sent", file=sys.stderr)
    sent = 0
    by_run: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("run_id"):
            by_run.setdefault((r["run_id"], resolve_uri(uri or r.get("uri"))), []).append(r)
    for (run_id, store), items in by_run.items():
        client = MlflowClient(tracking_uri=store)
        parent = client.get_run(run_id)
        children = client.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{run_id}'")
        child_of = {c.data.tags.get("masdsl.policy"): c.info.run_id for c in children}
        role_policy = {role: tag.removeprefix("masdsl.roles.")
                       for tag, roles in parent.data.tags.items() if tag.startswith("masdsl.roles.")
                       for role in roles.split(",") if role}
        batches: dict[str, list[Metric]] = {}
        for row in items:
            for key, value in row.get("metrics", {}).items():
                metric = Metric(key, float(value), int(row["timestamp"]), int(row["step"]))
                batches.setdefault(run_id, []).append(metric)
                policy = lineage.route(key, set(child_of), role_policy)
                if policy in child_of:
                    batches.setdefault(child_of[policy], []).append(metric)
        for target, metrics in batches.items():
            for i in range(0, len(metrics), 1000):
                client.log_batch(target, metrics=metrics[i : i + 1000])
        sent += len(batches.get(run_id, []))
        ends = [r["end"] for r in items if r.get("end")]
        if ends:  # finish() could not end the runs: end those still marked running
            for target in [run_id, *child_of.values()]:
                if client.get_run(target).info.status == "RUNNING":
                    client.set_terminated(target, ends[-1])
    return sent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m masdsl.tracking.resend", description=__doc__.split("\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--uri", help="tracking store (default: the one the run used)")
    args = ap.parse_args(argv)
    try:
        n = resend(args.run_dir, args.uri)
    except TrackingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"sent {n} metric values from {args.run_dir / BUFFER_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
