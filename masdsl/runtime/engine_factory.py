"""The one place that builds and closes inference engines, for `masdsl eval`, `masdsl run` and the
evaluations inside a run.

    engines = build_engines(plan)             # evaluation: from the policies' model names
    engines = build_engines(plan, weights)    # training: sampling from the learner's live weights
    close_engines(engines)

Both build what the plan decided (`RunPlan.placement`, one `PolicyPlan` per policy), and
nothing here decides it again; under `runtime.engine=auto` the plan placed both kinds and the
one rule picks one, once (`placement_of`).
Training: each `EnginePlan.source` says how that policy's engine gets its weights.

Evaluation (`weights=None`): the engines the placement decided for an evaluation (its
`evaluation`, `placement.evaluation_engines`): one per distinct model (policies on one model act
with the same weights, so they share it), of the placement's kind, loaded by name (under `auto`,
falling back to hf when vLLM fails to start: `backends.start_auto`); a replay placement serves
every policy from `runtime.replay_file`. Training (`weights`: `{policy: LiveWeights}`, the learner's loaded
policies): `hf` engines hold the very model object the learner trains (for a LoRA policy the
shared `PeftModel`, whose adapter the engine activates before each generate), so an update is
visible to the next rollout with no copy (under `train.async_rollout=1` a copy of it, synced
after each step); a `vllm` full policy gets its own engine, fed new
weights through `update_weights`; LoRA policies on one base share one vLLM engine, each syncing
its adapter as a LoRA request (`runtime.lora_sync=merged`: each its own engine without LoRA, fed
base + adapter merged after each update; for hf, a plain copy of the base with the adapter merged). With `runtime.ray`, engines (training: full policies only) live
in Ray actors (`actors.RemoteEngine`); a dead actor is rebuilt and given the latest weights again.
`runtime.engine_replicas=R` gives each such policy (evaluation: model) R actors behind one
`replicas.ReplicatedEngine`; GPUs per actor: `placement.engine_gpus`.
"""

from __future__ import annotations

import copy
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol

from masdsl.config import ConfigError
from masdsl.lang.workflow import LoraSettings, PolicySpec
from masdsl.plan.placement import REPLAY_CANNOT_TRAIN, EnginePlan, Placement
from masdsl.plan.run_plan import RunPlan
from masdsl.runtime import actors
from masdsl.runtime.backends import auto_kind, build_engine, engine_kwargs, hf_engine_on, start_auto, vllm_engine
from masdsl.runtime.backends.base import Engine, LoRAHost
from masdsl.runtime.backends.lora_merge import merged_model
from masdsl.runtime.heartbeat import starting
from masdsl.runtime.replicas import ReplicatedEngine

if TYPE_CHECKING:
    from torch import nn


class LiveWeights(Protocol):
    """What the factory needs of a learner's policy (`masdsl.learner.policies.Policy`)."""

    name: str
    spec: PolicySpec
    model: Any
    tokenizer: Any
    model_path: str
    adapter: str | None

    def state_dict(self) -> dict[str, Any]: ...


def placement_of(plan: RunPlan) -> Placement:
    """The plan's placement as it runs here: under `runtime.engine=auto` the one the plan placed
    for the kind the one rule picks (`backends.auto_kind`: vllm when it imports and runs, else hf)."""
    return plan.placement.auto[auto_kind()] if plan.placement.auto else plan.placement


def build_engines(plan: RunPlan, weights: Mapping[str, LiveWeights] | None = None) -> dict[str, Engine]:
    """{policy: Engine}: from the plan's policies' model names, or sampling from the learner's
    `weights`; either way the engines the placement names, `auto` decided once (`placement_of`)."""
    placement = placement_of(plan)
    if weights is not None:
        return _training_engines(weights, plan, placement)
    rt = plan.runtime
    planned = placement.evaluation
    if all(e.source == "replay" for e in planned.values()):
        from masdsl.runtime.backends.replay import ReplayEngine  # only replay runs need it

        engine = ReplayEngine(rt.replay_file)  # type: ignore[arg-type]  # the plan refused replay without one
        return {name: engine for name in plan.policies}
    by_model: dict[str, Engine] = {}
    for model, eng in planned.items():
        if eng.in_ray:
            actors.init_ray(rt)
            by_model[model] = _replicas(eng.replicas, eng.gpus_each, lambda gpus: actors.RemoteEngine(
                partial(_from_name, eng.kind, model, plan), num_gpus=gpus), f"engine {rt.engine} for {model} (Ray actor)")
        else:
            by_model[model] = _from_name(eng.kind, model, plan)
    return {name: by_model[spec.model] for name, spec in plan.policies.items()}


def _from_name(kind: str, model: str, plan: RunPlan) -> Engine:
    """One engine of `kind` for a model by its name; under `runtime.engine=auto` with auto's
    fallback to hf when vLLM fails to start (`backends.start_auto`)."""
    kw = {**engine_kwargs(plan.runtime, plan.train.seed), "max_model_len": plan.max_model_len}
    if plan.runtime.engine == "auto":
        return start_auto(kind, model, kw)
    return build_engine(kind, model, **kw)


