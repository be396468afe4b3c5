"""A workflow on a two-node Ray cluster: the inference actor on one node, the sandboxed env
tasks on the other, and an env worker SIGKILLed mid-rollout is retried with no episode lost.

The cluster (conftest `two_node_cluster`): the head offers `masdsl_infer` slots, the worker
`masdsl_env` slots, like `runtime/start_head.sh` / `start_worker.sh` on real machines. The
workflow file is the one a laptop run uses; only `runtime.*` overrides differ.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from masdsl.plan.run_plan import resolve_rollout
from masdsl.testing.cluster import kill_first_logged
from tests.support.overrides import NO_TRACKING
from tests.support.paths import COUNTER_DIR

DATA = COUNTER_DIR
WORKFLOW = DATA / "coder.mas"


def _setup(cluster, *overrides):
    import masdsl
    from masdsl.config import resolve_config
    from masdsl.runtime.inputs import load_split, make_env

    wf = masdsl.load(str(WORKFLOW))
    cfg = resolve_config(wf.train, None, ["runtime.ray=true", f"runtime.ray_address={cluster.address}",
                                          NO_TRACKING, *overrides])
    return wf, cfg, make_env(wf, cfg.sandbox), load_split(wf, "train")


def _log(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.slow
def test_env_tasks_and_inference_actor_on_different_nodes(two_node_cluster, tiny_model_dir, tmp_path):
    import ray

    from masdsl.runtime.actors import RemoteEngine
    from masdsl.runtime.engine_factory import build_engines, close_engines
    from masdsl.runtime.executor import rollout
    from tests.support.rollout_plans import plan_of
    from masdsl.testing.cluster import WhereEnv, where

    wf, cfg, env, tasks = _setup(two_node_cluster, "runtime.engine=hf", f"policy.shared.model={tiny_model_dir}")
    log = tmp_path / "where.jsonl"
    engines = build_engines(resolve_rollout(wf, cfg))
    try:
        engine = engines["shared"]
        assert isinstance(engine, RemoteEngine)
        actor_at = ray.get(engine.actor.__ray_call__.remote(lambda self: where()), timeout=120)
        ro = rollout(plan_of(wf, cfg, samples=2), WhereEnv(env, str(log)), tasks[:4], engines, mode="train", step=0)
    finally:
        close_engines(engines)
    head, worker = two_node_cluster.node_ids
    env_rows = _log(log)
    driver = ray.get_runtime_context().get_node_id()
    # the run completed: every episode ended and every role step has its K=2 scored candidates
    assert len(ro.episodes) == 4 and {e.task_id for e in ro.episodes} == {t["id"] for t in tasks[:4]}
    assert len(ro.records) >= 2 * 4 and len(env_rows) == len(ro.records)  # one apply per candidate
    assert not [m for m in ro.errors if "env step" in m], ro.errors
    # placement, recorded from inside the actor and the env tasks
    assert actor_at["node"] == head and driver == head
    assert env_rows and {r["node"] for r in env_rows} == {worker}
    assert actor_at["pid"] not in {r["pid"] for r in env_rows}


@pytest.mark.slow
def test_env_worker_killed_mid_rollout_is_retried(two_node_cluster, tmp_path):
    """SIGKILL the Ray worker process running an env step (its pid, logged from inside the
    step) while it is in the sandbox; the step is retried on another worker and every episode
    is scored with its real reward."""
    import ray

    from masdsl.runtime.backends.replay import ReplayEngine
    from masdsl.runtime.executor import rollout
    from tests.support.rollout_plans import plan_of
    from masdsl.testing.cluster import WhereEnv

    replay = tmp_path / "replay.jsonl"
    wf, cfg, env, tasks = _setup(two_node_cluster, "runtime.engine=replay", f"runtime.replay_file={replay}",
                                 "runtime.env_retries=2")
    tasks = tasks[:4]
    with replay.open("w") as f:  # correct code that takes 1.5 s in the sandbox (time to kill it)
        for t in tasks:
            body = t["solution"].replace("):\n", "):\n    import time\n    time.sleep(0.5)\n", 1)
            outs = [f"```python\nimport time\ntime.sleep(1.0)\n# candidate {k}\n{body}```" for k in range(2)]
            f.write(json.dumps({"task_id": t["id"], "role": "coder", "turn": 0, "outputs": outs}) + "\n")
    log = tmp_path / "where.jsonl"
    thread, killed = kill_first_logged(log, delay_s=0.5)  # 0.5 s: inside the sandbox run of the reward
    ro = rollout(plan_of(wf, cfg, samples=2), WhereEnv(env, str(log)), tasks, {"shared": ReplayEngine(replay)},
                 mode="train", step=0)
    thread.join(timeout=5)
    assert killed, "no env step was seen to kill"
    rows = _log(log)
    # the killed step ran again, in another worker process
    again = [r for r in rows if (r["task"], r["role"]) == (killed["task"], killed["role"]) and r["pid"] != killed["pid"]]
    assert again and again[0]["time"] > killed["time"]
    with pytest.raises(ProcessLookupError):
        os.kill(killed["pid"], 0)
    # the run completed with every episode scored for real: correct code, pass rate 1
    assert not ro.errors, ro.errors
    assert len(ro.episodes) == len(tasks) and all(e.success == 1.0 for e in ro.episodes)
    assert len(ro.records) == 2 * len(tasks)
    assert all(r.reward == pytest.approx(0.5 * 1.0 + 1.0) for r in ro.records)
    assert ray.is_initialized()


def _eval_cli(tmp: Path, *overrides: str) -> dict:
    import subprocess
    import sys

    tmp.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "masdsl.cli", "eval", str(DATA / "counter.mas"), "runtime.engine=replay",
           f"runtime.replay_file={DATA / 'counter_replay.jsonl'}", NO_TRACKING, *overrides]
    p = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "RAY_AUTH_MODE": "disabled"})
    assert p.returncode == 0, p.stderr[-3000:]
    (summary,) = tmp.glob("runs/rel_counter/*/summary.json")
    return json.loads(summary.read_text())


@pytest.mark.slow
def test_same_file_on_the_cluster_as_on_one_machine(two_node_cluster, tmp_path):
    """`masdsl eval` of a workflow with its own env, parser and reward function (an `import`ed
    Python file) joins the cluster with `runtime.ray_address` and gets the same metrics as an
    in-process run: the user's env unpickles in the env workers, its functions resolve there."""
    local = _eval_cli(tmp_path / "local")
    remote = _eval_cli(tmp_path / "cluster", "runtime.ray=true", f"runtime.ray_address={two_node_cluster.address}")
    assert remote["errors"] == {} == local["errors"]
    keys = [k for k in local["metrics"] if k.startswith(("success", "reward", "episodes", "tokens_generated"))]
    assert {k: remote["metrics"][k] for k in keys} == {k: local["metrics"][k] for k in keys}
    assert local["metrics"]["success/eval"] == 0.75 and local["metrics"]["expression_errors"] == 0


