"""`env http("http://HOST:PORT", ...)`: an environment that lives in another process, reached
over HTTP (protocol in `env_protocol.py`, served by `masdsl serve-env` or any server speaking it).

A `RemoteState` is what the runtime holds as the episode's state: the server's session id, the
state's id on the server and the view the server sent with it. `apply` sends the state id and
gets a *new* state id back (the server never overwrites a state), so the K candidates of tree
sampling applied to one state do not interfere, as with an in-process env.

Failures never raise into the rollout: a server that is down, times out, answers an error, or
sends a malformed reply (the message names the field) turns the state into a lost one
(`RemoteState.lost` says why). The runtime ends a lost episode with `penalty` as its step's
reward and counts it in the `env_lost` metric (`masdsl.envs.base.lost`); the run goes on.

Every call is retried `retries` times after a connection error, a timeout or a 5xx answer:
`info`, `observe` and `success` are read-only, and `reset` and `apply` carry a request id the
server answers a second time from memory, so none is done twice.

The env's fields (`env.NAME`): `masdsl check` asks the server's handshake (`GET /v1/info`) for
them; `fields=[...]` declares them instead, so a check works without the server (the run
then checks the server has them all).
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

from masdsl.envs.env_protocol import PREFIX, PROTOCOL, ProtocolError, encode, jsonable, need
from masdsl.envs.registry import env
from masdsl.errors import UserError

CHECK_TIMEOUT_S = 5.0  # `masdsl check` asks the server once, and never waits longer than this
# The editor's checker runs on every keystroke: a server's answer (or silence) is kept this long
ASK_AGAIN_S = 10.0
_ASKED: dict[str, tuple[float, Any]] = {}


class Unreachable(Exception):
    """The server did not answer (refused, timed out, a 5xx) after every retry."""




@dataclass(frozen=True)
class Client:
    url: str
    timeout_s: float = 10.0
    retries: int = 2
    backoff_s: float = 0.2

    def call(self, endpoint: str, body: dict | None = None) -> Any:
        """The decoded reply of `endpoint` (GET for info, else POST `body`), retried on a
        connection error, a timeout or a 5xx; `Unreachable` after the last try, `ProtocolError`
        for a 4xx answer or a reply that is not JSON."""
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                return self._once(endpoint, body)
            except urllib.error.HTTPError as exc:
                message = _error_text(exc)
                if exc.code < 500:
                    raise ProtocolError(f"{PREFIX}/{endpoint} answered {exc.code}: {message}") from None
                last = f"answered {exc.code}: {message}"
            except (urllib.error.URLError, socket.timeout, TimeoutError, ConnectionError) as exc:
                reason = getattr(exc, "reason", exc)
                last = "timed out" if isinstance(reason, (socket.timeout, TimeoutError)) else f"unreachable ({reason})"
        tries = f" after {self.retries + 1} tries" if self.retries else ""
        raise Unreachable(f"{PREFIX}/{endpoint} {last}{tries}")

    def _once(self, endpoint: str, body: dict | None) -> Any:
        data = None if body is None else encode(body)
        request = urllib.request.Request(f"{self.url}{PREFIX}/{endpoint}", data=data, method="GET" if body is None else "POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=self.timeout_s) as reply:
            raw = reply.read()
        try:
            return json.loads(raw)
        except ValueError:
            raise ProtocolError(f"the reply to {PREFIX}/{endpoint} is not JSON: {raw[:60]!r}") from None


@dataclass(frozen=True)
class RemoteState:
    session: str
    state: str  # the state's id on the server
    view: Mapping[str, Any] = field(default_factory=dict)  # sent with the state: `view` costs no request
    lost: str | None = None  # why this episode cannot go on (None: it can)
    client: Client | None = field(default=None, compare=False, repr=False)  # the server holding it

    def call_bound(self, name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        """The value of env-bound function `name` (`step_reward()`, `solved()`) on this state,
        computed by the server that holds it (`masdsl.envs.base.call_bound`)."""
        if self.lost or self.client is None:
            raise RuntimeError(f"`{name}()` has no state to read: {self.lost or 'the state has no server'}")
        body = {"session": self.session, "state": self.state, "function": name, "args": jsonable(list(args)),
                "kwargs": jsonable(dict(kwargs))}
        try:
            return need(self.client.call("call", body), "value", _JSON, f"{PREFIX}/call")
        except (Unreachable, ProtocolError) as exc:
            raise RuntimeError(f"env http(\"{self.client.url}\"): {exc}") from None


_JSON = (str, int, float, bool, list, dict, type(None))


def _error_text(exc: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(exc.read()).get("error", exc.reason))
    except (ValueError, AttributeError, OSError):
        return str(exc.reason)


def handshake(client: Client) -> dict[str, Any]:
    """The server's `/v1/info`, checked: the same protocol version, an env name, a list of fields.
    `UserError` naming the URL when the server is down, speaks another version or answers nonsense."""
    where = f"env http(\"{client.url}\")"
    try:
        info = client.call("info")
        version = need(info, "protocol", int, f"{PREFIX}/info")
        if version != PROTOCOL:
            raise UserError(f"{where}: the server speaks env protocol {version}, this masdsl speaks {PROTOCOL} "
                            "(run the server and the trainer from the same masdsl version)")
        fields = need(info, "fields", list, f"{PREFIX}/info")
        need(info, "env", str, f"{PREFIX}/info")
    except Unreachable as exc:
        raise UserError(f"{where}: no env server answers ({exc}); start one with `masdsl serve-env ENV --port PORT`") from None
    except ProtocolError as exc:
        raise UserError(f"{where}: not an env server of protocol {PROTOCOL}: {exc}") from None
    if not all(isinstance(f, str) for f in fields):
        raise UserError(f"{where}: the reply to {PREFIX}/info: field `fields` must list strings")
    return info


def asked_once(key: str, ask: Callable[[], Any]) -> Any:
    """`ask()`'s answer (or its `UserError`, raised again), kept `ASK_AGAIN_S` under `key`: the
    editor's checker runs on every keystroke and must not ask a server (or wait for it) each time."""
    asked = _ASKED.get(key)
    if asked is None or time.monotonic() - asked[0] > ASK_AGAIN_S:
        try:
            asked = (time.monotonic(), ask())
        except UserError as exc:
            asked = (time.monotonic(), exc)
        _ASKED[key] = asked
    if isinstance(asked[1], UserError):
        raise asked[1]
    return asked[1]


