"""The engines and learners of a run are what its plan says (`RunPlan.placement`): the factory
and the learner layout build each `PolicyPlan`'s engine and learner, deciding nothing again
from the runtime settings; `runtime.engine=auto` is decided once, into the plan."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import masdsl
from masdsl.config import resolve_config
from masdsl.learner.learners import LocalLearner, open_learners
from masdsl.learner.policies import load_policies
from masdsl.plan.placement import EnginePlan, LearnerPlan, placed
from masdsl.plan.run_plan import resolve_run
from masdsl.runtime.backends.hf import HFEngine
from masdsl.runtime.engine_factory import build_engines, close_engines
from tests.support.paths import TOY_DIR

TOY = TOY_DIR


def plan_with(placement_change, *overrides, model_dir):
    wf = masdsl.load(TOY / "toy_digits_lora.mas")
    plan = resolve_run(wf, resolve_config(wf.train, overrides=[f"policy.*.model={model_dir}", *overrides]))
    return dataclasses.replace(plan, placement=placed([placement_change(p) for p in plan.placement.policies], plan.runtime))


def test_the_factory_builds_the_engine_the_plan_names_not_the_one_the_settings_would(tiny_model_dir):
    """The settings ask for vllm with merged LoRA sync; the plan says each policy samples from
    the learner's own model object (hf): that is what is built, and vllm is never started."""
    hf = EnginePlan("hf", False, note="", source="learner_object")
    plan = plan_with(lambda p: dataclasses.replace(p, engine=hf), "runtime.engine=vllm", "runtime.lora_sync=merged",
                     model_dir=tiny_model_dir)
    policies = load_policies(plan)
    engines = build_engines(plan, policies)
    try:
        assert set(engines) == {"namer_p", "copier_p"}
        assert all(isinstance(e, HFEngine) for e in engines.values())
        assert {e.adapter for e in engines.values()} == {"namer_p", "copier_p"}  # each its own adapter
    finally:
        close_engines(engines)


def test_evaluation_engines_are_the_placements_too(tiny_model_dir):
    """Evaluation (no learner weights) reads the placement as well: the settings ask for vllm,
    the plan says hf, so one hf engine is loaded by name for the two policies on one model, and
    vllm is never started."""
    hf = EnginePlan("hf", False, note="", source="learner_object")
    plan = plan_with(lambda p: dataclasses.replace(p, engine=hf), "runtime.engine=vllm", model_dir=tiny_model_dir)
    assert [(e.kind, e.source) for e in plan.placement.evaluation.values()] == [("hf", "name")]
    engines = build_engines(plan)
    try:
        assert set(engines) == {"namer_p", "copier_p"} and engines["namer_p"] is engines["copier_p"]
        assert isinstance(engines["namer_p"], HFEngine) and engines["namer_p"].adapter is None
    finally:
        close_engines(engines)


def test_hf_with_merged_sync_samples_a_plain_copy_that_sync_keeps_equal_to_the_adapter(tiny_model_dir):
    """`runtime.engine=hf runtime.lora_sync=merged`: each LoRA policy's engine holds a plain model
    (no LoRA layers), not the learner's `PeftModel`; after the adapter trains, `sync` makes it
    compute what the policy computes, and the learner's weights are untouched by either."""
    import torch

    from masdsl.learner.policies import sync

    wf = masdsl.load(TOY / "toy_digits_lora.mas")
    plan = resolve_run(wf, resolve_config(wf.train, overrides=[f"policy.*.model={tiny_model_dir}", "runtime.engine=hf",
                                                               "runtime.lora_sync=merged"]))
    assert {(p.engine.kind, p.engine.source) for p in plan.placement.policies} == {("hf", "merged")}
    policies = load_policies(plan)
    engines = build_engines(plan, policies)
    try:
        namer = policies["namer_p"]
        plain = engines["namer_p"].model
        assert plain is not namer.model and not any("lora_" in n for n, _ in plain.named_parameters())
        with torch.no_grad():
            for n, w in namer.model.named_parameters():
                if ".namer_p." in n and "lora_B" in n:
                    w.normal_(0, 0.5)  # the adapter trained
        ids = torch.tensor([[5, 17, 42, 9]])
        namer.activate()
        with torch.no_grad():
            want = namer.model(ids).logits
            assert not torch.allclose(plain(ids).logits, want, atol=1e-3)  # stale until synced
            sync(namer, engines["namer_p"])
            namer.activate()
            assert torch.allclose(plain(ids).logits, want, atol=1e-5)
            assert torch.equal(namer.model(ids).logits, want)
    finally:
        close_engines(engines)


