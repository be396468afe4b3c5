"""The environment contract shared by the runtime and every bundled environment.

An `Env` instance lives for a whole run and holds configuration (sandbox limits, board size).
Episode state is a separate, immutable-by-convention object: `apply` returns a *new* state and
never mutates its input, so tree sampling can give each of K candidates its own copy cheaply
(unchanged parts are shared, only what changes is copied).
"""

from __future__ import annotations

import inspect
from typing import Any, Mapping, Protocol, runtime_checkable

from masdsl.sandbox import Limits


@runtime_checkable
class Env(Protocol):
    # The sandbox limits of the env's own code runs; expressions that run code (`run_tests`, a
    # tool call in a reward) get the same. None: the sandbox's defaults.
    limits: Limits | None

    def reset(self, task: Mapping[str, Any]) -> Any:
        """The initial state of an episode for one task (a data row or a seeded puzzle)."""

    def apply(self, state: Any, role: str, fields: Mapping[str, Any]) -> Any:
        """The state after `role` acted with parsed `fields` (its `parse` results).

        Must not mutate `state`. A malformed action (a failed parse: fields hold the parser's
        empty value and `fields["ok"]` is False) is applied as a no-op or a penalised move,
        never an exception.
        """

    def view(self, state: Any) -> Mapping[str, Any]:
        """Values readable as `env.NAME` in expressions and `{{ env.NAME }}` in prompts."""

    def success(self, state: Any) -> bool:
        """The env's own success metric, used when a workflow has no `success` line."""


@runtime_checkable
class Demonstrates(Protocol):
    """An env that knows a solving reply: what `masdsl warm-start` trains on (supervised, before
    any RL) so that a small model starts where its groups are not all flat."""

    def demonstration(self, state: Any, field: str) -> str | None:
        """A reply that, parsed into the role's `field` (`code`, `moves`, ...), acts well from
        `state`; None when the env has none for that field."""


ENV_MEMBERS = ("reset", "apply", "view", "success", "limits")


def contract_problem(env: object) -> str | None:
    """What `env` lacks of the `Env` contract, as one sentence (None: nothing).

    >>> class Half:
    ...     def reset(self, task): return 0
    >>> contract_problem(Half())
    'env `Half` lacks apply, view, success, limits of the Env contract (masdsl.envs.base.Env; `limits = None`: the sandbox defaults)'
    """
    missing = [m for m in ENV_MEMBERS if not hasattr(env, m)]
    if not missing:
        return None
    return (f"env `{type(env).__name__}` lacks {', '.join(missing)} of the Env contract "
            "(masdsl.envs.base.Env; `limits = None`: the sandbox defaults)")


# what the runtime passes each method of the contract (after `self`), for `class_problems`
CONTRACT_CALLS = {"reset": ("task",), "apply": ("state", "role", "fields"), "view": ("state",), "success": ("state",)}


def class_problems(cls: object) -> list[str]:
    """What an env class lacks of the contract's methods, or which of them cannot take what the
    runtime passes, one sentence each (empty: none; a factory that is not a class: not judged).
    `masdsl check` asks it, before any episode; `limits` may be set in `__init__`, so the run
    (`contract_problem`) checks it on the instance.

    >>> class Slip:
    ...     def reset(self, task): return 0
    ...     def apply(self, state, fields): return state
    >>> class_problems(Slip)  # doctest: +NORMALIZE_WHITESPACE
    ['class `Slip` lacks view, success',
     'class `Slip`: `apply(self, state, fields)` cannot be called as apply(state, role, fields):
      too many positional arguments']
    """
    if not inspect.isclass(cls):
        return []
    out = []
    missing = [m for m in CONTRACT_CALLS if not callable(getattr(cls, m, None))]
    if missing:
        out.append(f"class `{cls.__name__}` lacks {', '.join(missing)}")
    for name, passed in CONTRACT_CALLS.items():
        if name in missing:
            continue
        bound = isinstance(inspect.getattr_static(cls, name, None), (staticmethod, classmethod))
        try:
            signature = inspect.signature(getattr(cls, name))
        except (TypeError, ValueError):  # no signature to read (a builtin): the run will tell
            continue
        try:
            signature.bind(*(passed if bound else (None, *passed)))  # None: `self`
        except TypeError as exc:
            out.append(f"class `{cls.__name__}`: `{name}{signature}` cannot be called as {name}({', '.join(passed)}): {exc}")
    return out


LOST_PENALTY = -1.0  # the reward of a step whose env was lost, unless the env sets `lost_penalty`


def lost(state: object) -> str | None:
    """Why the episode of `state` cannot go on (None: it can). An env that lives outside the
    process (`env http(...)`) answers a state whose `lost` names the failure, rather than raising,
    so that the failure reaches the runtime as data through any worker pool (threads, Ray).

    >>> class S: lost = "server gone"
    >>> lost(S()), lost((0, ()))
    ('server gone', None)
    """
    reason = getattr(state, "lost", None)
    return reason if isinstance(reason, str) and reason else None


def end_episode(env: Env, state: Any) -> None:
    """Tell an env that keeps episodes elsewhere (an env server) that this one ended; an env
    without `end_episode` needs no telling."""
    hook = getattr(env, "end_episode", None)
    if callable(hook):
        hook(state)
