"""Fixtures for the language tests: a registry of their own, so the tests never depend on the
bundled environments (written in parallel) nor change what other tests see."""

from __future__ import annotations

from pathlib import Path

import pytest

from masdsl.envs.http_env import HttpEnv, declared_fields
from masdsl.envs.registry import DataSourceSpec, EnvSpec, FunctionSpec, Registry, _arity

HERE = Path(__file__).parent
collect_ignore_glob = ["errors/*.py"]  # user files the golden tests import on purpose (one raises)


def _fn(name, fn, returns="any", kind="function", env=None, empty=None) -> FunctionSpec:
    lo, hi = _arity(fn, skip=1 if env else 0)
    return FunctionSpec(name, fn, lo, hi, returns, kind, env, "", empty)


class _Contract:
    """The Env contract's methods, so that the checker's `env-contract` rule passes the fakes."""

    limits = None

    def reset(self, task):
        return task

    def apply(self, state, role, fields):
        return state

    def view(self, state):
        return {}

    def success(self, state):
        return False


class CodeEnv(_Contract):
    def __init__(self, timeout_s: float = 5.0):
        self.timeout_s = timeout_s


class GridEnv(_Contract):
    def __init__(self, size: int = 4):
        self.size = size


class SlipEnv:
    """An env class whose `apply` forgot the role, and which has no `view` (the `env-contract` case)."""

    limits = None

    def reset(self, task):
        return ()

    def apply(self, state, fields):
        return state + (fields,)

    def success(self, state):
        return False


def humaneval(split):
    return [{"id": f"{split}-0", "prompt": "def f():", "entry_point": "f", "tests": ["assert f() == 1"],
             "solution": "def f():\n    return 1"}]


def sudoku(split, size=4, n=64):
    return [{"id": f"{split}-{i}", "seed": i, "size": size, "puzzle": []} for i in range(n)]


def code_block(output, lang="python"):
    return output.split("```")[1] if output.count("```") >= 2 else None


def asserts(output):
    return [line for line in output.splitlines() if line.startswith("assert")] or None


def grid(output):
    return None


def pass_rate(code, tests):
    return 1.0 if code and tests else 0.0


def passes(code, tests):
    return pass_rate(code, tests) == 1.0


def length(x):
    return len(x)


def solved(state):
    return bool(state)


def step_reward(state):
    return 1.0 if state else 0.0


def make_registry() -> Registry:
    """Names the test workflows use, with the shapes of the real ones (see /tmp/common.md)."""
    return Registry(
        envs={"code": EnvSpec("code", CodeEnv, ("failures", "code", "tests")),
              "sudoku": EnvSpec("sudoku", GridEnv, ("board", "tool_output", "moves")),
              "http": EnvSpec("http", HttpEnv, (), fields_from=declared_fields),
              "slip": EnvSpec("slip", SlipEnv)},
        data_sources={"humaneval": DataSourceSpec("humaneval", humaneval, ("id", "prompt", "entry_point", "tests", "solution")),
                      "sudoku": DataSourceSpec("sudoku", sudoku, ("id", "seed", "size", "puzzle"))},
        functions={f.name: f for f in [
            _fn("code_block", code_block, "str", "parser", empty=""),
            _fn("asserts", asserts, "list", "parser", empty=[]),
            _fn("grid", grid, "list", "parser", empty=[]),
            _fn("pass_rate", pass_rate, "number"),
            _fn("passes", passes, "bool"),
            _fn("len", length, "number"),
            _fn("solved", solved, "bool", env="sudoku"),
            _fn("step_reward", step_reward, "number", env="sudoku"),
        ]},
    )


@pytest.fixture
def registry() -> Registry:
    return make_registry()


@pytest.fixture
def global_registry():
    """Add the test names to the shared REGISTRY for the test's duration, then restore it."""
    from masdsl.envs.registry import REGISTRY, load_builtins

    load_builtins()
    saved = (dict(REGISTRY.envs), dict(REGISTRY.data_sources), dict(REGISTRY.functions))
    mine = make_registry()
    for table, extra in ((REGISTRY.envs, mine.envs), (REGISTRY.data_sources, mine.data_sources),
                         (REGISTRY.functions, mine.functions)):
        for k, v in extra.items():
            table.setdefault(k, v)
    yield REGISTRY
    REGISTRY.envs.clear(); REGISTRY.envs.update(saved[0])  # noqa: E702
    REGISTRY.data_sources.clear(); REGISTRY.data_sources.update(saved[1])  # noqa: E702
    REGISTRY.functions.clear(); REGISTRY.functions.update(saved[2])  # noqa: E702


@pytest.fixture
def restored_registry():
    """For tests whose `import` files register into the shared REGISTRY (one replaces a built-in):
    the built-ins loaded, and REGISTRY put back as it was afterwards."""
    from masdsl.envs.registry import REGISTRY, load_builtins

    load_builtins()
    saved = {t: dict(getattr(REGISTRY, t)) for t in ("envs", "data_sources", "functions")}
    yield REGISTRY
    for t, table in saved.items():
        getattr(REGISTRY, t).clear()
        getattr(REGISTRY, t).update(table)


VALID = (HERE / "valid.mas").read_text()  # the base of the golden error files
