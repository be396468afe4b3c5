"""Names a `.mas` file may use: environments, data sources, parsers and functions.

The checker reads this registry to validate names and arities ("did you mean ..."), and the
runtime reads it to call them. Registration happens at import time through the decorators
below; `load_builtins()` imports the bundled environments, and a workflow's `import "x.py"`
imports a user's module, whose decorators add to the same registry.

>>> from masdsl.envs.registry import REGISTRY, function
>>> @function("twice_demo", returns="number")
... def twice(x):
...     return 2 * x
>>> spec = REGISTRY.functions["twice_demo"]
>>> (spec.min_args, spec.max_args, spec.returns)
(1, 1, 'number')
>>> REGISTRY.functions.pop("twice_demo").fn(3)
6
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Literal

ValueType = Literal["bool", "number", "str", "list", "any"]


@dataclass(frozen=True)
class FunctionSpec:
    """A function callable from `.mas` expressions (guards, rewards, `team`, `success`).

    `env` set means the function reads the environment state: the runtime calls
    `fn(state, *args)` and the checker only allows it in workflows using that env.
    Parsers are functions too (`kind="parser"`); their first argument is usually `output`.
    """

    name: str
    fn: Callable[..., Any]
    min_args: int
    max_args: int | None  # None: variadic
    returns: ValueType = "any"
    kind: Literal["function", "parser"] = "function"
    env: str | None = None
    doc: str = ""
    # value a parse field takes when the parser fails (returns None or raises)
    empty: Any = None
    # every env an env-bound function serves (the games share `step_reward`, `solved`, ...);
    # `env` is the first of them. Checkers should ask `allowed_in(env_name)`.
    envs: tuple[str, ...] = ()

    def allowed_in(self, env_name: str | None) -> bool:
        """Whether a workflow using env `env_name` may call this function.

        >>> spec = FunctionSpec("f", len, 0, 0, env="sudoku", envs=("sudoku", "sokoban"))
        >>> spec.allowed_in("sokoban"), spec.allowed_in("code")
        (True, False)
        >>> FunctionSpec("g", len, 1, 1).allowed_in("code")
        True
        """
        return self.env is None or env_name in (self.envs or (self.env,))


@dataclass(frozen=True)
class EnvSpec:
    """An environment class. `fields` are the names `env.NAME` may read in expressions/prompts."""

    name: str
    factory: Callable[..., Any]
    fields: tuple[str, ...] = ()
    doc: str = ""
    # fields known only from the env's arguments (`env http(url)` asks its server): called by the
    # checker with the `.mas` arguments; raises `UserError` when it cannot tell
    fields_from: Callable[..., tuple[str, ...]] | None = None
    # the env another process serves (`env http(url)`: its server's env), whose bound functions a
    # workflow may call: called by the checker with the `.mas` arguments; None: unknown, any may be
    serves_from: Callable[..., str | None] | None = None


@dataclass(frozen=True)
class DataSourceSpec:
    """A data source `name(split, *args, **kwargs) -> list[dict]`; `fields` are task fields."""

    name: str
    fn: Callable[..., list[dict]]
    fields: tuple[str, ...] = ()
    doc: str = ""
    paths: tuple[str, ...] = ()  # parameters that are file or folder paths (relative: to the .mas file)
    names: tuple[str, ...] = ()  # parameters that are a folder (next to the .mas file) or else a name
    # what is wrong with a call's literal arguments, as (parameter, message, hint) triples, for
    # `masdsl check` (`reasoning_gym("gms_symbolic")`); None: the arguments are the run's to judge
    check: Callable[..., list[tuple[str, str, str | None]]] | None = None


@dataclass
class Registry:
    envs: dict[str, EnvSpec] = field(default_factory=dict)
    data_sources: dict[str, DataSourceSpec] = field(default_factory=dict)
    functions: dict[str, FunctionSpec] = field(default_factory=dict)

    def parsers(self) -> dict[str, FunctionSpec]:
        return {n: s for n, s in self.functions.items() if s.kind == "parser"}

    def part(self, envs: Iterable[str] = (), data_sources: Iterable[str] = (),
             functions: Iterable[str] = ()) -> Registry:
        """A new registry holding only these names (those this one lacks are left out): what a
        compiled workflow keeps of the registry its checker read.

        >>> reg = Registry(functions={"f": FunctionSpec("f", len, 1, 1), "g": FunctionSpec("g", len, 1, 1)})
        >>> sorted(reg.part(functions=["g", "h"]).functions)
        ['g']
        """
        def pick(table, names):
            return {n: table[n] for n in names if n in table}

        return Registry(pick(self.envs, envs), pick(self.data_sources, data_sources), pick(self.functions, functions))


REGISTRY = Registry()

# Modules that register the bundled environments. Each imports only light dependencies at
# module level so `masdsl check` stays fast.
BUILTIN_MODULES = (
    "masdsl.envs.parsers",
    "masdsl.envs.rewards",
    "masdsl.envs.code",
    "masdsl.envs.math",
    "masdsl.envs.sudoku",
    "masdsl.envs.sokoban",
    "masdsl.envs.plan_path",
    "masdsl.envs.datasets",
    "masdsl.envs.http_env",
    "masdsl.envs.openenv_client",
)


def load_builtins() -> Registry:
    """Import the bundled environment modules (idempotent) and return the registry."""
    for module in BUILTIN_MODULES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:  # a real missing dependency, not a module not written yet
                raise
    return REGISTRY


def _arity(fn: Callable[..., Any], skip: int) -> tuple[int, int | None]:
    params = list(inspect.signature(fn).parameters.values())[skip:]
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return sum(p.default is p.empty and p.kind is p.POSITIONAL_OR_KEYWORD for p in params), None
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return sum(p.default is p.empty for p in positional), len(positional)


def _named(name: object, decorator: str) -> None:
    """A decorator written bare (`@parser` over a function) receives the function as its name and
    would register nothing: say how to write it (the checker shows it as the import's error)."""
    if not isinstance(name, str) or not name:
        given = getattr(name, "__name__", "NAME")
        raise TypeError(f"@{decorator} needs the name the `.mas` file calls it by: @{decorator}(\"{given}\", ...)")


def function(name: str, *, returns: ValueType = "any", env: str | tuple[str, ...] | None = None):
    """Register a function for expressions. With `env=...` it receives the state first.

    `env` may be a tuple of env names when one function serves several envs (it then
    dispatches on the state it receives); `FunctionSpec.envs` lists them all.
    """
    envs = (env,) if isinstance(env, str) else tuple(env or ())
    _named(name, "function")

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        lo, hi = _arity(fn, skip=1 if envs else 0)
        REGISTRY.functions[name] = FunctionSpec(
            name, fn, lo, hi, returns, "function", envs[0] if envs else None,
            inspect.getdoc(fn) or "", None, envs,
        )
        return fn

    return register


def parser(name: str, *, returns: ValueType = "any", empty: Any = None):
    """Register a parser for `parse FIELD = name(output, ...)`; it returns None on failure."""
    _named(name, "parser")

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        lo, hi = _arity(fn, skip=0)
        REGISTRY.functions[name] = FunctionSpec(
            name, fn, lo, hi, returns, "parser", None, inspect.getdoc(fn) or "", empty
        )
        return fn

    return register


def env(name: str, *, fields: tuple[str, ...] = (), fields_from: Callable[..., tuple[str, ...]] | None = None,
        serves_from: Callable[..., str | None] | None = None):
    """Register an environment class (see `masdsl.envs.base.Env`); `fields_from(*args, **kwargs)`:
    its fields from its arguments, for an env whose fields depend on them; `serves_from(*args,
    **kwargs)`: the env it reaches in another process, for one that serves another's state."""
    _named(name, "env")

    def register(cls: Callable[..., Any]) -> Callable[..., Any]:
        REGISTRY.envs[name] = EnvSpec(name, cls, tuple(fields), inspect.getdoc(cls) or "", fields_from, serves_from)
        return cls

    return register


def data_source(name: str, *, fields: tuple[str, ...] = (), paths: tuple[str, ...] = (), names: tuple[str, ...] = (),
                check: Callable[..., list[tuple[str, str, str | None]]] | None = None):
    """Register a data source `fn(split, *args, **kwargs) -> list[dict]` (rows need an `id`).
    `paths`: its parameters that are paths, read relative to the `.mas` file; `names`: those that
    are a folder there or else a name (`masdsl.envs.data_paths`); `check`: called by `masdsl
    check` with the call's literal arguments, the mistakes in them (`DataSourceSpec.check`)."""
    _named(name, "data_source")

    def register(fn: Callable[..., list[dict]]) -> Callable[..., list[dict]]:
        REGISTRY.data_sources[name] = DataSourceSpec(name, fn, tuple(fields), inspect.getdoc(fn) or "",
                                                     tuple(paths), tuple(names), check)
        return fn

    return register
