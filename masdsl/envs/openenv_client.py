"""`env openenv("http://HOST:PORT", ...)`: an OpenEnv server as a workflow's environment, driven
through openenv-core's own client (`GenericEnvClient`, its WebSocket sessions).

- A role's parsed fields become the server's action: for a masdsl env served with `masdsl
  serve-env --openenv`, `{"role": ROLE, "fields": FIELDS}`; for any other server, the fields the
  server's action schema names (`message`, `code`, ...), taken from the role's `parse` lines.
- The observation is the view: `env.NAME` in prompts and expressions reads its field NAME, and
  `env.reward` and `env.done` are the step's reward (0.0 when the server sends none) and done.
- A task resets the server with `seed` (the task's `seed`, else a number derived from its id),
  `episode_id` (its id) and `task` (the row itself, which a masdsl server plays; others ignore it).
- The env's own success (used without a `success` line): the observation's `success` field when
  it has one, else 1 for an episode that is done with a positive reward.

An OpenEnv session holds one state and cannot be copied, but masdsl applies the K candidates of
a step to the same state (tree sampling). So a state here is the reset plus the actions taken
since: a candidate continues the server session that sits at its state when one is free, and
otherwise opens a new session and replays the state's actions (the server's reset must be
deterministic for a seed). Sessions left idle are kept, `max_idle` at most, and an episode's are
closed when it ends.

Failures never raise into the rollout: a server that is down, refuses or errs turns the state
into a lost one (`lost` says why) that the runtime ends with `penalty`, as for `env http(...)`.

`masdsl check` reads the fields from the server's `/schema` (within `CHECK_TIMEOUT_S`), or from
`fields=[...]` without asking the server.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
import uuid
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Mapping, Sequence, TypeAlias

from masdsl.envs.env_protocol import jsonable
from masdsl.envs.http_env import CHECK_TIMEOUT_S, asked_once
from masdsl.envs.registry import env
from masdsl.errors import UserError

if TYPE_CHECKING:  # openenv-core is an optional extra: loaded when an `env openenv(...)` starts
    from openenv.core import SyncEnvClient
    from openenv.core.client_types import StepResult

    Session: TypeAlias = SyncEnvClient  # one WebSocket session of openenv-core's synchronous client

INSTALL = ("pip install 'masdsl[openenv]' && pip install --no-deps 'openenv-core==0.3.0' "
           "(docs/data.md, \"OpenEnv\")")
MAX_IDLE = 16  # idle server sessions kept for reuse (each is a WebSocket and a server thread)
OUTPUT_FIELDS = ("output", "ok")  # what every role has besides its `parse` fields


@dataclass(frozen=True)
class OpenEnvState:
    episode: str  # one id per reset: the sessions of an episode are closed together
    key: str  # this state's id: the idle session sitting at it, if any, is parked under it
    reset: Mapping[str, Any]  # the reset's arguments and the actions since, replayed to reach this
    actions: tuple[Mapping[str, Any], ...] = ()  # state in a new session
    view: Mapping[str, Any] = field(default_factory=dict)
    lost: str | None = None


def schema(url: str, timeout_s: float) -> dict[str, Any]:
    """The server's `/schema` (action, observation and state JSON schemas); `UserError` naming
    the URL when no OpenEnv server answers."""
    where = f"env openenv(\"{url}\")"
    try:
        with urllib.request.urlopen(f"{url}/schema", timeout=timeout_s) as reply:
            body = json.loads(reply.read())
        props = {k: body[k]["properties"] for k in ("action", "observation")}
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise UserError(f"{where}: no OpenEnv server answers ({getattr(exc, 'reason', exc)}); serve a masdsl env "
                        "with `masdsl serve-env --openenv ENV --port PORT`") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise UserError(f"{where}: not an OpenEnv server (its /schema has no {exc})") from None
    return props


def _base(url: str) -> str:
    if not isinstance(url, str) or not url.startswith(("http://", "https://", "ws://", "wss://")):
        raise UserError(f"env openenv({url!r}): the address must start with http:// or https://, "
                        "e.g. \"http://127.0.0.1:8000\"")
    return url.rstrip("/")


def view_fields(observation: Mapping[str, Any]) -> tuple[str, ...]:
    """`env.NAME` names of an observation schema: its fields, with `reward` and `done`.

    >>> view_fields({"message": {}, "done": {}, "reward": {}, "metadata": {}})
    ('message', 'done', 'reward')
    """
    return tuple(dict.fromkeys([*(k for k in observation if k != "metadata"), "done", "reward"]))


def declared_fields(url: str, fields: Sequence[str] | None = None, timeout_s: float = 30.0,
                    penalty: float = -1.0, max_idle: int = MAX_IDLE) -> tuple[str, ...]:
    """The fields `masdsl check` allows as `env.NAME`: those declared (with `reward` and `done`),
    else the server's observation fields (asked once, within `CHECK_TIMEOUT_S`)."""
    if fields is not None:
        return tuple(dict.fromkeys([*fields, "done", "reward"]))
    base = _base(url)
    return view_fields(asked_once(f"openenv {base}", lambda: schema(base, min(float(timeout_s), CHECK_TIMEOUT_S)))["observation"])