def test_auto_is_decided_into_the_plan():
    wf = masdsl.load(TOY / "toy_digits_lora.mas")
    plan = resolve_run(wf, resolve_config(wf.train, overrides=["runtime.engine=auto", "runtime.lora_sync=merged"]))
    assert {p.engine.source for p in plan.placement.policies} == {"auto"}  # the dry run does not probe vLLM
    on_vllm, on_hf = plan.placement.auto["vllm"], plan.placement.auto["hf"]  # placed for either; the factory picks
    assert {(p.engine.kind, p.engine.source) for p in on_vllm.policies} == {("vllm", "merged")}
    assert {(p.engine.kind, p.engine.source) for p in on_hf.policies} == {("hf", "merged")}
    assert on_hf.of("namer_p").trainable and on_hf.of("namer_p").lora.r == 4 and not on_hf.auto


def _callers_of(name: str) -> dict[str, set[str]]:
    """{file under masdsl/: the functions that call `name`}."""
    out: dict[str, set[str]] = {}
    for path in sorted(Path(masdsl.__file__).parent.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == name:
                        out.setdefault(path.relative_to(Path(masdsl.__file__).parent).as_posix(), set()).add(fn.name)
    return out


def test_auto_is_decided_once_by_one_rule(tiny_model_dir, monkeypatch, capsys):
    """`runtime.engine=auto` is decided by `backends.auto_kind` alone: a training plan's placement
    (`engine_factory.placement_of`) and an engine built from a model's name follow it, and nothing
    else asks whether vLLM is usable (`start_auto` only for the warning's reason; `vllm_engine`
    to refuse `runtime.engine=vllm` on a machine without it)."""
    from masdsl.runtime import backends
    from masdsl.runtime.engine_factory import placement_of

    assert _callers_of("vllm_available") == {"runtime/backends/__init__.py": {"auto_kind", "start_auto", "vllm_engine"}}
    assert _callers_of("auto_kind") == {"runtime/backends/__init__.py": {"auto_engine"},
                                        "runtime/engine_factory.py": {"placement_of"}}
    monkeypatch.setenv("MASDSL_NO_VLLM", "1")
    monkeypatch.setattr(backends, "_vllm_status", None)  # the probe's answer is cached per process
    assert backends.auto_kind() == "hf"
    plan = plan_with(lambda p: p, "runtime.engine=auto", model_dir=tiny_model_dir)
    assert {p.engine.kind for p in placement_of(plan).policies} == {"hf"}
    engine = backends.build_engine("auto", tiny_model_dir)
    assert isinstance(engine, HFEngine)
    assert "vllm not usable (MASDSL_NO_VLLM is set); using hf" in capsys.readouterr().err


def test_the_learner_layout_is_the_plans(tiny_model_dir):
    """`runtime.learner_workers=2` is set, but the plan puts the learner in the driver: a local
    learner it is (no Ray worker starts)."""
    driver = LearnerPlan("driver", device="cpu")
    plan = plan_with(lambda p: dataclasses.replace(p, learner=driver), "runtime.engine=hf", model_dir=tiny_model_dir)
    plan = dataclasses.replace(plan, runtime=dataclasses.replace(plan.runtime, learner_workers=2))
    learners = open_learners(load_policies(plan), plan, print)
    assert set(learners) == {"namer_p", "copier_p"} and all(isinstance(x, LocalLearner) for x in learners.values())
