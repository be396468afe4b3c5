"""Root fixtures shared by every test area.

- `tiny_model_dir`: a tiny random Llama + locally trained tokenizer (built once per session).
- `hf_engine`: an `HFEngine` over that model (seed 0), shared by the session: tests that change
  its weights must restore them.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    from masdsl.testing import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0)
