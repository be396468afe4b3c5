"""`masdsl serve-env ENV [--host H] [--port P]`: serve an environment over HTTP, for workflows
that name it with `env http("http://H:P")` (protocol: docs/data.md, "Environments over HTTP").

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


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("env", metavar="ENV",
                   help="a registered env, with literal arguments as in a .mas file (`plan_path(gamma=1.0)`), "
                        "or MODULE:ENV (a .py file or a module, and an env it registers or a class it defines)")
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: 127.0.0.1, this machine only)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"the port (default: {DEFAULT_PORT}; 0: any free port)")
    p.add_argument("--max-sessions", type=int, default=MAX_SESSIONS,
                   help=f"episodes kept at once; older ones are forgotten (default: {MAX_SESSIONS})")


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


def main(args: argparse.Namespace) -> int:
    env, name, fields = resolve(args.env)
    try:
        server = make_server(env, name, fields, args.host, args.port, max_sessions=args.max_sessions)
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
