"""A real `mlflow server` for the tracking tests, and readers of what a run tracked.

`MlflowServer(root)` listens on 127.0.0.1 with a SQLite store in `root`, runs in its own process
group (MLflow spawns helpers that would outlive a killed parent) and is stopped with os.killpg.
Coming up takes 15-30 s here, so tests/tracking/conftest.py starts one per session.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

START_TIMEOUT_S = 180.0  # 15-30 s when the machine is quiet; shared CPUs can be much slower


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mlflow_cli() -> list[str]:
    exe = Path(sys.executable).with_name("mlflow")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "mlflow"]


class MlflowServer:
    def __init__(self, root: Path, port: int | None = None) -> None:
        self.root = Path(root)
        self.port = port or free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.db_uri = f"sqlite:///{self.root / 'mlflow.db'}"
        self.log = self.root / "server.log"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        cmd = mlflow_cli() + [
            "server", "--host", "127.0.0.1", "--port", str(self.port),
            "--backend-store-uri", self.db_uri,
            "--artifacts-destination", str(self.root / "artifacts"),
            "--workers", "1",
        ]
        env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
        env.pop("MLFLOW_TRACKING_URI", None)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(cmd, cwd=self.root, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited with {self.proc.returncode}:\n{self.tail()}")
            if self.healthy():
                return
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"mlflow server not healthy after {timeout_s:.0f} s:\n{self.tail()}")

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        """Stop the whole process group; returns once the port no longer answers."""
        if self.proc is None:
            return
        pgid = self.proc.pid  # start_new_session: the group id is the leader's pid
        for sig, wait_s in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(timeout=wait_s)
                break
            except subprocess.TimeoutExpired:
                continue
        try:  # uvicorn's worker is in the same group; make sure nothing is left behind
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc = None
        deadline = time.monotonic() + 10
        while self.healthy() and time.monotonic() < deadline:
            time.sleep(0.2)

    def tail(self, n: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else ""


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def step_metrics(step: int) -> dict[str, float]:
    """What the trainer logs per step (issue 6 names), with values that depend on the step."""
    return {
        "success/train": step / 10,
        "reward/coder/turn0": 1.0 + step,
        "reward/coder/turn0/std": 0.5,
        "reward/tester/turn0": 2.0 - step,
        "groups/count": 8.0,
        "groups/zero_variance_frac": 0.25,
        "loss/writer": 0.1 * step,
        "loss/checker": 0.2 * step,
        "clip_frac/writer": 0.01,
        "clip_frac/checker": 0.02,
        "kl/writer": 0.001 * step,
        "kl/checker": 0.002 * step,
        "grad_norm/writer": 1.5,
        "grad_norm/checker": 2.5,
        "tokens/generated": 100.0 * (step + 1),
        "time/rollout_s": 1.25,
    }


def journal(run_dir: Path) -> list[dict]:
    """The rows a run kept in metrics.jsonl."""
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def history(client, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def children(client, run) -> dict[str, object]:
    found = client.search_runs([run.info.experiment_id], f"tags.mlflow.parentRunId = '{run.info.run_id}'")
    return {r.info.run_name: r for r in found}


def artifact_paths(client, run_id: str, path: str | None = None) -> set[str]:
    out = set()
    for item in client.list_artifacts(run_id, path):
        out |= artifact_paths(client, run_id, item.path) if item.is_dir else {item.path}
    return out
