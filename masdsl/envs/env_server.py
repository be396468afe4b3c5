"""Serve any env of the registry over HTTP (protocol in `env_protocol.py`; `masdsl serve-env`).

The server keeps each episode's states by session id and state id. `apply` never replaces a
state: it stores the new one under a new id derived from the session, so K candidates applied
to the same state id (tree sampling) each get their own successor, as `Env.apply` does in
process. A retried `reset` or `apply` carrying a `request` id the server has already answered
gets the same reply, so the client may retry them after a timeout without a second episode or
move. Sessions past `max_sessions` are forgotten, least recently used first (a client asking
about one then gets 404 and loses that episode).

    server = make_server(env, "plan_path", ("grid", "pos"), "127.0.0.1", 8765)
    server.serve_forever()
"""

from __future__ import annotations

import inspect
import itertools
import json
import threading
import uuid
from collections import OrderedDict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Sequence

from masdsl.envs.base import Env
from masdsl.envs.env_protocol import ENDPOINTS, PREFIX, PROTOCOL, ProtocolError, encode, jsonable, kind
from masdsl.envs.registry import REGISTRY

MAX_SESSIONS = 4096
MAX_REPLIES = 16384  # remembered replies of reset/apply by request id (retries)


class NotFound(Exception):
    """A session or state the server does not hold (never made, closed, or forgotten)."""


class CallFailed(Exception):
    """An env-bound function raised on the server (answered 422: retrying would fail again)."""


