"""Root fixtures shared by every test area.

- `tiny_model_dir`: a tiny random Llama + locally trained tokenizer (built once per session).
- `hf_engine`: an `HFEngine` over that model (seed 0), shared by the session: tests that change
  its weights must restore them.
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


@pytest.fixture(scope="module")
def local_ray():
    """A plain local Ray instance for one test module (joined if one already runs; then it is
    left running). Token auth off, like `local_cluster`."""
    pytest.importorskip("ray")
    import os

    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    started = not ray.is_initialized()
    if started:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    if started:
        ray.shutdown()


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