@pytest.mark.slow
def test_inference_actor_killed_mid_generate_is_restarted_with_latest_weights(two_node_cluster, tiny_model_dir,
                                                                             tmp_path):
    """SIGKILL the engine actor's process during a generate: Ray restarts the actor, the latest
    weights are loaded into it again and the call is redone, with the same result as an
    uninterrupted call (and not the result of the factory's initial weights)."""
    from functools import partial

    import torch

    from masdsl.runtime.actors import RemoteEngine
    from masdsl.runtime.backends import build_engine
    from masdsl.runtime.backends.base import GenRequest
    from masdsl.testing.cluster import slow_hf_engine

    local = build_engine("hf", str(tiny_model_dir), seed=0)
    ids = local.tokenizer("def add(a, b):\n    return", add_special_tokens=False)["input_ids"]
    requests = [GenRequest(prompt_ids=ids, n=2, temperature=1.0, max_tokens=8, seed=11 + i, key=("t", "a", i))
                for i in range(2)]
    initial = local.generate(requests)
    gen = torch.Generator().manual_seed(0)
    new_weights = {k: v + 0.05 * torch.randn(v.shape, generator=gen) for k, v in local.model.state_dict().items()}
    local.update_weights(new_weights)
    expected = local.generate(requests)
    assert [c.logprobs for r in expected for c in r] != [c.logprobs for r in initial for c in r]

    log = tmp_path / "engine.jsonl"
    engine = RemoteEngine(partial(slow_hf_engine, str(tiny_model_dir), 1.5, str(log)))
    try:
        engine.update_weights(new_weights)
        thread, killed = kill_first_logged(log, delay_s=0.3)  # inside the call's sleep, before it generates
        got = engine.generate(requests)
        thread.join(timeout=5)
        rows = _log(log)
    finally:
        engine.close()
    assert killed and engine.restarts == 1
    assert len(rows) == 2 and rows[1]["pid"] != killed["pid"]  # redone in the restarted actor
    with pytest.raises(ProcessLookupError):
        os.kill(killed["pid"], 0)

    def key(res):
        return [(c.token_ids, c.text, [round(x, 4) for x in c.logprobs]) for r in res for c in r]

    assert key(got) == key(expected)


