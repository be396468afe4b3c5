"""`masdsl serve-env ENV [--host H] [--port P]`: serve an environment over HTTP, for workflows
that name it with `env http("http://H:P")` (protocol: docs/data.md, "Environments over HTTP").
With `--openenv`, serve it as an OpenEnv server instead (the body, `serve_env_body.py`), for any
OpenEnv client and for `env openenv("http://H:P")`; `--reward` and `--data` say what its steps
score and which rows a `seed` picks.

ENV is a registered env with literal arguments, as a `.mas` file writes it (`plan_path`,
`plan_path(gamma=1.0)`), or `MODULE:ENV`, where MODULE is a Python file (`envs/my_env.py`) or an
importable module (`mypkg.envs`) and ENV an env it registers with `@env` or a class it defines
(`envs/my_env.py:Counter(target=3)`).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
from typing import Any

from masdsl.config import SandboxConfig
from masdsl.envs.base import contract_problem
from masdsl.envs.env_protocol import PROTOCOL
from masdsl.envs.env_server import MAX_SESSIONS, make_server
from masdsl.envs.registry import load_builtins
from masdsl.errors import UserError, did_you_mean
from masdsl.lang.imports import import_file
from masdsl.sandbox import limits_from_config

DEFAULT_PORT = 8766  # `masdsl view --serve` takes 8765
BODY = "masdsl.commands.serve_env_body"  # the OpenEnv server (openenv-core): imported by the CLI for --openenv only
OPENENV_SESSIONS = 256  # with --openenv: open sessions (one WebSocket, one episode and one thread each)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("env", metavar="ENV",
                   help="a registered env, with literal arguments as in a .mas file (`plan_path(gamma=1.0)`), "
                        "or MODULE:ENV (a .py file or a module, and an env it registers or a class it defines)")
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: 127.0.0.1, this machine only)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"the port (default: {DEFAULT_PORT}; 0: any free port)")
    p.add_argument("--max-sessions", type=int, default=None,
                   help=f"episodes kept at once; older ones are forgotten (default: {MAX_SESSIONS}; "
                        f"with --openenv: open sessions, default {OPENENV_SESSIONS})")
    p.add_argument("--openenv", action="store_true",
                   help="serve it as an OpenEnv server (openenv-core: /ws, /reset, /step, /state, /schema) "
                        "instead of masdsl's own /v1 protocol")
    p.add_argument("--reward", metavar="EXPR", default=None,
                   help="with --openenv: the reward of a step, a .mas reward expression (default: the env's own, "
                        "e.g. `step_reward()` for the games)")
    p.add_argument("--data", metavar="SOURCE", default=None,
                   help="with --openenv: the rows a reset's `seed` picks from, a data source with literal "
                        "arguments (`plan_path(\"eval\", n=32)`; default: the env's own source, split train)")


def parse_target(text: str) -> tuple[str | None, str, list, dict]:
    """(module or None, env name, args, kwargs) of an ENV argument.

    >>> parse_target("plan_path(gamma=1.0)")
    (None, 'plan_path', [], {'gamma': 1.0})
    >>> parse_target("envs/my_env.py:Counter(3)")
    ('envs/my_env.py', 'Counter', [3], {})
    """
    module, _, call = text.rpartition(":") if ":" in text.split("(")[0] else ("", "", text)
    try:
        node = ast.parse(call.strip(), mode="eval").body
        if isinstance(node, ast.Name):
            return module or None, node.id, [], {}
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
            raise ValueError("not NAME or NAME(ARGS)")
        return (module or None, node.func.id, [ast.literal_eval(a) for a in node.args],
                {k.arg: ast.literal_eval(k.value) for k in node.keywords})
    except (SyntaxError, ValueError) as exc:
        raise UserError(f"serve-env: `{text}` is not an env: write NAME, NAME(ARGS) with literal arguments, or "
                        f"MODULE:NAME ({exc})") from None


def resolve(text: str) -> tuple[Any, str, tuple[str, ...]]:
    """The env instance, its name and its fields, for an ENV argument."""
    module_name, name, args, kwargs = parse_target(text)
    registry = load_builtins()
    module = None
    if module_name is not None:
        if module_name.endswith(".py") or "/" in module_name:
            module = import_file(module_name)  # its `@env` lines register into the registry
        else:
            try:
                module = importlib.import_module(module_name)
            except ImportError as exc:
                raise UserError(f"serve-env: cannot import `{module_name}`: {exc}") from None
    spec = registry.envs.get(name)
    if spec is not None:
        factory, fields = spec.factory, spec.fields
    elif module is not None and callable(getattr(module, name, None)):
        factory, fields = getattr(module, name), ()
    else:
        hint = did_you_mean(name, registry.envs)
        raise UserError(f"serve-env: unknown env `{name}`" + (f" ({hint})" if hint else "")
                        + ("" if module_name else "; a user env needs MODULE:ENV (`envs/my_env.py:my_env`)"))
    return _instance(factory, name, args, kwargs), name, tuple(fields)


def _instance(factory: Any, name: str, args: list, kwargs: dict) -> Any:
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        params = {}
    if "limits" in params and "limits" not in kwargs:  # as a run does: the sandbox's default limits
        kwargs = {**kwargs, "limits": limits_from_config(SandboxConfig())}
    try:
        env = factory(*args, **kwargs)
    except TypeError as exc:
        raise UserError(f"serve-env: env `{name}`: bad arguments: {exc}") from None
    problem = contract_problem(env)
    if problem is not None:
        raise UserError(f"serve-env: {problem}")
    return env


def rows_of(text: str | None, env_name: str) -> list:
    """The rows a `seed` picks from: `--data SOURCE(ARGS)`, else the env's own data source
    (`plan_path("train")`), else none (a reset must then send its `task`)."""
    registry = load_builtins()
    if text is None:
        spec = registry.data_sources.get(env_name)
        return list(spec.fn("train")) if spec is not None else []
    _, name, args, kwargs = parse_target(text)
    spec = registry.data_sources.get(name)
    if spec is None:
        hint = did_you_mean(name, registry.data_sources)
        raise UserError(f"serve-env: --data: unknown data source `{name}`" + (f" ({hint})" if hint else ""))
    try:
        return list(spec.fn(*args, **kwargs))
    except TypeError as exc:
        raise UserError(f"serve-env: --data `{text}`: bad arguments: {exc}") from None


def prepare(args: argparse.Namespace) -> int | tuple[Any, str, tuple[str, ...]]:
    """The env to serve; without `--openenv`, served here over /v1 until Ctrl-C (the exit status).
    With it, the env for the body (`serve_env_body.main`: openenv-core loads only then)."""
    env, name, fields = resolve(args.env)
    if args.openenv:
        return env, name, fields
    if args.reward is not None or args.data is not None:
        raise UserError("serve-env: --reward and --data are for --openenv (the /v1 protocol's client "
                        "computes rewards from the workflow's own lines)")
    try:
        server = make_server(env, name, fields, args.host, args.port, max_sessions=args.max_sessions or MAX_SESSIONS)
    except OSError as exc:
        raise UserError(f"serve-env: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}; "
                        "pick another with --port (0: any free port)") from None
    host, port = server.server_address[:2]
    print(f"serving env `{name}` (fields: {', '.join(fields) or 'any'}; protocol {PROTOCOL}) on http://{host}:{port}"
          f"  (in a .mas file: env http(\"http://{host}:{port}\"); Ctrl-C to stop)", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0