@env("openenv", fields_from=declared_fields)
class OpenEnvEnv:
    """An OpenEnv server (openenv-core; `masdsl serve-env --openenv` serves masdsl's envs): `url`,
    optionally its observation `fields`, the seconds to wait for a reply (`timeout_s`), the reward
    of a step whose server failed (`penalty`), and the idle sessions kept for reuse (`max_idle`)."""

    limits = None  # the env runs no code here

    def __init__(self, url: str, fields: Sequence[str] | None = None, timeout_s: float = 30.0,
                 penalty: float = -1.0, max_idle: int = MAX_IDLE):
        try:  # the optional extra (openenv-core): imported when a run starts, never by `masdsl check`
            from openenv.core import GenericEnvClient
        except ImportError as exc:
            raise UserError(f"env openenv(...) needs openenv-core ({exc}): {INSTALL}") from None
        self.url, self.timeout_s, self.lost_penalty, self.max_idle = _base(url), float(timeout_s), float(penalty), int(max_idle)
        self._client_type = GenericEnvClient
        props = schema(self.url, self.timeout_s)
        self.action_fields = tuple(k for k in props["action"] if k != "metadata")
        self.masdsl_action = {"role", "fields"} <= set(self.action_fields)  # a `serve-env --openenv` server
        self.fields = view_fields(props["observation"])
        missing = [f for f in fields or () if f not in self.fields]
        if missing:
            raise UserError(f"env openenv(\"{self.url}\"): the server's observation has no field "
                            + ", ".join(f"`{f}`" for f in missing) + f" (it has {', '.join(self.fields)})")
        self._idle: OrderedDict[str, tuple[str, Session]] = OrderedDict()  # state key -> (episode, session)
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, object]:
        """Pickled (Ray's env workers): the settings, not the open sessions; each copy opens its
        own, and a state whose session is elsewhere is replayed."""
        state = {k: v for k, v in self.__dict__.items() if k != "_lock"}
        state["_idle"] = OrderedDict()
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    # ---- sessions -----------------------------------------------------------------------------
    def _open(self) -> Session:
        client = self._client_type(base_url=self.url, connect_timeout_s=self.timeout_s,
                                   message_timeout_s=self.timeout_s).sync()
        client.connect()
        return client

    def _park(self, state: OpenEnvState, client: Session) -> None:
        with self._lock:
            self._idle[state.key] = (state.episode, client)
            evicted = [self._idle.popitem(last=False)[1][1] for _ in range(len(self._idle) - self.max_idle)]
        for old in evicted:
            _close(old)

    def _session_at(self, state: OpenEnvState) -> Session:
        """A session sitting at `state`: the idle one parked there, else a new one replayed to it."""
        with self._lock:
            parked = self._idle.pop(state.key, None)
        if parked is not None:
            return parked[1]
        client = self._open()
        try:
            client.reset(**state.reset)
            for action in state.actions:
                client.step(dict(action))
        except BaseException:
            _close(client)
            raise
        return client

    # ---- the Env contract ---------------------------------------------------------------------
    def _state(self, episode: str, reset: Mapping[str, Any], actions: tuple, result: StepResult) -> OpenEnvState:
        observation = result.observation if isinstance(result.observation, Mapping) else {}
        view = {**observation, "reward": 0.0 if result.reward is None else result.reward, "done": bool(result.done)}
        return OpenEnvState(episode, uuid.uuid4().hex, reset, actions, view)

    def reset(self, task: Mapping[str, Any]) -> OpenEnvState:
        task_id = str(task.get("id", ""))
        seed = task.get("seed")
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            seed = zlib.crc32(task_id.encode("utf-8"))  # the same task, the same episode, in every process
        reset = {"seed": seed, "episode_id": task_id[:255] or None, "task": jsonable(dict(task))}
        try:
            client = self._open()
            try:
                state = self._state(uuid.uuid4().hex, reset, (), client.reset(**reset))
            except BaseException:
                _close(client)
                raise
        except Exception as exc:  # noqa: BLE001 - any failure of the server or the link loses the episode
            return OpenEnvState("", "", reset, lost=self._why(exc))
        self._park(state, client)
        return state

    def apply(self, state: OpenEnvState, role: str, fields: Mapping[str, Any]) -> OpenEnvState:
        if state.lost:
            return state
        action = self.action(role, fields)
        try:
            client = self._session_at(state)
            try:
                new = self._state(state.episode, state.reset, (*state.actions, action), client.step(action))
            except BaseException:
                _close(client)
                raise
        except Exception as exc:  # noqa: BLE001 - as in reset
            return replace(state, lost=self._why(exc))
        self._park(new, client)
        return new

    def action(self, role: str, fields: Mapping[str, Any]) -> dict[str, Any]:
        """The server's action for a role's parsed fields."""
        if self.masdsl_action:
            return {"role": role, "fields": jsonable(dict(fields))}
        return {k: jsonable(v) for k, v in fields.items() if k in self.action_fields and k not in OUTPUT_FIELDS}

    def view(self, state: OpenEnvState) -> Mapping[str, Any]:
        return state.view

    def success(self, state: OpenEnvState) -> bool | float:
        if state.lost:
            return False
        if isinstance(state.view.get("success"), (bool, int, float)):
            return state.view["success"]
        return bool(state.view.get("done")) and float(state.view.get("reward") or 0.0) > 0

    def end_episode(self, state: OpenEnvState) -> None:
        """Close the episode's idle sessions (the runtime calls it when an episode ends)."""
        with self._lock:
            mine = [k for k, (episode, _) in self._idle.items() if episode == state.episode]
            clients = [self._idle.pop(k)[1] for k in mine]
        for client in clients:
            _close(client)

    def close(self) -> None:
        with self._lock:
            clients = [c for _, c in self._idle.values()]
            self._idle.clear()
        for client in clients:
            _close(client)

    def _why(self, exc: Exception) -> str:
        return f"env openenv(\"{self.url}\"): {type(exc).__name__}: {exc}"


def _close(client: Session) -> None:
    try:
        client.close()
    except Exception:  # noqa: BLE001 - best effort: the server forgets a dropped session anyway
        pass
