"""A multi-node Ray cluster on one machine, for tests and benchmarks of distributed placement.

`local_cluster()` starts a head node and worker nodes as separate raylets (separate worker
processes, separate node ids) with `ray.cluster_utils.Cluster`, connects this process as the
driver, and tears everything down on exit. Custom resources decide what may run where, exactly
as on a real cluster started with `runtime/start_head.sh` / `start_worker.sh`:

- `masdsl_infer`: inference-actor slots (the runtime asks for a fraction of one per engine
  actor when the cluster advertises it);
- `masdsl_env`: env-worker slots (env tasks ask for a fraction of one when advertised).

The default layout is the smallest one that proves placement: the head offers only inference
slots, one worker offers only env slots.

>>> DEFAULT_NODES[0]["resources"], DEFAULT_NODES[1]["resources"]
({'masdsl_infer': 1}, {'masdsl_env': 4})
>>> placement_summary([{"node": "a"}, {"node": "a"}, {"node": "b"}])
{'a': 2, 'b': 1}
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from masdsl.runtime.backends import build_engine

# Node specs: keyword arguments of `Cluster.add_node` (num_cpus, resources, ...). The first is
# the head. Two logical CPUs per node on a 2-core machine is deliberate over-subscription: the
# nodes are mostly idle and actors/tasks ask for fractional CPUs.
DEFAULT_NODES: tuple[dict[str, Any], ...] = (
    {"num_cpus": 2, "resources": {"masdsl_infer": 1}},
    {"num_cpus": 2, "resources": {"masdsl_env": 4}},
)


@dataclass
class LocalCluster:
    """A running local multi-node cluster (yielded by `local_cluster`)."""

    address: str  # GCS address, what `runtime.ray_address` takes
    node_ids: list[str]  # hex node ids, head first, in the order of the node specs
    cluster: Any = field(repr=False)  # the ray.cluster_utils.Cluster

    @property
    def head_id(self) -> str:
        return self.node_ids[0]

    def node_name(self, node_id: str) -> str:
        """'head', 'worker1', ... for a node id of this cluster (or the id itself)."""
        if node_id not in self.node_ids:
            return node_id
        i = self.node_ids.index(node_id)
        return "head" if i == 0 else f"worker{i}"


@contextmanager
def local_cluster(
    nodes: Iterable[Mapping[str, Any]] = DEFAULT_NODES,
    *,
    connect: bool = True,
    object_store_mb: int = 100,
    env: Mapping[str, str] | None = None,
) -> Iterator[LocalCluster]:
    """Start a head and workers as separate raylets on this machine; shut all down on exit.

    Disables Ray token auth for the cluster's lifetime (it is on by default in Ray 2.60 and
    writes a token under $HOME). A driver already connected to another Ray instance is
    disconnected first: one process can only be a driver of one cluster.
    """
    import ray  # heavy, optional: ray (masdsl[train]); importing this module must not need it
    from ray.cluster_utils import Cluster  # heavy, optional: as above

    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", *(env or {}))}
    os.environ["RAY_AUTH_MODE"] = "disabled"
    os.environ.update(env or {})
    if ray.is_initialized():
        ray.shutdown()
    specs = [dict(spec) for spec in nodes]
    for spec in specs:
        spec.setdefault("object_store_memory", object_store_mb * 1024 * 1024)
    cluster = Cluster(
        initialize_head=True,
        head_node_args={**specs[0], "include_dashboard": False},
    )
    try:
        added = [cluster.head_node] + [cluster.add_node(**spec) for spec in specs[1:]]
        cluster.wait_for_nodes(timeout=60)
        ids = [n.node_id for n in added]
        if connect:
            ray.init(address=cluster.address, logging_level="WARNING", log_to_driver=False)
        yield LocalCluster(address=cluster.address, node_ids=ids, cluster=cluster)
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def where() -> dict[str, Any]:
    """The node id and pid of the calling process: call it inside a task or actor method."""
    import ray  # heavy, optional: ray, already loaded in the Ray task or actor that calls this

    return {"node": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}


class WhereEnv:
    """Wraps an env; every `apply` first appends where it runs (node, pid, task, role) to a
    JSONL file, then delegates. The file is how a test sees, from inside Ray env tasks, which
    node and which worker process ran each env step (and which pid to kill mid-step).

    >>> import json, tempfile, pathlib
    >>> class Add:
    ...     def reset(self, task): return 0
    ...     def apply(self, state, role, fields): return state + fields["n"]
    >>> log = pathlib.Path(tempfile.mkdtemp()) / "where.jsonl"
    >>> env = WhereEnv(Add(), str(log))
    >>> env.apply(env.reset({}), "a", {"n": 2})
    2
    >>> sorted(json.loads(log.read_text()))
    ['node', 'pid', 'role', 'task', 'time']
    """

    def __init__(self, inner: Any, log_path: str):
        self.inner, self.log_path = inner, log_path

    def apply(self, state: Any, role: str, fields: Mapping[str, Any]) -> Any:
        try:
            import ray  # optional: an env stepped outside Ray (or without ray installed) has no node

            node = ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
        except ImportError:
            node = None
        row = {"node": node, "pid": os.getpid(), "task": getattr(state, "task_id", None), "role": role,
               "time": time.time()}
        with open(self.log_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
            f.flush()
        return self.inner.apply(state, role, fields)

    def __getattr__(self, name: str) -> Any:  # reset, view, success, ...
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


class SlowEngine:
    """Wraps an engine; each `generate` first logs where it runs (node, pid) to a JSONL file and
    sleeps `delay_s`, so a test can kill the engine's process in the middle of a call."""

    def __init__(self, inner: Any, delay_s: float, log_path: str):
        self.inner, self.delay_s, self.log_path = inner, delay_s, log_path
        self.tokenizer = getattr(inner, "tokenizer", None)

    def generate(self, requests: list) -> list:
        with open(self.log_path, "a", encoding="utf-8") as f:
            f.write(json.dumps({**where(), "time": time.time()}) + "\n")
        time.sleep(self.delay_s)
        return self.inner.generate(requests)

    def update_weights(self, state_dict: dict) -> None:
        self.inner.update_weights(state_dict)

    def close(self) -> None:
        self.inner.close()


