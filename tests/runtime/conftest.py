"""Fixtures of the runtime tests: `h`, the counter env and workflow builders of
tests/support/counter.py, and `ray_session`."""

from __future__ import annotations

import pytest

from tests.support import counter


@pytest.fixture
def h():
    """tests/support/counter.py (`h.CounterEnv`, `h.workflow`, `h.role`, `h.config`, ...)."""
    return counter


@pytest.fixture(scope="module")
def ray_session(local_ray):
    """The test process's one local Ray instance (tests/conftest.py `local_ray`: started once,
    kept for the session)."""
    return local_ray
