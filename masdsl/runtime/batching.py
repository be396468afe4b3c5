"""One tick's engine calls: every pending role step's request, one batch per engine.

Steps are grouped by engine object (policies that share an engine share its batch), in the
order their engines first appear among the steps; within a batch, requests keep the steps'
order. Every engine's batch is started with `Engine.submit` before any result is awaited, so
engines in Ray actors sample concurrently, while engines in this process run their batch
inside `submit`, one after the other, in that same order. Requests carry their own seeds.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Sequence

from masdsl.runtime.backends.base import Candidate, Engine, EngineCall
from masdsl.runtime.episodes import RoleStep, RunState


def engine_batches(steps: Sequence[RoleStep], run: RunState) -> list[tuple[Engine, list[RoleStep]]]:
    """(engine, its steps) for each engine the steps use, in order of first use."""
    by_engine: dict[int, list[RoleStep]] = defaultdict(list)
    for s in steps:
        by_engine[id(run.engines[s.role.policy])].append(s)
    return [(run.engines[group[0].role.policy], group) for group in by_engine.values()]


def generate(steps: Sequence[RoleStep], run: RunState) -> None:
    """Sample every step's candidates: submit one batch per engine, then collect them all."""
    t0 = time.perf_counter()
    calls: list[tuple[list[RoleStep], EngineCall]] = [
        (group, engine.submit([s.request for s in group])) for engine, group in engine_batches(steps, run)
    ]
    for group, call in calls:
        results = call.result()
        assign(group, results, call.seconds, run)
    run.gen_s += time.perf_counter() - t0


def assign(group: Sequence[RoleStep], results: list[list[Candidate]], call_s: float, run: RunState) -> None:
    """Give each step its candidates, and a share of the call's time per candidate."""
    if len(results) != len(group) or any(len(c) != s.request.n for s, c in zip(group, results)):
        raise RuntimeError(f"engine for policy `{group[0].role.policy}` returned the wrong number of candidates")
    share = call_s / max(1, sum(s.request.n for s in group))
    for s, cands in zip(group, results):
        s.candidates, s.gen_s = list(cands), share
        run.tokens += sum(len(c.token_ids) for c in cands)