def slow_hf_engine(model_dir: str, delay_s: float, log_path: str, seed: int = 0) -> SlowEngine:
    """A `SlowEngine` over the hf engine of `model_dir` (an engine factory for Ray actors)."""
    return SlowEngine(build_engine("hf", str(model_dir), seed=seed), delay_s, log_path)


def kill_first_logged(log_path: str | os.PathLike, delay_s: float, timeout_s: float = 120.0) -> tuple[Any, dict]:
    """SIGKILL the process that logs the first row to the JSONL file `log_path` (as `WhereEnv`
    and `SlowEngine` do, with its "pid"), `delay_s` after the row appears, so that it dies in
    the middle of its work. Runs in a started daemon thread: returns (thread, killed), where
    `killed` receives the row of the process killed (stays empty if none logged in time).

    >>> import pathlib, subprocess, sys, tempfile
    >>> victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    >>> log = pathlib.Path(tempfile.mkdtemp()) / "where.jsonl"
    >>> thread, killed = kill_first_logged(log, delay_s=0.1, timeout_s=30)
    >>> _ = log.write_text(json.dumps({"pid": victim.pid}) + "\\n")
    >>> thread.join(30); victim.wait(30), killed == {"pid": victim.pid}
    (-9, True)
    """
    killed: dict = {}

    def first_row() -> dict | None:
        try:
            return json.loads(Path(log_path).read_text().splitlines()[0])
        except (OSError, IndexError, ValueError):  # not written yet, or half a line
            return None

    def kill() -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            row = first_row()
            if row is not None:
                time.sleep(delay_s)
                os.kill(row["pid"], signal.SIGKILL)
                killed.update(row)
                return
            time.sleep(0.05)

    thread = threading.Thread(target=kill, name="kill-first-logged", daemon=True)
    thread.start()
    return thread, killed


def placement_summary(rows: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """How many rows ran on each node (rows as returned by `where`)."""
    return dict(Counter(r["node"] for r in rows))
