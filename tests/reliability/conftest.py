"""Fixtures for the reliability tests: a two-node Ray cluster on this machine.

`two_node_cluster` (module scope): head node with one inference slot (`masdsl_infer`), one
worker node with four env slots (`masdsl_env`), both separate raylets; the test process is the
driver. Ray tests always pass `timeout=` to `ray.get` (a mis-placed task hangs silently).
`local_ray` (module scope, in tests/conftest.py): one plain local Ray instance.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def two_node_cluster():
    pytest.importorskip("ray")
    from masdsl.testing.cluster import local_cluster

    with local_cluster() as cluster:
        yield cluster
