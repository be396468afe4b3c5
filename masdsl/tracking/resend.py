"""Send what a run kept in `<run_dir>/metrics.jsonl` because the tracking server was away.

    python -m masdsl.tracking.resend RUN_DIR [--uri URI]

During an outage the tracker writes every tracking call it could not send to that file (metrics
rows: step, timestamp, metrics, run_id, uri; other calls as actions, see sender.py) and a `done`
row for each one it sent after all. This applies the rest, in order, with the same `Sender`:
if the server was away for the whole run, the parent and child runs are created now (with their
original start time, params and tags), then the metrics (original steps and timestamps), the
files, the models, and the runs' end. Sending twice is harmless: what was applied gets a `done`
row, and MLflow ignores a metric identical in key, step, timestamp and value.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from masdsl.tracking.outbox import short
from masdsl.tracking.sender import Sender
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
    """Apply the kept tracking calls of `run_dir`; returns how many metric values were sent
    to parent runs."""
    from mlflow.tracking import MlflowClient  # heavy, optional: mlflow (masdsl[train])

    run_dir = Path(run_dir)
    rows = read_rows(run_dir)
    done = {r["done"]: r.get("run_id") for r in rows if r.get("done")}
    clients: dict[str, Any] = {}
    senders: dict[tuple[str, str], Sender] = {}  # (run id, store) -> its sender
    current: Sender | None = None  # the run of the latest create_parent row
    sent = skipped = 0
    for row in rows:
        action = _action(row)
        if action is None:
            continue
        store = resolve_uri(uri or row.get("uri"))
        client = clients.setdefault(store, MlflowClient(tracking_uri=store))
        key = row.get("key")
        if action["op"] == "create_parent":
            current = Sender(client, run_id=done.get(key))
            _apply(current, action, run_dir, key, done)
            senders[(current.run_id, store)] = current
            continue
        if row.get("run_id"):
            sender = senders.setdefault((row["run_id"], store), Sender(client, run_id=row["run_id"]))
        elif current is not None:
            sender = current
        else:  # kept before its run existed, by a version that did not keep the run itself
            skipped += 1
            continue
        if action["op"] == "create_child" and key in done:
            sender.child_ids[action["policy"]] = done[key]
        elif key not in done or key is None:
            _apply(sender, action, run_dir, key, done)
            if action["op"] == "metrics":
                sent += len(action["metrics"])
    if skipped:
        print(f"{skipped} kept rows belong to no known run and were skipped", file=sys.stderr)
    return sent


def _action(row: dict[str, Any]) -> dict[str, Any] | None:
    """The action a journal row asks for; None for `done` rows."""
    if row.get("op"):
        return row
    if "metrics" in row:
        return {"op": "metrics", **row}
    if row.get("end"):
        return {"op": "end", "status": row["end"]}
    return None


def _apply(sender: Sender, action: dict[str, Any], run_dir: Path, key: str | None, done: dict) -> None:
    if action["op"] == "create_parent" and sender.run_id is not None:
        return  # created before (by the run, or by an earlier resend)
    created = sender.apply(action)
    if key is not None:
        done[key] = created
        with open(run_dir / BUFFER_FILE, "a", encoding="utf-8") as f:
            f.write(json.dumps({"done": key, "run_id": created}) + "\n")


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
    except Exception as exc:  # noqa: BLE001 - the store is still away, or refused a call
        print(f"error: could not send everything ({short(exc)}); what was sent is marked done in "
              f"{args.run_dir / BUFFER_FILE}, run this again later", file=sys.stderr)
        return 1
    print(f"sent {n} metric values from {args.run_dir / BUFFER_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
