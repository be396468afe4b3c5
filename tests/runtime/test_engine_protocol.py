"""The `Engine` protocol as the executor uses it: one `submit` per engine and tick, every batch
started before any result is awaited, engines in this process and remote ones treated alike."""

from __future__ import annotations

import pytest

from masdsl.runtime.backends.base import (
    Candidate,
    Engine,
    EngineCall,
    GenRequest,
    LocalEngine,
    as_engine,
    as_engines,
)
from masdsl.runtime.backends.hf import HFEngine
from masdsl.runtime.backends.replay import ReplayEngine
from masdsl.runtime.backends.vllm import VLLMAdapterEngine, VLLMEngine
from masdsl.runtime.executor import rollout
from tests.support.rollout_plans import plan_of


class Log(LocalEngine):
    """An engine in this process that answers "1" and logs its calls into a shared list."""

    def __init__(self, name, log):
        self.name, self.log, self.tokenizer = name, log, None

    def generate(self, requests):
        self.log.append(("generate", self.name, [r.key for r in requests]))
        return [[Candidate([49], "1", [0.0], "stop") for _ in range(r.n)] for r in requests]

    def update_weights(self, state_dict):
        pass

    def close(self):
        pass


class Deferred(Log):
    """Like a Ray engine: `submit` only starts the call; `generate` runs when the result is asked for."""

    def submit(self, requests):
        self.log.append(("submit", self.name, [r.key for r in requests]))
        return EngineCall(lambda: self.generate(requests))


@pytest.mark.parametrize("cls", [HFEngine, VLLMEngine, VLLMAdapterEngine, ReplayEngine])
def test_every_engine_class_has_the_whole_protocol(cls):
    for method in ("generate", "submit", "update_weights", "close"):
        assert callable(getattr(cls, method, None)), f"{cls.__name__} lacks {method}"


def test_a_local_engine_runs_its_batch_inside_submit():
    log = []
    call = Log("a", log).submit([GenRequest([1], n=2, key=("t", "r", 0))])
    assert call.done and log == [("generate", "a", [("t", "r", 0)])]
    assert [c.text for c in call.result()[0]] == ["1", "1"] and call.seconds >= 0.0
    assert isinstance(Log("b", log), Engine)


def test_a_running_call_finishes_when_its_result_is_asked_for():
    log = []
    call = Deferred("a", log).submit([GenRequest([1])])
    assert not call.done and log == [("submit", "a", [None])]
    first = call.result()
    assert call.done and call.result() is first and len(log) == 2  # generated once


def test_as_engine_wraps_a_generate_only_object_and_keeps_sharing():
    class Bare:
        tokenizer = "tok"

        def generate(self, requests):
            return [[Candidate([1], "x", [0.0], "stop")] for _ in requests]

    bare, log = Bare(), []
    engine = as_engine(bare)
    assert engine is not bare and engine.tokenizer == "tok" and engine.submit([GenRequest([1])]).done
    local = Log("a", log)
    assert as_engine(local) is local
    engines = as_engines({"p": bare, "q": bare, "r": local})
    assert engines["p"] is engines["q"] and engines["r"] is local


def test_executor_submits_every_engine_before_waiting_on_any(h, tmp_path):
    """Two policies on two engines: per tick, each engine gets one batch, in order of first use;
    the remote-like engine's call is started before the local one runs, and awaited after."""
    wf = h.workflow([h.role("a", policy="p"), h.role("b", policy="q")],
                    [("start", "a&b"), ("a&b", "end")])
    log = []
    engines = {"p": Deferred("remote", log), "q": Log("local", log)}
    ro = rollout(plan_of(wf, h.config(), samples=2), h.CounterEnv(), [{"id": "t1"}, {"id": "t2"}], engines,
                 mode="train", step=0)
    assert log == [
        ("submit", "remote", [("t1", "a", 0), ("t2", "a", 0)]),
        ("generate", "local", [("t1", "b", 0), ("t2", "b", 0)]),
        ("generate", "remote", [("t1", "a", 0), ("t2", "a", 0)]),
    ]
    assert len(ro.records) == 8 and all(r.response_text == "1" for r in ro.records)
