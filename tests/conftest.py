"""Root fixtures shared by every test area.

- `tiny_model_dir`: a tiny random Llama + locally trained tokenizer (built once per session).
- `hf_engine`: an `HFEngine` over that model (seed 0), shared by the session: tests that change
  its weights must restore them.
- `vllm_engine_session`: a LoRA-enabled `VLLMEngine` over that model, shared by the session.
- `local_ray` (module scope): this process's one local Ray instance, kept between modules;
  `ray_session` names it for the runtime's tests; `two_node_cluster` (module scope): a head node
  with one inference slot (`masdsl_infer`) and a worker node with four env slots (`masdsl_env`),
  separate raylets, this process the driver (Ray tests always pass `timeout=` to `ray.get`: a
  mis-placed task hangs silently).
- `h`: tests/support/counter.py (`h.CounterEnv`, `h.workflow`, `h.role`, `h.config`, ...).
- `one_thread` (module scope): torch on one thread; `fresh`: the tiny model loaded anew, seeded.
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
    from masdsl.models.load import load_model

    model, tokenizer = load_model(tiny_model_dir)
    engine = HFEngine(model, tokenizer, seed=0)
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def vllm_engine_session(tiny_model_dir):
    """A `VLLMEngine` over the tiny model for the whole session (about a minute to start):
    test areas share it instead of starting their own. LoRA is enabled (rank <= 8) so the
    adapter tests need no second engine; tests that change its weights restore them."""
    import torch

    from masdsl.runtime.backends.vllm import VLLMEngine

    before = torch.get_num_threads()
    torch.set_num_threads(2)  # more than one, so that a build that resets them to one shows
    engine = VLLMEngine(tiny_model_dir, seed=0, max_model_len=512, lora={"max_lora_rank": 8})
    engine.torch_threads_after_build = torch.get_num_threads()  # read by test_vllm.py
    torch.set_num_threads(before)
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
    """`masdsl --verbose` sets MASDSL_VERBOSE in this process for the engines it starts (and
    without it, the libraries' quiet settings); a test that runs the CLI in-process must not
    leave them (or vLLM's log level) to the tests after it."""
    from masdsl.commands.output import LIBRARY_ENV  # what `output.libraries` sets without -v

    keys = ("MASDSL_VERBOSE", "VLLM_LOGGING_LEVEL", *LIBRARY_ENV)
    before = {k: os.environ.get(k) for k in keys}
    yield
    for k, v in before.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="module")
def ray_session(local_ray):
    return local_ray


@pytest.fixture(scope="module")
def two_node_cluster():
    pytest.importorskip("ray")
    from masdsl.testing.cluster import local_cluster

    with local_cluster() as cluster:
        yield cluster


@pytest.fixture
def h():
    from tests.support import counter

    return counter


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models run fastest on one thread, and far faster when other processes share the cores."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture()
def fresh(tiny_model_dir):
    """(model, tokenizer): the tiny model loaded anew, seeded, on one thread (the update tests change it)."""
    import torch

    from masdsl.models.load import load_model

    torch.set_num_threads(1)
    torch.manual_seed(0)
    return load_model(tiny_model_dir)
