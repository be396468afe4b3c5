"""Environments over HTTP: `env http(URL)` against `masdsl serve-env` (and `make_server` in a
thread), on the loopback address. The same workflow rolled out through the server gives the same
records as the env in process; a server killed mid-episode, a malformed reply and a protocol
mismatch lose episodes (or refuse to start) with clear messages, and the rollout completes."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import masdsl
from masdsl.config import resolve_config
from masdsl.envs.env_protocol import ProtocolError
from masdsl.envs.env_server import make_server
from masdsl.envs.http_env import Client, HttpEnv, RemoteState, Unreachable
from masdsl.errors import UserError
from masdsl.lang.errors import MasError
from masdsl.lang.imports import import_file
from masdsl.runtime.inputs import make_env
from masdsl.runtime.backends.replay import ReplayEngine
from masdsl.runtime.executor import rollout
from tests.support.rollout_plans import plan_of

DATA = Path(__file__).parent / "data"
COUNTER = DATA / "http_counter.py"
PENALTY = -5.0

WORKFLOW = """\
workflow http_counter "One role adds numbers until the total reaches the target."
import "{module}"
env {env}
data train "tasks.jsonl"
policy shared {{ model: "smollm2-135m-instruct" }}
role a {{
  policy shared
  prompt "Say a number. Total {{{{ env.total }}}} of {{{{ env.target }}}}, moves {{{{ env.moves }}}}."
  parse n = http_int(output)
  reward env.total - len(env.moves)
}}
flow {{
  max_turns 3
  start -> a
  a -> end when env.total >= env.target
  a -> a
}}
team env.total
success env.total >= env.target
"""
TASKS = [{"id": "t1", "start": 0}, {"id": "t2", "start": 5}]
# (task, role, turn) -> the K = 3 candidates' replies; t2 reaches the target (10) at turn 0
REPLIES = {("t1", "a", 0): ["1", "3", "x"], ("t1", "a", 1): ["2", "2", "4"], ("t1", "a", 2): ["0", "9", "1"],
           ("t2", "a", 0): ["6", "1", "2"]}


@pytest.fixture(scope="module")
def counter():
    import_file(COUNTER)  # registers `http_counter` and `http_int`
    from masdsl.envs.registry import REGISTRY

    return REGISTRY.envs["http_counter"].factory


@contextmanager
def served(env, name="http_counter", fields=("total", "moves", "target"), handler=None):
    """`make_server` (or a server with `handler`) on a free loopback port, in a thread."""
    server = make_server(env, name, fields) if handler is None else ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def workflow(tmp_path, env_line, success=True):
    """The test workflow with `env ENV_LINE`; `success=False` leaves out its `success` line (the
    env's own `success` decides)."""
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in TASKS))
    path = tmp_path / "w.mas"
    text = WORKFLOW.format(module=COUNTER, env=env_line)
    path.write_text(text if success else text.replace("success env.total >= env.target\n", ""))
    return masdsl.load(path)


class KillingEngine(ReplayEngine):
    """Replays, and calls `before(turn)` ahead of sampling each batch (the turn of its first request)."""

    def __init__(self, path, before=None):
        super().__init__(path)
        self.before = before

    def generate(self, requests):
        if self.before is not None and requests:
            self.before(requests[0].key[2])
        return super().generate(requests)


def roll(tmp_path, wf, before=None):
    replay = tmp_path / "replay.jsonl"
    replay.write_text("".join(json.dumps({"task_id": t, "role": r, "turn": n, "outputs": o}) + "\n"
                              for (t, r, n), o in REPLIES.items()))
    engine = KillingEngine(replay, before)
    env = make_env(wf, resolve_config().sandbox)
    return rollout(plan_of(wf, resolve_config(wf.train), samples=3), env, TASKS, {"shared": engine},
                   mode="train", step=0)


def summary(ro):
    return ([(r.task_id, r.turn, r.candidate, r.reward, r.reward_team, r.selected, r.prompt_text, r.episode_success,
              r.episode_reward) for r in ro.records],
            [(e.task_id, e.success, e.team_reward, e.turns, e.truncated) for e in ro.episodes])


