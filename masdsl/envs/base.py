"""The environment contract shared by the runtime and every bundled environment.

An `Env` instance lives for a whole run and holds configuration (sandbox limits, board size).
Episode state is a separate, immutable-by-convention object: `apply` returns a *new* state and
never mutates its input, so tree sampling can give each of K candidates its own copy cheaply
(unchanged parts are shared, only what changes is copied).
"""

from __future__ import annotations

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