@pytest.mark.slow
def test_training_on_the_cluster_equals_training_on_one_machine(two_node_cluster, tiny_model_dir, tmp_path):
    """`masdsl run` of the same file: in-process, and on the cluster (env steps as Ray tasks on
    the worker node, the user's env file shipped to them). Same weights, same step records,
    bit for bit.

    The two runs get different PYTHONHASHSEEDs and train with torch's default thread count:
    neither may change a bit (tests/learner/test_hashseed_determinism.py has the cause of the
    last-bit differences this test once saw: a gather whose backward added with threaded atomics)."""
    import subprocess
    import sys

    import torch

    from masdsl.training.checkpoint import policy_weights

    args = [str(DATA / "lengths.mas"), "runtime.engine=hf", f"policy.shared.model={tiny_model_dir}",
            NO_TRACKING, "train.steps=2", "train.seed=5"]
    runs = {"local": [], "cluster": ["runtime.ray=true", f"runtime.ray_address={two_node_cluster.address}"]}
    procs = {}
    for hash_seed, (name, extra) in enumerate(runs.items(), start=1):
        (tmp_path / name).mkdir()
        log = (tmp_path / f"{name}.log").open("w")
        procs[name] = (subprocess.Popen([sys.executable, "-m", "masdsl.cli", "run", *args, *extra],
                                        cwd=tmp_path / name, stdout=log, stderr=subprocess.STDOUT,
                                        env={**os.environ, "MASDSL_NO_VLLM": "1", "RAY_AUTH_MODE": "disabled",
                                             "PYTHONHASHSEED": str(hash_seed)}), log)
    for name, (proc, log) in procs.items():
        proc.wait(timeout=600)
        log.close()
        assert proc.returncode == 0, (tmp_path / f"{name}.log").read_text()[-3000:]
    out = {}
    for name in runs:
        (run_dir,) = (tmp_path / name).glob("runs/rel_lengths/*/")
        rows = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]
        out[name] = ([{k: v for k, v in r.items() if k not in ("gen_s", "env_s")} for r in rows],
                     policy_weights(run_dir / "checkpoints" / "step_000002", "shared"))
    assert len(out["local"][0]) > 0 and {r["step"] for r in out["local"][0]} == {1, 2}
    for a, b in zip(out["local"][0], out["cluster"][0]):
        assert a == b, (a["step"], a["task_id"], a["role"], a["candidate"])  # log-probs included
    assert out["local"][0] == out["cluster"][0]
    assert out["local"][1].keys() == out["cluster"][1].keys()
    assert all(torch.equal(out["local"][1][k], out["cluster"][1][k]) for k in out["local"][1])