class EnvHost:
    """One env's episodes, by session id and state id; safe to call from many threads (the env's
    own methods are called outside the lock: `Env.apply` never mutates its input)."""

    def __init__(self, env: Env, name: str, fields: Sequence[str], max_sessions: int = MAX_SESSIONS):
        self.env, self.name, self.fields, self.max_sessions = env, name, tuple(fields), max_sessions
        self._lock = threading.Lock()
        self._sessions: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._replies: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._ids = itertools.count(1)

    def info(self, body: dict) -> dict:
        return {"protocol": PROTOCOL, "env": self.name, "fields": list(self.fields)}

    def _store(self, session: str, state: Any) -> str:
        with self._lock:
            states = self._sessions.get(session)
            if states is None:
                raise NotFound(f"unknown session `{session}` (closed, or forgotten after {self.max_sessions} newer ones)")
            token = f"{session[:8]}-{next(self._ids)}"
            states[token] = state
            self._sessions.move_to_end(session)
        return token

    def _state(self, body: dict) -> tuple[str, Any]:
        session, token = field(body, "session", str), field(body, "state", str)
        with self._lock:
            states = self._sessions.get(session)
            if states is None:
                raise NotFound(f"unknown session `{session}` (closed, or forgotten after {self.max_sessions} newer ones)")
            if token not in states:
                raise NotFound(f"session `{session}` has no state `{token}`")
            self._sessions.move_to_end(session)
            return session, states[token]

    def _once(self, body: dict, make) -> dict:
        """`make()`'s reply, or the reply already given to this `request` id (a retry)."""
        request = body.get("request")
        if request is not None:
            with self._lock:
                if request in self._replies:
                    return self._replies[request]
        reply = make()
        if request is not None:
            with self._lock:
                self._replies[str(request)] = reply
                while len(self._replies) > MAX_REPLIES:
                    self._replies.popitem(last=False)
        return reply

    def reset(self, body: dict) -> dict:
        task = field(body, "task", dict)

        def make() -> dict:
            state = self.env.reset(task)
            session = uuid.uuid4().hex
            with self._lock:
                self._sessions[session] = {}
                while len(self._sessions) > self.max_sessions:
                    self._sessions.popitem(last=False)
            return {"session": session, "state": self._store(session, state), "view": jsonable(self.env.view(state))}

        return self._once(body, make)

    def apply(self, body: dict) -> dict:
        role, fields = field(body, "role", str), field(body, "fields", dict)

        def make() -> dict:
            session, state = self._state(body)
            new = self.env.apply(state, role, fields)
            return {"session": session, "state": self._store(session, new), "view": jsonable(self.env.view(new))}

        return self._once(body, make)

    def observe(self, body: dict) -> dict:
        return {"view": jsonable(self.env.view(self._state(body)[1]))}

    def success(self, body: dict) -> dict:
        value = self.env.success(self._state(body)[1])
        return {"success": value if isinstance(value, bool) else float(value)}

    def call(self, body: dict) -> dict:
        """An env-bound function of a state (`step_reward()`, `solved()`), computed here, where the
        state lives: a served env keeps the reward functions of its `.mas` lines."""
        name, args, kwargs = field(body, "function", str), field(body, "args", list), field(body, "kwargs", dict)
        spec = REGISTRY.functions.get(name)
        if spec is None or spec.env is None or not spec.allowed_in(self.name):
            raise ProtocolError(f"env `{self.name}` has no function `{name}` bound to it")
        state = self._state(body)[1]
        if self.env.limits is not None and "limits" in inspect.signature(spec.fn).parameters:
            kwargs = {**kwargs, "limits": self.env.limits}  # code runs under the served env's sandbox limits
        try:
            value = spec.fn(state, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - the function's failure goes to the client as its message
            raise CallFailed(f"`{name}(...)` raised {type(exc).__name__}: {exc}") from None
        return {"value": jsonable(value)}

    def close(self, body: dict) -> dict:
        with self._lock:
            return {"closed": self._sessions.pop(field(body, "session", str), None) is not None}

    def sessions(self) -> int:
        with self._lock:
            return len(self._sessions)


def field(body: dict, name: str, typ: type) -> Any:
    """A request's field, checked (`ProtocolError`, answered 400, names it)."""
    if name not in body:
        raise ProtocolError(f"the request has no field `{name}`")
    if not isinstance(body[name], typ):
        raise ProtocolError(f"the request's field `{name}` is {kind(body[name])}, expected {kind(typ())}")
    return body[name]


class Handler(BaseHTTPRequestHandler):
    host: EnvHost  # set on the subclass `make_server` builds
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass  # one line per request would drown the server's terminal

    def _send(self, status: int, body: dict) -> None:
        data = encode(body)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _dispatch(self, body: dict) -> None:
        name = self.path[len(PREFIX) + 1:] if self.path.startswith(PREFIX + "/") else ""
        method = getattr(self.host, name, None) if name in ENDPOINTS else None
        if method is None or (name == "info") != (self.command == "GET"):
            return self._send(404, {"error": f"no endpoint {self.command} {self.path} (protocol {PROTOCOL}: {PREFIX}/...)"})
        try:
            self._send(200, method(body))
        except ProtocolError as exc:
            self._send(400, {"error": str(exc)})
        except NotFound as exc:
            self._send(404, {"error": str(exc)})
        except CallFailed as exc:
            self._send(422, {"error": str(exc)})
        except Exception as exc:  # noqa: BLE001 - the env's own failure goes to the client, the server stays up
            self._send(500, {"error": f"env `{self.host.name}` {name} raised {type(exc).__name__}: {exc}"})

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._dispatch({})

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        except (ValueError, UnicodeDecodeError) as exc:
            return self._send(400, {"error": f"the request body is not JSON ({exc})"})
        if not isinstance(body, dict):
            return self._send(400, {"error": f"the request body is {kind(body)}, not a JSON object"})
        self._dispatch(body)


def make_server(env: Env, name: str, fields: Sequence[str], host: str = "127.0.0.1", port: int = 0,
                max_sessions: int = MAX_SESSIONS) -> ThreadingHTTPServer:
    """A threading HTTP server for `env` (not started: call `serve_forever`); port 0 picks a free one
    (`server.server_address[1]`)."""
    handler = type("EnvHandler", (Handler,), {"host": EnvHost(env, name, fields, max_sessions)})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server
