"""`ReplicatedEngine`: one policy served by several engines (`runtime.engine_replicas`), one `Engine`.

`submit` cuts one call's requests into contiguous parts of about equal work (`split_balanced`:
rows times prompt plus new tokens), starts every part on its own replica before waiting on any
(replicas in Ray actors sample at the same time) and joins the results in request order.
Requests carry their own seeds, so an engine that seeds each request by itself (vLLM) samples
with R replicas exactly what one engine would; the hf engine seeds a batch from all its
requests' seeds, so there R replicas sample other (equally valid, reproducible) candidates
than one engine. `update_weights`, `sleep` and `wake_up` go to every replica at once,
`close` closes them all. A replica that dies is restarted by its own `RemoteEngine`.

>>> from masdsl.runtime.backends.base import Candidate, GenRequest, LocalEngine
>>> class Tag(LocalEngine):
...     tokenizer = None
...     def __init__(self, tag): self.tag = tag
...     def generate(self, requests):
...         return [[Candidate([self.tag], "", [0.0], "stop")] * r.n for r in requests]
>>> engine = ReplicatedEngine([Tag(0), Tag(1)])
>>> requests = [GenRequest([5] * 8, max_tokens=8), GenRequest([5], max_tokens=8), GenRequest([5] * 7, max_tokens=1)]
>>> [c[0].token_ids for c in engine.generate(requests)], engine.served  # costs 16, 9, 8
([[0], [1], [1]], [1, 2])
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Callable, Sequence

from masdsl.runtime.backends.base import Engine, EngineCall, GenRequest, Results, as_engine


def split_balanced(costs: Sequence[float], parts: int) -> list[range]:
    """`parts` contiguous ranges over `costs` whose sums are about equal (none empty while
    there are at least `parts` items; fewer ranges when there are fewer items).

    >>> split_balanced([1, 1, 1, 1], 2), split_balanced([8, 1, 7], 2), split_balanced([3], 2)
    ([range(0, 2), range(2, 4)], [range(0, 1), range(1, 3)], [range(0, 1)])
    >>> split_balanced([1] * 5, 3)
    [range(0, 2), range(2, 3), range(3, 5)]
    """
    n = len(costs)
    parts = max(1, min(parts, n))
    total, bounds, acc = float(sum(costs)), [0], 0.0
    for i, c in enumerate(costs):
        k = len(bounds)  # the range item i would open
        if k < parts and i > bounds[-1]:
            target = total * k / parts
            # open range k here when item i overshoots the target more than stopping short misses
            # it, or when the items left are just enough for one range each
            if n - i == parts - k or acc + c - target > target - acc:
                bounds.append(i)
        acc += c
    bounds.append(n)
    return [range(a, b) for a, b in zip(bounds, bounds[1:])]


def request_cost(r: GenRequest) -> float:
    """The work of one request: its rows times (prompt tokens + the most new tokens)."""
    return float(r.n * (len(r.prompt_ids) + r.max_tokens))


class ReplicatedEngine(Engine):
    """An `Engine` over `replicas` (engines of the same weights); see the module docstring."""

    def __init__(self, replicas: Sequence[Any]) -> None:
        if not replicas:
            raise ValueError("ReplicatedEngine needs at least one replica")
        self.replicas = [as_engine(e) for e in replicas]
        self.tokenizer = self.replicas[0].tokenizer
        self.served = [0] * len(self.replicas)  # requests each replica was given (logs, tests)
        self.takes_refs = all(e.takes_refs for e in self.replicas)

    def submit(self, requests: list[GenRequest]) -> EngineCall:
        """Start each replica's part now; the call's `result()` joins them in request order."""
        ranges = split_balanced([request_cost(r) for r in requests], len(self.replicas))
        calls = []
        for i, part in enumerate(ranges):
            if len(part):
                self.served[i] += len(part)
                calls.append(self.replicas[i].submit([requests[j] for j in part]))
        return EngineCall(partial(_join, calls))

    def collect(self, call: EngineCall) -> Results:
        return call.result()

    def generate(self, requests: list[GenRequest]) -> Results:
        return self.submit(requests).result()

    def update_weights(self, state_dict: Any) -> None:
        """The same weights into every replica; replicas in actors share one object-store copy."""
        if self.takes_refs and len(self.replicas) > 1:
            import ray  # only replicas in Ray actors get here

            if not isinstance(state_dict, ray.ObjectRef):
                state_dict = ray.put(state_dict)  # else each replica would put its own copy
        self._each(lambda e: e.update_weights(state_dict))

    def sleep(self, level: int = 1) -> None:
        self._each(lambda e: e.sleep(level))

    def wake_up(self) -> None:
        self._each(lambda e: e.wake_up())

    def close(self) -> None:
        errors = []
        for e in self.replicas:
            try:
                e.close()
            except Exception as exc:  # noqa: BLE001 - close the others, then report the first
                errors.append(exc)
        if errors:
            raise errors[0]

    def _each(self, fn: Callable[[Any], None]) -> None:
        """`fn` on every replica at the same time (each waits on its own actor); the first error raises."""
        if len(self.replicas) == 1:
            fn(self.replicas[0])
            return
        with ThreadPoolExecutor(len(self.replicas)) as pool:
            for f in [pool.submit(fn, e) for e in self.replicas]:
                f.result()


def _join(calls: list[EngineCall]) -> Results:
    out: Results = []
    for call in calls:
        out.extend(call.result())
    return out