def _asked_info(url: str, timeout_s: float) -> dict[str, Any]:
    base = _base(url)
    return asked_once(base, lambda: handshake(Client(base, min(float(timeout_s), CHECK_TIMEOUT_S), retries=0)))


def declared_fields(url: str, timeout_s: float = 10.0, retries: int = 2, penalty: float = -1.0,
                    fields: Sequence[str] | None = None) -> tuple[str, ...]:
    """The fields `masdsl check` allows as `env.NAME`: those declared, else the server's (asked once,
    within `CHECK_TIMEOUT_S`); same parameters as `HttpEnv`."""
    if fields is not None:
        return tuple(fields)
    return tuple(_asked_info(url, timeout_s)["fields"])


def served_env(url: str, timeout_s: float = 10.0, retries: int = 2, penalty: float = -1.0,
               fields: Sequence[str] | None = None) -> str | None:
    """The name of the env the server serves (`plan_path`), whose bound functions (`step_reward()`)
    a workflow may call; None when the fields are declared (the server is not asked: any may be)."""
    return None if fields is not None else str(_asked_info(url, timeout_s)["env"])


def _base(url: str) -> str:
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise UserError(f"env http({url!r}): the address must start with http:// or https://, e.g. \"http://127.0.0.1:8765\"")
    return url.rstrip("/")


@env("http", fields_from=declared_fields, serves_from=served_env)
class HttpEnv:
    """An environment served over HTTP (`masdsl serve-env`; protocol in docs/data.md): `url`, the
    seconds to wait for a reply (`timeout_s`), the retries after a failed try (`retries`), the
    reward of a step whose server failed (`penalty`), and optionally the env's `fields`."""

    limits = None  # the env runs no code here; a reward that runs code gets the sandbox defaults

    def __init__(self, url: str, timeout_s: float = 10.0, retries: int = 2, penalty: float = -1.0,
                 fields: Sequence[str] | None = None):
        self.client = Client(_base(url), float(timeout_s), int(retries))
        self.lost_penalty = float(penalty)
        info = handshake(self.client)
        self.name, self.fields = info["env"], tuple(info["fields"])
        missing = [f for f in fields or () if f not in self.fields]
        if missing:
            raise UserError(f"env http(\"{self.client.url}\"): the server's env `{self.name}` has no field "
                            + ", ".join(f"`{f}`" for f in missing) + f" (it has {', '.join(self.fields) or 'none'})")

    def _lose(self, state: RemoteState | None, exc: Exception) -> RemoteState:
        reason = f"env http(\"{self.client.url}\"): {exc}"
        if state is None:
            return RemoteState("", "", {}, reason)
        return replace(state, lost=reason)

    def _next(self, reply: Any, endpoint: str) -> RemoteState:
        where = f"{PREFIX}/{endpoint}"
        return RemoteState(need(reply, "session", str, where), need(reply, "state", str, where),
                           need(reply, "view", dict, where), client=self.client)

    def reset(self, task: Mapping[str, Any]) -> RemoteState:
        try:
            return self._next(self.client.call("reset", {"task": jsonable(dict(task)), "request": uuid.uuid4().hex}), "reset")
        except (Unreachable, ProtocolError) as exc:
            return self._lose(None, exc)

    def apply(self, state: RemoteState, role: str, fields: Mapping[str, Any]) -> RemoteState:
        if state.lost:
            return state
        body = {"session": state.session, "state": state.state, "role": role, "fields": jsonable(dict(fields)),
                "request": uuid.uuid4().hex}
        try:
            return self._next(self.client.call("apply", body), "apply")
        except (Unreachable, ProtocolError) as exc:
            return self._lose(state, exc)

    def view(self, state: RemoteState) -> Mapping[str, Any]:
        return state.view

    def observe(self, state: RemoteState) -> Mapping[str, Any]:
        """The view as the server computes it now (`view` answers the one sent with the state)."""
        reply = self.client.call("observe", {"session": state.session, "state": state.state})
        return need(reply, "view", dict, f"{PREFIX}/observe")

    def success(self, state: RemoteState) -> bool | float:
        """The server's success of `state` (a lost episode has none: False). Raises when the server
        fails here: the runtime counts it as the env's success failing (scored 0)."""
        if state.lost:
            return False
        try:
            reply = self.client.call("success", {"session": state.session, "state": state.state})
            return need(reply, "success", (bool, int, float), f"{PREFIX}/success")
        except (Unreachable, ProtocolError) as exc:
            raise RuntimeError(f"env http(\"{self.client.url}\"): {exc}") from None

    def end_episode(self, state: RemoteState) -> None:
        """Let the server forget the episode's states (best effort: it forgets old ones anyway);
        the runtime calls it when an episode ends (`masdsl.envs.base.end_episode`)."""
        if state.session:
            try:
                self.client.call("close", {"session": state.session})
            except (Unreachable, ProtocolError):
                pass
