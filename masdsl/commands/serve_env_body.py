"""The body of `masdsl serve-env --openenv ENV` (its light module: `serve_env.py`): any masdsl
env served as an OpenEnv server, built with openenv-core's own server (`create_fastapi_app`: its
`/ws` sessions, `/reset`, `/step`, `/state`, `/schema`, `/health`), so any OpenEnv client (TRL,
Unsloth, `openenv.core.GenericEnvClient`, `env openenv(...)`) drives it.

The wire types are openenv-core's models, made for the env served:
- the action (`MasdslAction`) is a role and its parsed fields, as a `.mas` role's `parse` lines
  give them: `{"role": "planner", "fields": {"moves": ["U", "L"]}}`;
- the observation has one field per `env.NAME` the env declares (its view), `success` (the env's
  own success, unless the view has a field of that name), and OpenEnv's `reward` and `done`;
- `reset` takes a `task` (a data row, as a `.mas` file's `data` lines read them), or a `seed`,
  which picks row `seed % n` of the served rows (`serve_env.rows_of`).

The reward of a step is a masdsl reward expression evaluated after the move, as a role's
`reward` line would be: by default the env's own (`DEFAULT_REWARDS`: `step_reward()` for the
games, `pass_rate(code, task.tests)` for code, `correct(answer, task.answer)` for math), else
`--reward EXPR`; an env with neither scores its success. `done` is the env's success reaching 1.
openenv-core, FastAPI and uvicorn load here only: `serve-env` without `--openenv` needs none.
"""

from __future__ import annotations

import argparse
import functools
import socket
from dataclasses import dataclass
from typing import Any, Callable, Mapping, MutableMapping, Optional, Sequence

from masdsl.commands.serve_env import OPENENV_SESSIONS, rows_of
from masdsl.envs.base import Env
from masdsl.envs.env_protocol import jsonable
from masdsl.envs.openenv_client import INSTALL
from masdsl.errors import UserError
from masdsl.lang.exprs import CompiledExpr, called_names, resolve_function
from masdsl.lang.parse import parse_text
from masdsl.lang.workflow import EvalContext

try:
    import uvicorn
    from fastapi import FastAPI
    from openenv.core.env_server import Action, Environment, Observation, State, create_fastapi_app
    from pydantic import ConfigDict, Field, create_model
    from starlette.websockets import WebSocketDisconnect
except ImportError as exc:  # the optional extra is not installed: `serve-env --openenv` says how
    raise UserError(f"serve-env --openenv needs openenv-core ({exc}): {INSTALL}") from None

GAME_REWARD = "step_reward()"
DEFAULT_REWARDS = {"sudoku": GAME_REWARD, "sokoban": GAME_REWARD, "plan_path": GAME_REWARD,
                   "code": "pass_rate(code, task.tests)", "math": "correct(answer, task.answer)"}


class MasdslAction(Action):
    """A role's move: its name and its parsed fields (a failed parse: `ok` False)."""

    role: str = Field(description="the acting role, as the workflow names it")
    fields: dict[str, Any] = Field(default_factory=dict, description="the role's parsed fields (`parse` lines)")


class MasdslState(State):
    """OpenEnv's state (episode id, step count) and which env and task the episode plays."""

    env: str = ""
    task_id: str = ""


class OpenObservation(Observation):
    """The observation of an env that declares no view fields: each view field is sent as is."""

    model_config = ConfigDict(extra="allow", validate_assignment=True, arbitrary_types_allowed=True)


def observation_type(name: str, fields: Sequence[str]) -> type[Observation]:
    """An OpenEnv observation with one field per view field of env `name` (in its `/schema`, so a
    client learns them), and `success`."""
    extra: dict[str, Any] = {f: (Optional[Any], Field(default=None, description=f"`env.{f}`")) for f in fields}
    if "success" not in extra:
        extra["success"] = (float, Field(default=0.0, description="the env's own success (0 to 1)"))
    title = "".join(part.title() for part in name.split("_")) + "Observation"
    return create_model(title, __base__=Observation if fields else OpenObservation, **extra)


def reward_expr(text: str) -> CompiledExpr:
    """A reward expression (`step_reward()`, `pass_rate(code, task.tests)`), parsed as a `.mas`
    reward line is; `UserError` for bad syntax or an unknown function."""
    module, diags = parse_text(f"team {text}", "--reward")
    if module is None or not module.teams or diags:
        raise UserError(f"serve-env: --reward `{text}` is not an expression"
                        + (f": {diags[0].message}" if diags else ""))
    node = module.teams[0].expr
    unknown = [n for n in called_names(node) if resolve_function(n) is None]
    if unknown:
        raise UserError(f"serve-env: --reward `{text}`: unknown function `{unknown[0]}`")
    return CompiledExpr(node, text)