def test_a_rollout_through_the_server_equals_the_env_in_process(tmp_path, counter):
    local = roll(tmp_path, workflow(tmp_path, "http_counter(target=10)"))
    with served(counter(target=10)) as url:
        remote = roll(tmp_path, workflow(tmp_path, f'http("{url}", fields=["total", "target", "moves"])'))
    assert summary(remote) == summary(local)
    records, episodes = summary(local)
    # the K candidates of one step each applied to their own copy of the state: t1's turn 0
    # scores 1, 3, 0 (not 1, 4, 4), and the winner (3) is where turn 1 starts
    assert [r[3] for r in records if r[:2] == ("t1", 0)] == [1 + 1 - 1, 3 + 3 - 1, 0 + 0 - 1]
    assert "Total 3 of 10" in next(r[6] for r in records if r[:2] == ("t1", 1))
    assert episodes == [("t1", 1.0, 16.0, {"a": 3}, False), ("t2", 1.0, 11.0, {"a": 1}, False)]
    assert remote.env_lost == 0 and not remote.errors


def test_success_comes_from_the_server_and_ended_episodes_are_closed(tmp_path, counter):
    server = make_server(counter(target=10), "http_counter", ("total", "moves", "target"))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        wf = workflow(tmp_path, f'http("{url}")', success=False)
        assert wf.success is None
        ro = roll(tmp_path, wf)
        assert server.RequestHandlerClass.host.sessions() == 0  # each episode's session closed at its end
    finally:
        server.shutdown()
        server.server_close()
    local = roll(tmp_path, workflow(tmp_path, "http_counter(target=10)", success=False))
    assert [e.success for e in ro.episodes] == [e.success for e in local.episodes] == [1.0, 1.0]
    assert summary(ro) == summary(local)


