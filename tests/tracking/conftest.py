"""A real `mlflow server` for the tracking tests, one per test session.

`mlflow_server` yields an `MlflowServer` (fields `uri`, `port`, `root`; methods `stop()`,
`start()`). It listens on 127.0.0.1 with a SQLite store in a temporary folder, runs in its own
process group (MLflow spawns helpers that would outlive a killed parent) and is stopped with
os.killpg. Coming up takes 15-30 s here, hence the session scope. A test that stops the server
must start it again before it returns (use `try/finally`).

Other test areas can use it by listing this module in a conftest:
`pytest_plugins = ["tests.tracking.conftest"]` (root conftest only), or by importing
`MlflowServer` and building their own fixture.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

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


@pytest.fixture(autouse=True)
def no_system_metrics_thread_left():
    """A tracker's system metrics thread must end with `finish()`: none may outlive a test."""
    yield
    import threading

    left = [t for t in threading.enumerate() if t.name == "SystemMetricsMonitor" and t.is_alive()]
    for thread in left:  # stop them for the next tests, then fail this one
        thread.join(timeout=30)
    assert not left, "a SystemMetricsMonitor thread outlived its test (a tracker was not finished)"


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlflow_server")
    server = MlflowServer(root)
    try:
        server.start()
    except RuntimeError:  # e.g. the free port was taken meanwhile: one more try on another
        server = MlflowServer(root)
        server.start()
    try:
        yield server
    finally:
        server.stop()


SMALL_MAS = """workflow {name} "Coder and tester, one policy each."
env code
data train humaneval("train")
data eval  humaneval("eval")
policy writer  {{ model: "smollm2-135m-instruct" }}
policy checker {{ model: "smollm2-135m-instruct" }}

role coder {{
  policy writer
  prompt "Write the function. {{{{ task.prompt }}}}"
  parse code = code_block(output, "python")
  reward pass_rate(code, task.tests)
}}

role tester {{
  policy checker
  prompt "Write asserts for {{{{ task.prompt }}}}"
  parse tests = asserts(output)
  reward pass_rate(task.solution, tests)
}}

flow {{
  max_turns 2
  start -> coder & tester
  coder & tester -> end when passes(coder.code, tester.tests)
  coder & tester -> coder & tester
}}

team pass_rate(coder.code, task.tests)
success passes(coder.code, task.tests)
train {{ samples: 2, batch: 2, steps: 2 }}
"""


def small_workflow(name: str):
    """A compiled two-role workflow: roles coder/tester on policies writer/checker."""
    import masdsl

    return masdsl.loads(SMALL_MAS.format(name=name), name=f"{name}.mas")


@pytest.fixture
def make_workflow():
    """make_workflow(name) -> Workflow with roles coder/tester and policies writer/checker."""
    return small_workflow