@dataclass
class Served:
    """What every session of one server shares: the env (configuration only: states are the
    sessions'), its name and view fields, the reward expression and the rows `seed` picks from."""

    env: Env
    name: str
    fields: tuple[str, ...]
    reward: CompiledExpr | None
    rows: Sequence[Mapping[str, Any]] = ()

    def task(self, seed: int | None, task: Mapping[str, Any] | None) -> Mapping[str, Any]:
        if task is not None:
            return task
        if seed is None:
            raise ValueError(f"reset needs a `task` (a data row of env `{self.name}`) or a `seed`")
        if not self.rows:
            raise ValueError(f"env `{self.name}` is served with no data: reset needs a `task` "
                             "(or serve it with --data SOURCE)")
        return self.rows[seed % len(self.rows)]


class MasdslEnvironment(Environment):
    """One OpenEnv session of a masdsl env: the current state of one episode."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # the env is configuration; each session holds its own state

    def __init__(self, served: Served, observation: type[Observation]):
        super().__init__()
        self.served, self.observation = served, observation
        self._state: Any = None
        self._task: Mapping[str, Any] = {}
        self._info = MasdslState(env=served.name)

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None,
              task: Optional[dict[str, Any]] = None, **kwargs: object) -> Observation:
        self._task = self.served.task(seed, task)
        self._state = self.served.env.reset(self._task)
        self._info = MasdslState(episode_id=episode_id, step_count=0, env=self.served.name,
                                 task_id=str(self._task.get("id", "")))
        return self._observe(None)

    def step(self, action: Action, timeout_s: Optional[float] = None, **kwargs: object) -> Observation:
        if self._state is None:
            raise ValueError("step before reset: reset the episode first")
        role = action.role if isinstance(action, MasdslAction) else ""
        fields = {"output": "", "ok": True, **(action.fields if isinstance(action, MasdslAction) else {})}
        self._state = self.served.env.apply(self._state, role, fields)
        self._info.step_count += 1
        return self._observe(self._reward(role, fields))

    def _reward(self, role: str, fields: Mapping[str, Any]) -> float:
        env, state = self.served.env, self._state
        if self.served.reward is None:
            return float(env.success(state))
        ctx = EvalContext(task=self._task, state=state, env_view=env.view(state), fields={role: fields},
                          turn=self._info.step_count - 1, role=role, output=fields.get("output"), limits=env.limits)
        return float(self.served.reward.evaluate(ctx))

    def _observe(self, reward: float | None) -> Observation:
        view = dict(jsonable(self.served.env.view(self._state)))
        success = float(self.served.env.success(self._state))
        if "success" not in view:
            view["success"] = success
        return self.observation(**view, reward=reward, done=success >= 1.0)

    @property
    def state(self) -> MasdslState:
        return self._info


class QuietClose:
    """ASGI wrapper: openenv-core's `/ws` handler closes a socket its client has already closed,
    which raises `WebSocketDisconnect`; uvicorn would log that as a traceback at the end of every
    episode (and a server whose output nobody reads would stall once its pipe filled)."""

    def __init__(self, app: FastAPI):
        self.app = app

    async def __call__(self, scope: MutableMapping[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        try:
            await self.app(scope, receive, send)
        except WebSocketDisconnect:
            if scope.get("type") != "websocket":
                raise


def make_app(env: Env, name: str, fields: Sequence[str], reward: str | None = None,
             rows: Sequence[Mapping[str, Any]] = (), max_sessions: int = 64) -> QuietClose:
    """openenv-core's FastAPI app serving `env` (run it with uvicorn); `reward`: the reward
    expression, default the env's own (`DEFAULT_REWARDS`), else its success."""
    text = reward if reward is not None else DEFAULT_REWARDS.get(name)
    served = Served(env, name, tuple(fields), reward_expr(text) if text else None, rows)
    observation = observation_type(name, served.fields)
    factory = functools.partial(MasdslEnvironment, served, observation)
    return QuietClose(create_fastapi_app(factory, MasdslAction, observation, max_concurrent_envs=max_sessions))


def main(args: argparse.Namespace, served: tuple[Env, str, tuple[str, ...]]) -> int:
    """Serve the env `serve_env.prepare` resolved, until Ctrl-C."""
    env, name, fields = served
    app = make_app(env, name, fields, args.reward, rows_of(args.data, name), args.max_sessions or OPENENV_SESSIONS)
    sock = listen(args.host, args.port)
    host, port = sock.getsockname()[:2]
    print(f"serving env `{name}` over OpenEnv (fields: {', '.join(fields) or 'any'}) on http://{host}:{port}"
          f"  (in a .mas file: env openenv(\"http://{host}:{port}\"); Ctrl-C to stop)", flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
    return 0


def listen(host: str, port: int) -> socket.socket:
    try:
        sock = socket.create_server((host, port))
    except OSError as exc:
        raise UserError(f"serve-env: cannot listen on {host}:{port}: {exc.strerror or exc}; "
                        "pick another with --port (0: any free port)") from None
    return sock