def _training_engines(weights: Mapping[str, LiveWeights], plan: RunPlan, placement: Placement) -> dict[str, Engine]:
    """Each policy's engine as its `EnginePlan` says (`placement.plan_placement`): built here,
    decided there."""
    kw = engine_kwargs(plan.runtime, plan.train.seed)
    engines: dict[str, Engine] = {}
    lora_bases: dict[str, LoRAHost] = {}  # model path -> the vLLM engine with LoRA on
    copies: dict[int, nn.Module] = {}  # async: id of a learner's model -> the copy its hf engine samples from
    for name, p in weights.items():
        eng = placement.of(name).engine
        if eng.source == "replay":
            raise ConfigError(REPLAY_CANNOT_TRAIN)
        if eng.source == "actor":
            engines[name] = _remote_engine(eng, p, kw, plan)
        elif eng.source == "learner_object":
            engines[name] = hf_engine_on(_sampled_model(p.model, plan, copies), p.tokenizer, seed=kw["seed"],
                                         dtype=kw["dtype"], device=kw["device"], adapter=p.adapter)
        elif eng.source == "merged" and eng.kind == "hf":  # a copy of its own: async needs none more
            engines[name] = hf_engine_on(merged_model(p.model, p.adapter, kw["dtype"]), p.tokenizer,  # type: ignore[arg-type]  # a LoRA policy
                                         seed=kw["seed"], dtype=kw["dtype"], device=kw["device"])
        elif eng.source in ("own", "merged"):  # merged: fed base + adapter (runtime/backends/lora_merge.py)
            engines[name] = vllm_engine(p.model_path, **kw)
        else:  # lora_shared
            if p.model_path not in lora_bases:
                ranks = [q.spec.lora_settings.r  # type: ignore[union-attr]  # q.adapter: a LoRA policy
                         for q in weights.values() if q.model_path == p.model_path and q.adapter]
                lora = {"max_lora_rank": max(8, *ranks), "max_loras": len(ranks)}
                lora_bases[p.model_path] = vllm_engine(p.model_path, lora=lora, **kw)
            engines[name] = lora_bases[p.model_path].adapter(name, p.model.peft_config[p.adapter])
            engines[name].update_weights(p.state_dict())
    return engines


def _sampled_model(model: nn.Module, plan: RunPlan, copies: dict[int, nn.Module]) -> nn.Module:
    """The model an hf engine samples from: the learner's very object, or under
    `train.async_rollout=1` a copy of it (one per shared `PeftModel`), so that an update cannot
    change the weights under a rollout still sampling beside it (synced after each step as any
    engine with weights of its own is)."""
    if not plan.train.async_rollout:
        return model
    if id(model) not in copies:  # policies sharing one PeftModel share its one copy
        copies[id(model)] = copy.deepcopy(model)
    return copies[id(model)]


def _remote_engine(eng: EnginePlan, p: LiveWeights, kw: dict[str, Any], plan: RunPlan) -> Engine:
    """A full policy's engine in its own Ray actors, built there from the policy's model folder."""
    import torch  # heavy: only training engines need torch's thread count

    actors.init_ray(plan.runtime)
    on_gpu = str(plan.runtime.device).startswith("cuda")
    threads = None if on_gpu else torch.get_num_threads()  # sample as the driver would
    return _replicas(eng.replicas, eng.gpus_each, lambda gpus: actors.RemoteEngine(
        partial(actors.engine_from_folder, eng.kind, p.model_path, kw, threads), num_gpus=gpus),
        f"engine {eng.kind} for {p.model_path} (Ray actor)")


def _replicas(n: int, gpus: float, start: Callable[[float], Engine], what: str) -> Engine:
    """`n` engine actors (`runtime.engine_replicas`) from `start(num_gpus)`: the one engine, or a
    `ReplicatedEngine` over them (a failed start closes those already up). Each start is
    announced as `what` (`heartbeat.starting`: the actor's own output does not reach this process)."""
    made: list[Engine] = []
    try:
        for i in range(n):
            with starting(what if n == 1 else f"{what} {i + 1}/{n}"):
                made.append(start(gpus))
    except BaseException:
        for e in made:
            e.close()
        raise
    return made[0] if len(made) == 1 else ReplicatedEngine(made)


def close_engines(engines: Mapping[str, Engine]) -> None:
    """Close every engine once, and the shared vLLM base behind LoRA adapter engines."""
    seen: set[int] = set()
    for e in list(engines.values()) + [e.base for e in engines.values()]:
        if e is not None and id(e) not in seen:
            seen.add(id(e))
            e.close()


def sleep_engines(engines: Mapping[str, Engine], level: int = 1) -> None:
    """Every engine frees its GPU memory (vLLM's sleep mode; engines without one do nothing).
    An adapter engine stands for its shared base; each engine sleeps once."""
    for e in _bases(engines):
        e.sleep(level)


def wake_engines(engines: Mapping[str, Engine]) -> None:
    """Every engine takes back what `sleep_engines` freed."""
    for e in _bases(engines):
        e.wake_up()


def _bases(engines: Mapping[str, Engine]) -> list[Engine]:
    return list({id(b): b for b in (e.base or e for e in engines.values())}.values())
