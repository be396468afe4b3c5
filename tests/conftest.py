"""Root fixtures shared by every test area.

- `tiny_model_dir`: a tiny random Llama + locally trained tokenizer (built once per session).
- `hf_engine`: an `HFEngine` over that model (seed 0), shared by the session: tests that change
  its weights must restore them.
- `vllm_engine_session`: a LoRA-enabled `VLLMEngine` over that model, shared by the session.
- `local_ray` (module scope): this process's one local Ray instance, kept between modules.

With `-n N` (pytest-xdist; `--dist loadfile` comes from pyproject's addopts) the scheduler of
`pytest_xdist_make_scheduler` below keeps each file on one worker and queues the slowest first.
"""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    from masdsl.testing import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0)


@pytest.fixture(scope="session")
def hf_engine(tiny_model_dir):
    from masdsl.runtime.backends.hf import HFEngine
    from masdsl.runtime.models import load_model

    model, tokenizer = load_model(tiny_model_dir)
    engine = HFEngine(model, tokenizer, seed=0)
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def vllm_engine_session(tiny_model_dir):
    """A `VLLMEngine` over the tiny model for the whole session (about a minute to start):
    test areas share it instead of starting their own. LoRA is enabled (rank <= 8) so the
    adapter tests need no second engine; tests that change its weights restore them."""
    from masdsl.runtime.backends.vllm import VLLMEngine

    engine = VLLMEngine(tiny_model_dir, seed=0, max_model_len=512, lora={"max_lora_rank": 8})
    yield engine
    engine.close()


class _RayInstance:
    """This process's one plain local Ray instance, started on first use and kept for the
    session (starting one takes 10-15 s here), shut down at the session's end."""

    def __init__(self) -> None:
        self.started = False

    def join_or_start(self):
        import ray

        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        if not ray.is_initialized():  # first use, or `two_node_cluster` disconnected this driver
            ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
            self.started = True
        return ray

    def release(self, ray) -> None:
        """After a module: an instance with actors still alive (a failed test's) is shut down,
        so the next module starts a clean one; a clean one is kept."""
        if not ray.is_initialized():
            return
        try:
            alive = [a for a in ray._private.state.actors().values() if a.get("State") != "DEAD"]
        except Exception:  # noqa: BLE001 - no actor table to read: do not reuse what we cannot check
            alive = [None]
        if alive and self.started:
            ray.shutdown()

    def close(self) -> None:
        import ray

        if self.started and ray.is_initialized():
            ray.shutdown()


@pytest.fixture(scope="session")
def _ray_instance():
    instance = _RayInstance()
    yield instance
    instance.close()


@pytest.fixture(scope="module")
def local_ray(_ray_instance):
    """A plain local Ray instance for one test module (token auth off, like `local_cluster`):
    one per test process, shared by the modules that ask for it (joined if one already runs).
    A module must leave no actor alive; one that does gets the instance shut down after it."""
    pytest.importorskip("ray")
    ray = _ray_instance.join_or_start()
    yield ray
    _ray_instance.release(ray)


@pytest.fixture(autouse=True)
def _engine_log_environment():
    """`masdsl --verbose` sets MASDSL_VERBOSE in this process for the engines it starts; a test
    that runs the CLI in-process must not leave it (or vLLM's log level) to the tests after it."""
    keys = ("MASDSL_VERBOSE", "VLLM_LOGGING_LEVEL")
    before = {k: os.environ.get(k) for k in keys}
    yield
    for k, v in before.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


# Which worker runs what under `pytest -n N`: pyproject's addopts give `--dist loadfile
# --no-loadscope-reorder` (ignored without -n), and the scheduler below is xdist's loadfile one
# with two changes. Files are the units, so a file's module fixtures (a training run, a cluster,
# an engine) are built on one worker only; the files in SHARED_GROUPS, which use one session
# fixture, form one unit, so it starts once. Units are queued in collection order (the last are
# the doctests: quick, they even out the end) except the files of SLOW_FIRST, which go first,
# slowest first: one of them started last would run alone while the other worker idles.
# (xdist's `loadgroup` would do with `xdist_group` marks, but under pytest 9 it ignores them.)
SHARED_GROUPS = {
    "tests/engines/test_vllm.py": "vllm_engine_session",  # the session's vLLM engine (a minute)
    "tests/runtime/test_vllm.py": "vllm_engine_session",
    "tests/tracking/test_end_to_end.py": "mlflow_server",  # the session's MLflow server (15-30 s)
    "tests/tracking/test_models.py": "mlflow_server",
    "tests/tracking/test_tracker.py": "mlflow_server",
}
SLOW_FIRST = (  # seconds: the file alone on one worker, 2026-12-02, 2 cores shared with other runs
    "tests/learner/test_learner_fsdp.py",
    "tests/learner/test_learner_workers.py",
    "tests/engines/test_vllm_orphans.py",
    "tests/test_cli_habits.py",
    "tests/engines/test_vllm_tied.py",
    "tests/reliability/test_run_actor_restart.py",
    "tests/engines/test_vllm.py",
)


def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadfile":
        return None  # another --dist: xdist's own scheduler
    from xdist.scheduler import LoadFileScheduling

    class Scheduling(LoadFileScheduling):
        queued = False

        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            return SHARED_GROUPS.get(path, path)

        def _assign_work_unit(self, node) -> None:
            if not self.queued:  # the first call: the queue is complete, nothing taken yet
                for path in reversed(SLOW_FIRST):
                    scope = SHARED_GROUPS.get(path, path)
                    if scope in self.workqueue:
                        self.workqueue.move_to_end(scope, last=False)
                self.queued = True
            super()._assign_work_unit(node)

    return Scheduling(config, log)
