"""runtime/: the cluster launcher config validates against Ray's own schema, and the start
scripts really form a two-node cluster (token auth on) that a driver joins and schedules on."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RAY = Path(sys.executable).with_name("ray")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_cluster_yaml_validates_with_ray_schema():
    yaml = pytest.importorskip("yaml")
    from ray.autoscaler._private.util import prepare_config, validate_config

    raw = yaml.safe_load((ROOT / "runtime/cluster.yaml").read_text())
    cfg = prepare_config(raw)
    validate_config(cfg)  # raises on a field Ray 2.60 does not know
    types = cfg["available_node_types"]
    assert types[cfg["head_node_type"]]["resources"]["GPU"] == 0  # learner's GPU: no actors
    assert types["worker.gpu"]["resources"]["masdsl_infer"] > 0
    assert types["worker.cpu"]["resources"]["masdsl_env"] > 0
    setup = "\n".join(cfg["setup_commands"])
    # torch is pinned in every pip command that installs masdsl (never a bare `torch`)
    for line in setup.split("&&"):
        if "masdsl[" in line:
            assert "torch==" in line, line
    assert "ray[default]==2.60.0" in setup


def test_start_worker_without_token_is_a_clear_error(tmp_path):
    env = {**os.environ, "HOME": str(tmp_path), "RAY": str(RAY)}
    env.pop("RAY_AUTH_TOKEN", None)
    p = subprocess.run(
        [str(ROOT / "runtime/start_worker.sh"), "127.0.0.1:1"],
        env=env, capture_output=True, text=True, timeout=30,
    )
    assert p.returncode == 2
    assert "auth_token" in p.stderr and "Traceback" not in p.stderr
    p = subprocess.run([str(ROOT / "runtime/start_worker.sh")], capture_output=True, text=True)
    assert p.returncode == 2 and "usage:" in p.stderr


def _start(script: list[str], env: dict, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        script, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True
    )


def _stop(*procs: subprocess.Popen) -> None:
    """Stop our own `ray start --block` processes: SIGTERM makes each shut its node down
    (about 8 s); whatever is left of their process groups is then SIGKILLed."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)


DRIVER = """
import json, os, sys, time, ray
from masdsl.testing.cluster import where
ray.init(address=sys.argv[1], logging_level="WARNING", log_to_driver=False)
deadline = time.time() + 60
while len([n for n in ray.nodes() if n["Alive"]]) < 2 and time.time() < deadline:
    time.sleep(0.5)
nodes = {n["NodeID"]: n["Resources"] for n in ray.nodes() if n["Alive"]}
env_task = ray.remote(num_cpus=0.1, resources={"masdsl_env": 0.01})(where)
infer_task = ray.remote(num_cpus=0.1, resources={"masdsl_infer": 0.01})(where)
print(json.dumps({
    "nodes": nodes,
    "env": ray.get([env_task.remote() for _ in range(3)], timeout=120),
    "infer": ray.get(infer_task.remote(), timeout=120),
}))
"""


@pytest.mark.slow
def test_start_scripts_form_a_cluster(tmp_path):
    if shutil.which("python3") is None:
        pytest.skip("the scripts use python3 for host facts")
    port, head_home, worker_home = _free_port(), tmp_path / "head", tmp_path / "worker"
    head_home.mkdir(), worker_home.mkdir()
    ports = lambda: [  # noqa: E731 - distinct agent ports: other Ray instances may share the host
        f"--dashboard-agent-listen-port={_free_port()}", f"--metrics-export-port={_free_port()}",
        f"--dashboard-agent-grpc-port={_free_port()}", f"--runtime-env-agent-port={_free_port()}",
    ]
    base = {**os.environ, "RAY": str(RAY), "PATH": f"{RAY.parent}:{os.environ['PATH']}"}
    base.pop("RAY_AUTH_MODE", None)
    head_env = {**base, "HOME": str(head_home), "RAY_PORT": str(port),
                "MASDSL_ENV_SLOTS": "0", "MASDSL_INFER_SLOTS": "1"}
    ray_tmp = Path(tempfile.mkdtemp(prefix="mr", dir="/tmp"))  # AF_UNIX paths: <= 107 bytes
    head = _start(
        [str(ROOT / "runtime/start_head.sh"), "--block", "--num-cpus=1", "--include-dashboard=false",
         f"--ray-client-server-port={_free_port()}", f"--temp-dir={ray_tmp}", *ports()],
        head_env, tmp_path / "head.log",
    )
    worker = None
    try:
        token_file = head_home / ".ray/auth_token"
        deadline = time.time() + 60
        while not token_file.exists() and time.time() < deadline:
            time.sleep(0.2)
        log = tmp_path / "head.log"
        while "Ray runtime started" not in log.read_text() and time.time() < deadline:
            assert head.poll() is None, log.read_text()
            time.sleep(0.5)
        ip = next(line.split(" at ")[1].split(":")[0] for line in log.read_text().splitlines()
                  if "starting Ray head at" in line)
        token = token_file.read_text()
        worker_env = {**base, "HOME": str(worker_home), "RAY_AUTH_TOKEN": token, "MASDSL_ENV_SLOTS": "3"}
        worker = _start(
            [str(ROOT / "runtime/start_worker.sh"), f"{ip}:{port}", "--block", "--num-cpus=1", *ports()],
            worker_env, tmp_path / "worker.log",
        )
        driver_env = {**base, "HOME": str(worker_home), "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
        # a driver without the right token must be refused (auth really is on); run it
        # alongside the real driver, the refusal takes about 20 s of connection retries
        bad = subprocess.Popen(
            [sys.executable, "-c", f"import ray; ray.init(address='{ip}:{port}')"],
            env={**base, "HOME": str(tmp_path), "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "x" * 32},
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        out = subprocess.run([sys.executable, "-c", DRIVER, f"{ip}:{port}"], env=driver_env,
                             capture_output=True, text=True, timeout=180)
        assert out.returncode == 0, out.stderr[-3000:] + (tmp_path / "worker.log").read_text()[-2000:]
        res = json.loads(out.stdout.strip().splitlines()[-1])
        by_res = {k: [n for n, r in res["nodes"].items() if r.get(k)] for k in ("masdsl_env", "masdsl_infer")}
        assert len(res["nodes"]) == 2 and len(by_res["masdsl_env"]) == len(by_res["masdsl_infer"]) == 1
        assert {r["node"] for r in res["env"]} == set(by_res["masdsl_env"])
        assert res["infer"]["node"] == by_res["masdsl_infer"][0] != by_res["masdsl_env"][0]
        _, bad_err = bad.communicate(timeout=120)
        assert bad.returncode != 0 and "token" in bad_err.lower(), bad_err[-2000:]
    finally:
        _stop(*[p for p in (worker, head) if p is not None])
        shutil.rmtree(ray_tmp, ignore_errors=True)