def test_serve_env_killed_mid_episode_loses_the_episode_with_the_penalty(tmp_path, counter):
    proc = subprocess.Popen([sys.executable, "-m", "masdsl", "serve-env", f"{COUNTER}:http_counter(target=10)",
                             "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert "serving env `http_counter` (fields: total, moves, target; protocol 1)" in line, proc.stderr.read()
        url = line.split(" on ")[1].split()[0]
        wf = workflow(tmp_path, f'http("{url}", timeout_s=2, retries=1, penalty={PENALTY})')
        kill = lambda turn: (proc.kill(), proc.wait()) if turn == 1 else None  # noqa: E731 - after turn 0's step
        ro = roll(tmp_path, wf, before=kill)
    finally:
        proc.kill()
        proc.wait()
    by_turn = {(r.task_id, r.turn, r.candidate): r for r in ro.records}
    assert {k[:2] for k in by_turn} == {("t1", 0), ("t1", 1), ("t2", 0)}  # t1 lost at turn 1: no turn 2
    assert [by_turn["t1", 1, c].reward for c in range(3)] == [PENALTY] * 3
    assert all(by_turn["t1", 1, c].episode_success == 0.0 for c in range(3))
    t1 = next(e for e in ro.episodes if e.task_id == "t1")
    assert t1.success == 0.0 and "unreachable" in t1.lost and url in t1.lost
    assert next(e for e in ro.episodes if e.task_id == "t2").success == 1.0  # ended before the kill
    assert ro.env_lost == 1
    [message] = [m for m in ro.errors if "lost" in m]
    assert message.startswith("episode of task `t1` lost") and "after 2 tries" in message


class Misbehaving(BaseHTTPRequestHandler):
    """A server whose info and reset are right, and whose apply sends `view` as a list."""

    protocol = 1

    def log_message(self, *args):
        pass

    def _reply(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802
        self._reply({"protocol": self.protocol, "env": "odd", "fields": ["total", "target", "moves"]})

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers["Content-Length"]))
        view = {"total": 0, "target": 10, "moves": []}
        self._reply({"session": "s", "state": "1", "view": view if self.path == "/v1/reset" else [1, 2]})


def test_a_malformed_reply_loses_the_episode_naming_the_field(tmp_path, counter):
    with served(None, handler=Misbehaving) as url:
        ro = roll(tmp_path, workflow(tmp_path, f'http("{url}", penalty={PENALTY})'))
    assert ro.env_lost == 2 and {e.success for e in ro.episodes} == {0.0}
    assert {r.reward for r in ro.records} == {PENALTY} and {r.turn for r in ro.records} == {0}
    assert all("the reply to /v1/apply: field `view` is a list, expected an object" in e.lost for e in ro.episodes)


def test_a_protocol_mismatch_is_refused_at_check_and_at_start(tmp_path, counter):
    class Newer(Misbehaving):
        protocol = 2

    with served(None, handler=Newer) as url:
        with pytest.raises(UserError, match=r"speaks env protocol 2, this masdsl speaks 1"):
            HttpEnv(url)
        with pytest.raises(MasError) as err:
            workflow(tmp_path, f'http("{url}")')
    [diag] = err.value.diagnostics
    assert diag.code == "env-unreachable" and "protocol 2" in diag.message and (diag.span.line, diag.span.col) == (3, 5)


def test_check_does_not_wait_for_a_dead_server_and_declared_fields_need_none(tmp_path, counter):
    t0 = time.perf_counter()
    with pytest.raises(MasError) as err:
        workflow(tmp_path, 'http("http://127.0.0.1:9")')
    assert time.perf_counter() - t0 < 5
    assert "no env server answers" in str(err.value) and "http://127.0.0.1:9" in str(err.value)
    wf = workflow(tmp_path, 'http("http://127.0.0.1:9", fields=["total", "target", "moves"])')
    assert wf.env == "http"
    with pytest.raises(MasError, match="`env` has no field `target`"):  # the declared fields are what check knows
        workflow(tmp_path, 'http("http://127.0.0.1:9", fields=["total", "targt", "moves"])')


def test_apply_derives_new_states_and_retried_requests_are_answered_once(counter):
    with served(counter(target=3)) as url:
        env = HttpEnv(url)
        s0 = env.reset({"id": "x"})
        a, b = env.apply(s0, "a", {"n": 2, "ok": True}), env.apply(s0, "a", {"n": 5, "ok": True})
        assert (s0.view["total"], a.view["total"], b.view["total"]) == (0, 2, 5)
        assert len({s0.state, a.state, b.state}) == 3 and a.session == b.session == s0.session
        assert env.observe(s0)["total"] == 0 and env.success(b) is True and env.success(a) is False
        body = {"session": s0.session, "state": s0.state, "role": "a", "fields": {"n": 1, "ok": True}, "request": "r1"}
        first, again = env.client.call("apply", body), env.client.call("apply", body)
        assert first == again  # a retry with the same request id: the same new state, made once
        env.end_episode(a)
        with pytest.raises(ProtocolError, match=r"404: unknown session"):
            env.client.call("observe", {"session": s0.session, "state": s0.state})
        lost = env.apply(a, "a", {"n": 1, "ok": True})
        assert "unknown session" in lost.lost and env.success(lost) is False


def test_a_slow_server_times_out_after_its_retries():
    class Slow(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):  # noqa: N802
            time.sleep(1.0)

    with served(None, handler=Slow) as url:
        t0 = time.perf_counter()
        with pytest.raises(Unreachable, match=r"/v1/info timed out after 2 tries"):
            Client(url, timeout_s=0.2, retries=1, backoff_s=0.05).call("info")
        assert time.perf_counter() - t0 < 3


def test_serve_env_refuses_an_unknown_env_by_name():
    p = subprocess.run([sys.executable, "-m", "masdsl", "serve-env", "plan_pth(size=5)", "--port", "0"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "unknown env `plan_pth` (did you mean `plan_path`?)" in p.stderr
    assert "Traceback" not in p.stderr


def test_a_lost_state_is_data_not_an_exception():
    state = RemoteState("s", "1", {"total": 1}, lost="gone")
    from masdsl.envs.base import lost

    assert lost(state) == "gone" and lost(RemoteState("s", "1")) is None
