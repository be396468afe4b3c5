"""The two-node harness really gives two nodes, and custom resources really decide placement."""

from __future__ import annotations

from masdsl.testing.cluster import placement_summary, where


def test_resources_force_placement(two_node_cluster):
    import ray

    nodes = {n["NodeID"]: n["Resources"] for n in ray.nodes() if n["Alive"]}
    assert set(nodes) == set(two_node_cluster.node_ids) and len(nodes) == 2
    head, worker = two_node_cluster.node_ids
    assert nodes[head].get("masdsl_infer") == 1 and "masdsl_env" not in nodes[head]
    assert nodes[worker].get("masdsl_env") == 4 and "masdsl_infer" not in nodes[worker]

    env_task = ray.remote(num_cpus=0.1, resources={"masdsl_env": 0.01})(where)
    rows = ray.get([env_task.remote() for _ in range(6)], timeout=120)

    @ray.remote(num_cpus=0.1, resources={"masdsl_infer": 0.01})
    class Engine:
        def where(self):
            return where()

    actor = Engine.remote()
    actor_row = ray.get(actor.where.remote(), timeout=120)
    assert placement_summary(rows) == {worker: 6}
    assert actor_row["node"] == head
    assert actor_row["pid"] not in {r["pid"] for r in rows}
    ray.kill(actor)
