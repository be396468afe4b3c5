"""Env steps as Ray tasks and an engine in a Ray actor: same results as in-process, failures scored."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from masdsl.runtime.actors import RayPool, RemoteEngine
from masdsl.runtime.backends.replay import ReplayEngine
from masdsl.runtime.executor import Hooks, rollout
from tests.support.rollout_plans import plan_of


class FlakyEnv:
    """Fails the first apply of each (role, state) it sees, tracked in marker files (shared
    across Ray workers), so one retry of a job is enough."""
    limits = None  # the sandbox defaults for any code this env runs (masdsl.envs.base.Env)

    def __init__(self, folder: str, always: bool = False):
        self.folder, self.always = folder, always

    def reset(self, task):
        return (0, ())

    def apply(self, state, role, fields):
        marker = Path(self.folder) / f"{role}-{hashlib.md5(repr(state).encode()).hexdigest()}"
        if self.always or not marker.exists():
            marker.touch()
            raise RuntimeError(f"flaky {role}")
        n = fields["n"] if fields["ok"] else 0
        return (state[0] + n, state[1] + ((role, n),))

    def view(self, state):
        return {"total": state[0], "log": list(state[1])}

    def success(self, state):
        return state[0] >= 10


def _wf(h):
    return h.workflow([h.role("a"), h.role("b")], [("start", "a&b"), ("a&b", "a&b")], max_turns=2, team=h.total())


def _rows():
    return {("t1", "a", 0): ["1", "7"], ("t1", "b", 0): ["2", "2"], ("t1", "a", 1): ["3", "1"],
            ("t1", "b", 1): ["x", "4"], ("t2", "a", 0): ["5", "0"], ("t2", "b", 0): ["6", "9"],
            ("t2", "a", 1): ["1", "1"], ("t2", "b", 1): ["0", "2"]}


def _summary(ro):
    return [(r.task_id, r.role, r.turn, r.candidate, r.selected, r.reward, r.episode_success) for r in ro.records]


def test_ray_env_pool_and_engine_actor_match_local(h, tmp_path, ray_session):
    path = h.replay_file(tmp_path / "r.jsonl", _rows())
    tasks = [{"id": "t1"}, {"id": "t2"}]
    wf = _wf(h)
    local = rollout(plan_of(wf, h.config(), samples=2), h.CounterEnv(), tasks, {"p": ReplayEngine(path)},
                    mode="train", step=1)
    remote_engine = RemoteEngine(lambda: ReplayEngine(path))
    try:
        remote = rollout(plan_of(wf, h.config("runtime.ray=true", "runtime.env_retries=1"), samples=2),
                         FlakyEnv(str(tmp_path)), tasks, {"p": remote_engine},
                         mode="train", step=1)
    finally:
        remote_engine.close()
    assert _summary(remote) == _summary(local)
    assert remote.errors == {} and len(os.listdir(tmp_path)) > 1  # every first attempt failed and was retried


def test_ray_env_failure_after_retries_is_scored_zero(h, tmp_path, ray_session):
    pool = RayPool(FlakyEnv(str(tmp_path), always=True), retries=2, timeout_s=60)
    from masdsl.runtime.sampling import EnvJob, run_env_job

    job = EnvJob({"id": "t"}, (0, ()), {}, "a", 0, [{"n": 1, "ok": True, "output": "1"}])
    ((ok, reason),) = pool.map(run_env_job, [job])
    assert not ok and "flaky a" in reason
    path = h.replay_file(tmp_path / "r.jsonl", {("t", "a", 0): ["3", "4"]})
    wf = h.workflow([h.role("a")], [("start", "a"), ("a", "end")])
    ro = rollout(plan_of(wf, h.config("runtime.ray=true", "runtime.env_retries=1"), samples=2),
                 FlakyEnv(str(tmp_path), always=True), [{"id": "t"}], {"p": ReplayEngine(path)},
                 mode="train", step=0, hooks=Hooks(on_env_failure="score"))
    assert [r.reward for r in ro.records] == [0.0, 0.0]
    assert list(ro.errors.values()) == [1] and "flaky a" in next(iter(ro.errors))
