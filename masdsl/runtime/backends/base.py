"""The inference-engine interface: token ids in, sampled candidates out.

The executor applies the chat template and tokenises; engines never see text prompts, so the
ids the learner trains on are exactly the ids that were sampled.

Every engine is an `Engine`. In each tick the executor starts one batch per engine with
`submit` (every engine's batch is started before any result is awaited, so engines living in
Ray actors sample at the same time) and then takes each `EngineCall`'s `result()`. Engines
that run in this process derive from `LocalEngine`, whose `submit` runs `generate` at once and
returns a finished call; `RemoteEngine` (`masdsl.runtime.actors`) returns a call still running.
An object that only has `generate` (a test double) becomes an `Engine` through `as_engine`.
Capabilities only some engines have (`takes_refs`, `model`, `base`, `sleep`, `wake_up`) are
declared on `Engine` with defaults, so nothing probes an engine with `getattr`.

>>> class Echo(LocalEngine):
...     tokenizer = None
...     def generate(self, requests):
...         return [[Candidate(list(r.prompt_ids), "", [0.0] * len(r.prompt_ids), "stop")] * r.n for r in requests]
>>> call = Echo().submit([GenRequest([1, 2], n=2)])
>>> call.done, [c.token_ids for c in call.result()[0]]
(True, [[1, 2], [1, 2]])
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, runtime_checkable

from masdsl.lang.workflow import SampleSpec


@dataclass
class GenRequest:
    prompt_ids: list[int]
    n: int = 1  # candidates from this prompt (K in training, 1 in evaluation)
    # the sampling options default to a `sample { }` block's (`SampleSpec`, where each is written once)
    temperature: float = SampleSpec.temperature
    top_p: float = SampleSpec.top_p
    max_tokens: int = SampleSpec.max_tokens
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    top_k: int = SampleSpec.top_k  # 0 or -1: off
    min_p: float = SampleSpec.min_p  # 0: off
    repetition_penalty: float = SampleSpec.repetition_penalty  # 1: off; > 1 discourages tokens already in the prompt or output
    key: tuple[str, str, int] | None = None  # (task_id, role, turn): used by the replay engine
    logprobs: bool = True  # return the sampled tokens' log-probs (False: `Candidate.logprobs` is [])


@dataclass
class Candidate:
    token_ids: list[int]
    text: str
    logprobs: list[float]  # one per token id, under the sampling distribution's model; [] if not asked for
    finish_reason: str  # "stop" | "length" | "replay"


Results = list[list[Candidate]]  # one list of `request.n` candidates per request, in request order


class EngineCall:
    """A started `generate` (what `Engine.submit` returns).

    `result()` waits for the candidates the first time and keeps them; `seconds` is how long
    the call ran, from its start until its results were in hand (so far, while it runs).
    """

    def __init__(self, wait: Callable[[], Results]) -> None:
        self.started = time.perf_counter()
        self.finished: float | None = None
        self._wait: Callable[[], Results] | None = wait
        self._results: Results = []

    @classmethod
    def run(cls, generate: Callable[[list[GenRequest]], Results], requests: list[GenRequest]) -> "EngineCall":
        """Run `generate(requests)` now, in this thread: the call is finished when returned."""
        call = cls(lambda: generate(requests))
        call.result()
        return call

    @property
    def done(self) -> bool:
        return self.finished is not None

    @property
    def seconds(self) -> float:
        return (self.finished if self.finished is not None else time.perf_counter()) - self.started

    def result(self) -> Results:
        if self._wait is not None:
            self._results = self._wait()
            self._wait, self.finished = None, time.perf_counter()
        return self._results


@runtime_checkable
class Engine(Protocol):
    """What the runtime (executor, engine factory) and the learner call on an inference engine.

    Every engine class derives from `Engine` (engines in this process through `LocalEngine`), so
    the capabilities that only some kinds have are declared here with the value of an engine
    that lacks them, and callers read them as plain attributes:
    - `takes_refs`: `update_weights` takes a Ray object-store ref (engines in Ray actors, and
      replicas of them), not only the weights themselves;
    - `takes_adapter`: `update_weights` takes a LoRA adapter's weights (peft names), not a
      whole model's (a LoRA policy's engine of any other kind gets base + adapter merged);
    - `model`: the model object an `hf` engine samples from; the learner does not sync weights
      into an engine that holds its own policy's model;
    - `base`: a LoRA adapter engine's shared vLLM engine, closed once after its adapters (such a
      base hands out the adapters: `LoRAHost`);
    - `sleep(level=1)` / `wake_up()`: free the engine's GPU memory while the learner updates, and
      take it back before the new weights are loaded (vLLM's sleep mode, `runtime.vllm_sleep_mode`);
      nothing for engines without one, forwarded by `RemoteEngine` and `ReplicatedEngine`.
    """

    tokenizer: Any = None  # a Hugging Face tokenizer (None for replay)
    takes_refs: bool = False
    takes_adapter: bool = False
    model: Any = None
    base: Engine | None = None

    def generate(self, requests: list[GenRequest]) -> Results:
        """One list of `request.n` candidates per request, in request order."""
        raise NotImplementedError

    def submit(self, requests: list[GenRequest]) -> EngineCall:
        """Start `generate(requests)`; the returned call's `result()` gives its candidates.

        The executor submits every engine's batch of a tick, in a fixed order, before it waits
        on any, so the order of engine calls (and the seeds they carry) never depends on timing.
        """
        raise NotImplementedError

    def update_weights(self, state_dict: dict[str, Any]) -> None:
        """Load new weights (or a LoRA adapter's weights) so the next generate is on-policy."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the engine's model, processes and files; the engine is not used after."""
        raise NotImplementedError

    def sleep(self, level: int = 1) -> None:
        """Free GPU memory until `wake_up` (only engines with a sleep mode do anything)."""
        return None

    def wake_up(self) -> None:
        """Take back what `sleep` freed."""
        return None


class LoRAHost(Protocol):
    """An engine that serves LoRA adapters over its base model (`VLLMEngine(lora=...)`)."""

    def adapter(self, name: str, peft_config: Any) -> Engine:
        """An `Engine` that samples through adapter `name` (the base model until its first update)."""


class LocalEngine(Engine):
    """Base of the engines that run in this process: `submit` runs `generate` at once.

    Subclasses define `tokenizer`, `generate`, `update_weights` and `close`.
    """

    def submit(self, requests: list[GenRequest]) -> EngineCall:
        """A finished call: `generate` ran in this thread before `submit` returned."""
        return EngineCall.run(self.generate, requests)


class _GenerateOnly(LocalEngine):
    """A `LocalEngine` over an object that has `generate` (and maybe `tokenizer`, `update_weights`,
    `close`) but no `submit`."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    @property
    def tokenizer(self) -> Any:
        return getattr(self.inner, "tokenizer", None)

    def generate(self, requests: list[GenRequest]) -> Results:
        return self.inner.generate(requests)

    def update_weights(self, state_dict: dict[str, Any]) -> None:
        self.inner.update_weights(state_dict)

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if close is not None:
            close()


def as_engine(obj: Any) -> Engine:
    """`obj` itself when it is an `Engine` (its class derives from it); else a `LocalEngine` over
    its `generate`, with the defaults of every capability.

    >>> class Bare:
    ...     tokenizer = "tok"
    ...     def generate(self, requests):
    ...         return [[Candidate([7], "x", [0.0], "stop")] for _ in requests]
    >>> e = as_engine(Bare())
    >>> e.tokenizer, e.submit([GenRequest([1])]).result()[0][0].text, as_engine(e) is e
    ('tok', 'x', True)
    """
    return obj if Engine in type(obj).__mro__ else _GenerateOnly(obj)


def as_engines(engines: Mapping[str, object]) -> dict[str, Engine]:
    """`as_engine` over a {policy: engine} mapping; policies sharing an object share its engine."""
    made: dict[int, Engine] = {}
    out = {}
    for name, obj in engines.items():
        if id(obj) not in made:
            made[id(obj)] = as_engine(obj)
        out[name] = made[id(obj)]
    return out
