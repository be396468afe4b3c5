"""Which policies train at which step: the per-policy schedule of a run, as pure functions.

A policy's block may set `lr` (its AdamW learning rate instead of `train.lr`), `train_every: N`
(it updates at steps N, 2N, 3N, ...) and `frozen_until: S` (it acts but does not update at steps
1..S); `train { alternate: ["a", "b"], alternate_every: N }` trains the listed policies in turn,
N steps each (PettingLLMs' `phase_alternate_steps`, an iterated best response: one policy learns
against the other held still). A policy not listed trains by its own schedule alone. Steps are
numbered from 1, as in the metrics and the checkpoints: step s is the s-th update.

>>> from masdsl.lang.workflow import PolicySpec
>>> specs = {"a": PolicySpec("a", "m"), "b": PolicySpec("b", "m", train_every=2, frozen_until=2)}
>>> [trains_at(specs["a"], s, ("a", "b"), 2) for s in range(1, 7)]
[True, True, False, False, True, True]
>>> [trains_at(specs["b"], s) for s in range(1, 7)]
[False, False, False, True, False, True]
>>> [trains_at(specs["b"], s, ("a", "b"), 2) for s in range(1, 7)]
[False, False, False, True, False, False]
"""

from __future__ import annotations

from typing import Mapping, Sequence

from masdsl.lang.workflow import PolicySpec


def trains_at(spec: PolicySpec, step: int, alternate: Sequence[str] = (), every: int = 0) -> bool:
    """Whether policy `spec` updates at `step` (from 1): not frozen, past `frozen_until`, on its
    `train_every`, and, when it is in the alternation, in its phase. Whether it has roles to
    learn from is the caller's to know."""
    if spec.frozen or step <= spec.frozen_until or step % spec.train_every:
        return False
    if spec.name in alternate and every > 0:
        return alternate[((step - 1) // every) % len(alternate)] == spec.name
    return True


def steps_of(spec: PolicySpec, steps: int, alternate: Sequence[str] = (), every: int = 0) -> list[int]:
    """The steps of a run of `steps` updates at which the policy updates.

    >>> steps_of(PolicySpec("a", "m", frozen_until=3), 5)
    [4, 5]
    """
    return [s for s in range(1, steps + 1) if trains_at(spec, s, alternate, every)]


def describe(spec: PolicySpec, steps: int, lr: float, alternate: Sequence[str] = (), every: int = 0) -> str:
    """One line of `masdsl run --dry-run`: the policy's learning rate and the steps it updates at.

    >>> describe(PolicySpec("a", "m", train_every=2), 9, 1e-6)
    'lr 1e-06, updates at steps 2, 4, 6, 8 (4 of 9; train_every 2)'
    >>> describe(PolicySpec("a", "m", frozen=True), 9, 1e-6)
    'frozen: never updates'
    """
    if spec.frozen:
        return "frozen: never updates"
    at = steps_of(spec, steps, alternate, every)
    shown = ", ".join(map(str, at[:12])) + (", ..." if len(at) > 12 else "")
    why = [f"train_every {spec.train_every}"] if spec.train_every > 1 else []
    why += [f"frozen_until {spec.frozen_until}"] if spec.frozen_until else []
    if spec.name in alternate and every > 0:
        why.append(f"alternates with {', '.join(p for p in alternate if p != spec.name)} every {every} steps")
    tail = f" ({len(at)} of {steps}" + (f"; {'; '.join(why)}" if why else "") + ")"
    return f"lr {spec.lr if spec.lr is not None else lr:g}, " + (f"updates at steps {shown}" if at else "never updates") + tail


def schedule_problems(specs: Mapping[str, PolicySpec], trained: Sequence[str], steps: int,
                      alternate: Sequence[str], every: int) -> list[str]:
    """Why a schedule cannot run as written (empty when it can): values out of range, an
    alternation of unknown, untrained or too few policies, a trained policy that would never
    update in the run's `steps`. `trained`: the policies that have roles and are not frozen.

    >>> specs = {"a": PolicySpec("a", "m"), "b": PolicySpec("b", "m", frozen_until=9)}
    >>> schedule_problems(specs, ["a", "b"], 4, ["a", "c"], 2)
    ['`train.alternate` names `c`, which is not a policy of the workflow (policies: a, b)', 'policy `b` would never update in `train.steps=4` steps (frozen_until 9)']
    """
    out = []
    for name, spec in specs.items():
        if spec.lr is not None and not spec.lr > 0:
            out.append(f"policy `{name}`: `lr` must be positive; got {spec.lr}")
        if not (isinstance(spec.train_every, int) and spec.train_every >= 1):
            out.append(f"policy `{name}`: `train_every` must be a whole number of at least 1; got {spec.train_every}")
        if not (isinstance(spec.frozen_until, int) and spec.frozen_until >= 0):
            out.append(f"policy `{name}`: `frozen_until` must be a whole number of at least 0; got {spec.frozen_until}")
    if out:  # a schedule whose numbers are out of range has no steps to count
        return out + _alternation_problems(specs, trained, alternate, every)
    out += _alternation_problems(specs, trained, alternate, every)
    for name in trained:
        if not steps_of(specs[name], steps, alternate, every):
            out.append(f"policy `{name}` would never update in `train.steps={steps}` steps ({_why(specs[name], alternate, every)})")
    return out


def _alternation_problems(specs: Mapping[str, PolicySpec], trained: Sequence[str], alternate: Sequence[str],
                          every: int) -> list[str]:
    out = []
    if every < 0:
        out.append(f"`train.alternate_every` must be at least 0 (0: no alternation); got {every}")
    if alternate and every < 1:
        out.append("`train.alternate` needs `train.alternate_every` >= 1: the steps each policy trains in turn")
    if every > 0 and len(set(alternate)) < 2:
        out.append(f"`train.alternate_every={every}` alternates the policies `train.alternate` lists: list two or more")
    if len(set(alternate)) != len(alternate):
        out.append(f"`train.alternate` lists a policy twice: {', '.join(alternate)}")
    for name in alternate:
        if name not in specs:
            out.append(f"`train.alternate` names `{name}`, which is not a policy of the workflow (policies: {', '.join(specs)})")
        elif name not in trained:
            out.append(f"`train.alternate` names policy `{name}`, which never trains (frozen, or no role uses it)")
    return out


def _why(spec: PolicySpec, alternate: Sequence[str], every: int) -> str:
    why = [f"frozen_until {spec.frozen_until}"] if spec.frozen_until else []
    why += [f"train_every {spec.train_every}"] if spec.train_every > 1 else []
    why += [f"its turn in `train.alternate` every {every} steps"] if spec.name in alternate and every > 0 else []
    return ", ".join(why)
