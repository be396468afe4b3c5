"""vLLM's tensor parallelism and sleep mode, engine replicas and the placement plan: what reaches
vLLM, what is refused with a hint, what `masdsl graph` shows. The tests that need a GPU skip
without CUDA and are ready to run on one."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

import masdsl
from masdsl.config import ConfigError, resolve_config
from masdsl.plan.run_plan import resolve_rollout, resolve_run
from masdsl.runtime.backends import _vllm, engine_kwargs
from masdsl.runtime.backends.base import GenRequest, LocalEngine
from masdsl.runtime.engine_factory import build_engines
from masdsl.training.session import TrainSession
from tests.support.overrides import NO_TRACKING
from tests.support.paths import COUNTER_DIR, TOY_DIR

ROOT = Path(__file__).parents[2]
DATA = COUNTER_DIR
CODER = ROOT / "workflows" / "coder_tester.mas"
PLAN_PATH = ROOT / "workflows" / "plan_path.mas"  # one full (not LoRA) policy: what learner workers train
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


class FakeLLM:
    """Stands in for `vllm.LLM`: keeps the keyword arguments and the sleep calls."""

    built: list[dict] = []

    def __init__(self, **kwargs):
        # what vLLM reads at construction to place its engine core (runtime.vllm_reproducible)
        FakeLLM.built.append({**kwargs, "env_multiprocessing": os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")})
        self.calls: list[tuple] = []

    def sleep(self, level=1):
        self.calls.append(("sleep", level))

    def wake_up(self, tags=None):
        self.calls.append(("wake_up",))


def test_tensor_parallel_and_sleep_mode_reach_vllm(tiny_model_dir, monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=FakeLLM))
    FakeLLM.built.clear()
    cfg = resolve_config(overrides=["runtime.device=cuda", "runtime.vllm_tensor_parallel_size=2",
                                    "runtime.vllm_sleep_mode=true", "runtime.vllm_gpu_memory_utilization=0.6"])
    engine = _vllm(tiny_model_dir, engine_kwargs(cfg.runtime, 0), "test")
    (kw,) = FakeLLM.built
    assert kw["tensor_parallel_size"] == 2 and kw["distributed_executor_backend"] == "mp"
    assert kw["enable_sleep_mode"] is True
    engine.sleep()
    engine.wake_up()
    assert engine.llm.calls == [("sleep", 1), ("wake_up",)]
    engine.close()
    plain = _vllm(tiny_model_dir, engine_kwargs(resolve_config().runtime, 0), "test")
    assert not {"tensor_parallel_size", "enable_sleep_mode"} & set(FakeLLM.built[-1])
    plain.sleep()  # built without sleep mode: nothing reaches vLLM
    assert plain.llm.calls == []
    plain.close()


def test_the_reproducible_layout_reaches_vllm_and_can_be_turned_off(tiny_model_dir, monkeypatch):
    # by default vLLM's engine core runs in this process (read from the environment while `LLM`
    # is built, then removed again) and the forward in its worker process; `false`: vLLM's layout
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=FakeLLM))
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    FakeLLM.built.clear()
    for overrides in ([], ["runtime.vllm_reproducible=false"]):
        _vllm(tiny_model_dir, engine_kwargs(resolve_config(overrides=overrides).runtime, 0), "test").close()
    reproducible, default_layout = FakeLLM.built
    assert reproducible["env_multiprocessing"] == "0" and reproducible["distributed_executor_backend"] == "mp"
    assert default_layout["env_multiprocessing"] is None and "distributed_executor_backend" not in default_layout
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in os.environ


@pytest.mark.parametrize("overrides, message", [
    (["runtime.engine_replicas=2"], "needs `runtime.ray=true`"),
    (["runtime.vllm_tensor_parallel_size=2", "runtime.engine=vllm"], "needs `runtime.device=cuda`"),
    (["runtime.vllm_sleep_mode=true"], "vLLM's CPU platform has no sleep mode"),
    (["runtime.vllm_sleep_mode=true", "runtime.engine=hf", "runtime.device=cuda"], "is a vLLM option"),
])
def test_engine_options_refused_with_a_hint(overrides, message):
    wf = masdsl.load(CODER)
    cfg = resolve_config(wf.train, None, overrides)
    # the run's plan and a rollout's plan (what `build_engines` is given) refuse them alike
    for check in (lambda: resolve_run(wf, cfg), lambda: resolve_rollout(wf, cfg)):
        with pytest.raises(ConfigError, match=message):
            check()


def test_vllm_cpu_has_no_sleep_mode():
    """The reason `vllm_sleep_mode` is refused on CPU, read from vLLM itself."""
    pytest.importorskip("vllm")
    from vllm.platforms.interface import Platform, PlatformEnum

    cpu = Platform.__new__(Platform)
    cpu._enum = PlatformEnum.CPU
    assert cpu.is_sleep_mode_available() is False


class Recorder(LocalEngine):
    tokenizer = None

    def __init__(self, calls):
        self.calls = calls

    def sleep(self, level=1):
        self.calls.append(("sleep", id(self), level))

    def wake_up(self):
        self.calls.append(("wake", id(self)))


def test_session_sleeps_each_engine_once_only_in_sleep_mode(tmp_path):
    calls: list[tuple] = []
    base = Recorder(calls)
    adapter = types.SimpleNamespace(base=base)  # a LoRA adapter engine: its shared base sleeps
    full = Recorder(calls)
    engines = {"a": adapter, "b": adapter, "c": base, "d": full}
    for on in (False, True):
        cfg = resolve_config(overrides=[f"runtime.vllm_sleep_mode={str(on).lower()}", "runtime.device=cuda"])
        s = TrainSession(None, resolve_rollout(masdsl.load(CODER), cfg), tmp_path, None, None, [], [], {}, engines=engines)
        with pytest.raises(RuntimeError):
            with s.engines_asleep():  # the update's span: the engines wake even when the update raises
                raise RuntimeError("update failed")
    assert calls == [("sleep", id(base), 1), ("sleep", id(full), 1), ("wake", id(base)), ("wake", id(full))]


def test_placement_of_replicas_tensor_parallel_and_lora():
    over = ["runtime.ray=true", "runtime.engine=vllm", "runtime.device=cuda", "runtime.engine_replicas=3",
            "runtime.vllm_tensor_parallel_size=2", "runtime.learner_workers=2", "runtime.learner_fsdp=true"]
    wf = masdsl.load(PLAN_PATH)
    (p,) = resolve_run(wf, resolve_config(wf.train, None, over)).placement.policies
    # a full policy: 3 replicas in Ray actors, 2 whole GPUs each (tensor parallel), FSDP learner workers
    assert (p.engine.in_ray, p.engine.replicas, p.engine.gpus_each, p.engine.tensor_parallel) == (True, 3, 2.0, 2)
    assert p.lines()[1:] == [
        "  engine: vllm in 3 Ray actors (replicas, requests balanced across them), 2 GPUs each, loads the "
        "learner's new weights after each update, tensor parallel over 2 GPUs",
        "  learner: 2 Ray workers (FSDP), 1 GPU per rank (cuda)"]
    lora = masdsl.load(TOY_DIR / "toy_digits_lora.mas")
    plan = resolve_run(lora, resolve_config(lora.train, None, over[:5])).placement
    for p in plan.policies:  # LoRA adapters stay beside their shared base model in the driver, not replicated
        assert not p.engine.in_ray and p.engine.replicas == 1 and p.learner.where == "driver"
        assert "one engine with LoRA for namer_p, copier_p" in p.lines()[1]


def _graph(*args):
    return subprocess.run([sys.executable, "-m", "masdsl.cli", "graph", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_graph_shows_the_placement_for_the_overrides():
    r = _graph(PLAN_PATH, "runtime.ray=true", "runtime.engine=vllm", "runtime.device=cuda", "runtime.engine_replicas=2",
               "runtime.vllm_sleep_mode=true", "runtime.learner_workers=2", "--format", "dot")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    i = lines.index("// placement of `masdsl run` (engines and learners per policy):")
    assert lines[i + 1:i + 4] == [
        "//   policy shared <- roles tool, planner (full weights, smollm2-135m-instruct)",
        "//     engine: vllm in 2 Ray actors (replicas, requests balanced across them), 1 GPU each, "
        "loads the learner's new weights after each update, sleeps during the update",
        "//     learner: 2 Ray workers (DDP), 1 GPU per rank (cuda)",
    ]
    plain = _graph(PLAN_PATH, "runtime.engine=hf")
    assert plain.returncode == 0 and "    engine: hf in the driver, sampling from the learner's own model object" in plain.stdout
    bad = _graph(PLAN_PATH, "runtime.vllm_sleep_mode=true")
    assert bad.returncode == 2 and "no sleep mode" in bad.stderr and "Traceback" not in bad.stderr


@needs_cuda
def test_sleep_mode_frees_gpu_memory_and_wakes_with_the_same_weights(tiny_model_dir):
    from masdsl.runtime.backends.vllm import VLLMEngine
    from safetensors.torch import load_file

    engine = VLLMEngine(tiny_model_dir, seed=0, max_model_len=256, gpu_memory_utilization=0.2, enable_sleep_mode=True)
    try:
        probe = [GenRequest(list(range(3, 12)), n=2, temperature=1.0, max_tokens=8, seed=3)]
        before = engine.generate(probe)
        free_awake = torch.cuda.mem_get_info()[0]
        engine.sleep()
        assert torch.cuda.mem_get_info()[0] - free_awake > 2**30  # the KV cache (0.2 of the card) is gone
        engine.wake_up()
        (st,) = Path(tiny_model_dir).glob("*.safetensors")
        engine.update_weights(load_file(st))  # the learner's weights load into the woken engine
        after = engine.generate(probe)
        assert [c.token_ids for c in after[0]] == [c.token_ids for c in before[0]]
    finally:
        engine.close()


@needs_cuda
@pytest.mark.slow
def test_training_with_sleep_mode_sleeps_around_each_update(tiny_model_dir, tmp_path, monkeypatch):
    from masdsl.runtime.backends.vllm import VLLMEngine
    from tests.support.toy import train_into

    calls: list[str] = []
    real_sleep, real_wake = VLLMEngine.sleep, VLLMEngine.wake_up
    monkeypatch.setattr(VLLMEngine, "sleep", lambda self, level=1: calls.append("sleep") or real_sleep(self, level))
    monkeypatch.setattr(VLLMEngine, "wake_up", lambda self: calls.append("wake") or real_wake(self))
    wf = masdsl.load(str(DATA / "lengths.mas"))
    cfg = resolve_config(wf.train, None, ["runtime.engine=vllm", "runtime.device=cuda", "runtime.vllm_sleep_mode=true",
                                          f"policy.shared.model={tiny_model_dir}", NO_TRACKING,
                                          "train.steps=2", "runtime.vllm_gpu_memory_utilization=0.2"])
    run = train_into(resolve_run(wf, cfg), tmp_path / "run")
    assert run.steps == 2 and calls == ["sleep", "wake"] * 2


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")
def test_tensor_parallel_engine_in_a_ray_actor(tiny_model_dir, ray_session):
    from functools import partial

    from masdsl.runtime.actors import RemoteEngine, engine_from_folder

    kw = {"seed": 0, "max_model_len": 256, "tensor_parallel_size": 2, "gpu_memory_utilization": 0.2}
    engine = RemoteEngine(partial(engine_from_folder, "vllm", str(tiny_model_dir), kw), num_gpus=2)
    try:
        out = engine.generate([GenRequest(list(range(3, 12)), n=2, temperature=1.0, max_tokens=8, seed=3)])
        assert len(out[0]) == 2 and all(c.token_ids for c in out[0])
    finally:
        engine.close()
