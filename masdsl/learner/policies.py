"""Which weights each role trains: shared, per-role full, or per-role LoRA adapters (docs/concepts.md).

- Roles that name the same `policy` share one model (the paper's "shared policy").
- One policy per role trains each role's weights separately ("per-role policies").
- A policy with `lora: {r, alpha, ...}` is a peft LoRA adapter. All LoRA policies on the same
  base model share *one* frozen copy of it in memory, as adapters of one `PeftModel`; each
  adapter has its own optimizer and is trained only on its own roles' samples.
- `frozen: true` policies act but never train.

Where each policy's engine runs and where it learns is the run plan's
(`masdsl.plan.run_plan.RunPlan.placement`); this module loads the weights it names
(`load_policies(plan)`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

import torch

from masdsl.lang.workflow import LoraSettings, PolicySpec
from masdsl.models.load import load_model, resolve_model
from masdsl.plan.placement import is_trainable
from masdsl.plan.run_plan import RunPlan
from masdsl.runtime.backends.base import Engine
from masdsl.runtime.backends.lora_merge import merged_state


@dataclass
class Policy:
    """One trainable (or frozen) set of weights and the roles whose samples train it."""

    name: str
    spec: PolicySpec
    roles: list[str]
    model: Any  # the torch module to run: a PeftModel (shared by adapters) or a full model
    tokenizer: Any
    model_path: str  # resolved folder, what a vllm engine loads
    adapter: str | None = None  # peft adapter name (== policy name) for LoRA policies
    compute_dtype: str = "float32"  # forward passes run in this dtype (autocast over fp32 master weights)
    lock: threading.Lock = field(default_factory=threading.Lock)  # adapters share one module
    # newer weights trained elsewhere (learner workers): fetched into `model` when the driver needs them
    _fetch: Callable[[], dict[str, Any]] | None = field(default=None, repr=False)
    remote_weights: Any = None  # those weights as engine actors load them (an object-store ref), or None

    def trained_elsewhere(self, fetch: Callable[[], dict[str, Any]], remote_weights: Any) -> None:
        """The policy's newest weights are not in `model` but elsewhere: `fetch()` returns them
        (loaded on first use: `state_dict`, `sync` into an engine in this process); an engine actor
        loads `remote_weights` directly."""
        self._fetch, self.remote_weights = fetch, remote_weights

    def current(self) -> None:
        """Load weights trained elsewhere into `model`, if there are newer ones."""
        if self._fetch is not None:
            weights = self._fetch()
            self.model.load_state_dict(weights)
            self._fetch = None

    @property
    def trainable(self) -> bool:
        return is_trainable(self.spec, self.roles)

    def activate(self) -> None:
        """Make this policy's adapter the active one (no-op for full models)."""
        if self.adapter is not None:
            self.model.set_adapter(self.adapter)

    def parameters(self) -> list[Any]:
        """The parameters this policy's optimizer updates (only its own adapter for LoRA)."""
        if self.adapter is None:
            return [p for p in self.model.parameters()]
        tag = f".{self.adapter}."
        return [p for n, p in self.model.named_parameters() if "lora_" in n and tag in n]

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint stores and an engine syncs: all weights, or the adapter's."""
        self.current()
        if self.adapter is None:
            return self.model.state_dict()
        from peft import get_peft_model_state_dict  # heavy: peft only for LoRA policies

        return get_peft_model_state_dict(self.model, adapter_name=self.adapter)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._fetch = self.remote_weights = None  # these weights replace any trained elsewhere
        if self.adapter is None:
            self.model.load_state_dict(state)
            return
        from peft import set_peft_model_state_dict  # heavy: peft only for LoRA policies

        set_peft_model_state_dict(self.model, state, adapter_name=self.adapter)


def _lora_config(block: Mapping[str, Any]) -> Any:
    from peft import LoraConfig  # heavy: peft only for LoRA policies

    lora = LoraSettings.of(block)
    return LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                      target_modules=lora.target_modules, task_type="CAUSAL_LM")


def load_policies(plan: RunPlan) -> dict[str, Policy]:
    """Load every policy of the plan once: full policies get their own copy, LoRA policies on the
    same base get adapters on one shared `PeftModel` (frozen base)."""
    specs, rt, workflow = plan.policies, plan.runtime, plan.workflow
    policies: dict[str, Policy] = {}
    peft_bases: dict[str, Any] = {}  # resolved base path -> PeftModel
    for name, spec in specs.items():
        path = str(resolve_model(spec.model))
        roles = workflow.roles_of_policy(name)
        if not spec.lora:
            trains = plan.placement.of(name).trainable  # the plan's answer: not frozen, and some role acts with it
            model, tok = load_model(path, dtype=master_dtype(plan) if trains else rt.dtype, device=rt.device)
            if spec.frozen:
                model.requires_grad_(False)
            policies[name] = Policy(name, spec, roles, model, tok, path, compute_dtype=rt.dtype)
            continue
        if path not in peft_bases:
            from peft import get_peft_model  # heavy: peft only for LoRA policies

            base, tok = load_model(path, dtype=rt.dtype, device=rt.device)
            peft_bases[path] = (get_peft_model(base, _lora_config(spec.lora), adapter_name=name), tok)
        else:
            peft_bases[path][0].add_adapter(name, _lora_config(spec.lora))
        model, tok = peft_bases[path]
        # peft keeps adapter weights in float32 over a half-precision base (autocast_adapter_dtype)
        policies[name] = Policy(name, spec, roles, model, tok, path, adapter=name, compute_dtype=rt.dtype)
    for model, _ in peft_bases.values():  # the shared base never trains; adapters train one at a time
        for n, p in model.named_parameters():
            p.requires_grad_("lora_" in n)
        cast_inputs_outside_autocast(model)
    shared_locks: dict[int, Any] = {}
    for p in policies.values():  # adapters of one PeftModel switch under one lock
        p.lock = shared_locks.setdefault(id(p.model), p.lock)
    return policies


class _OutsideAutocast:
    """True unless autocast is on in the calling thread (autocast's state is per thread)."""

    def __bool__(self) -> bool:
        return not (torch.is_autocast_enabled("cpu") or torch.is_autocast_enabled("cuda"))


def cast_inputs_outside_autocast(model: torch.nn.Module) -> int:
    """Let `model`'s LoRA layers skip casting their input to the adapter's dtype under autocast;
    returns how many layers it set.

    peft casts each LoRA layer's input to the adapter's float32 (over a bfloat16 base) before the
    adapter's two small matmuls; under autocast those matmuls cast it straight back to bfloat16,
    so the cast is two passes over the activations (and two more in the backward) that change no
    value: 6-9 % of a 0.5B LoRA update on a CPU (docs/performance.md `### The update taken apart`).
    Outside autocast the cast is what lets a float32 adapter take a bfloat16 input, so an engine
    sampling from the same modules (an hf engine, perhaps in another thread) keeps it.

    >>> from peft import LoraConfig, get_peft_model
    >>> net = torch.nn.Sequential(torch.nn.Linear(4, 4)).to(torch.bfloat16)
    >>> peft_net = get_peft_model(net, LoraConfig(r=2, target_modules=["0"]))
    >>> cast_inputs_outside_autocast(peft_net)
    1
    >>> peft_net(torch.ones(1, 4, dtype=torch.bfloat16)).dtype  # float32 adapter, no autocast: cast
    torch.bfloat16
    """
    layers = [m for m in model.modules() if hasattr(m, "cast_input_dtype_enabled")]
    for m in layers:  # read as a truth value by peft's `_cast_input_dtype`
        setattr(m, "cast_input_dtype_enabled", _OutsideAutocast())
    return len(layers)


def master_dtype(plan: RunPlan) -> str:
    """The dtype of a trainable full policy's weights and AdamW state.

    Mixed precision as GPUs train: float32 master weights, forward and backward in
    `runtime.dtype` under autocast. With `train.master_weights=compute` the weights themselves
    are in `runtime.dtype`; in bfloat16 an AdamW step of lr 1e-6 then mostly rounds away
    (a weight of magnitude 0.02 has a bfloat16 spacing of 1.2e-4), see docs/concepts.md.

    >>> import masdsl
    >>> from masdsl.config import resolve_config
    >>> from masdsl.plan.run_plan import resolve_rollout
    >>> wf = masdsl.load("workflows/coder_tester.mas")
    >>> master_dtype(resolve_rollout(wf, resolve_config(overrides=["runtime.dtype=bfloat16"])))
    'float32'
    >>> master_dtype(resolve_rollout(wf, resolve_config(overrides=["runtime.dtype=bfloat16", "train.master_weights=compute"])))
    'bfloat16'
    """
    return "float32" if plan.train.master_weights == "float32" else plan.runtime.dtype


def sync(policy: Policy, engine: Engine) -> None:
    """Make `engine` sample from `policy`'s current weights before the next rollout.

    An hf engine holding the very model object trains in place (nothing to copy); any other
    engine (vllm, or a copy) receives the weights, or only the adapter, by `update_weights`; a LoRA
    policy's engine without adapters (`runtime.lora_sync=merged`) receives base + adapter merged,
    the modules the adapter changes only.
    Weights trained by learner workers go to engine actors straight from the object store
    (`remote_weights`); the driver's model loads them only for an engine in this process.
    """
    if policy.remote_weights is not None and engine.takes_refs:
        engine.update_weights(policy.remote_weights)
        return
    policy.current()
    if engine.model is policy.model:
        return
    if policy.adapter is not None and not engine.takes_adapter:  # runtime.lora_sync=merged: a plain engine
        # the engine holds the frozen base already: only the modules the adapter changes move
        state = merged_state(policy.model, policy.adapter, changed_only=True)
    else:
        state = policy.state_dict()
    if policy.adapter is None or not engine.takes_adapter:  # fp32 master weights: send what the engine holds
        state = compute_state(state, policy.compute_dtype)
    engine.update_weights(state)


def compute_state(state: Mapping[str, Any], dtype: str) -> dict[str, Any]:
    """`state` with its float tensors cast to `dtype` (what an engine holds); tied tensors stay
    tied, and in float32 nothing is copied.

    >>> w = torch.ones(2); out = compute_state({"a": w, "b": w, "n": torch.arange(2)}, "bfloat16")
    >>> out["a"].dtype, out["a"] is out["b"], out["n"].dtype, compute_state({"a": w}, "float32")["a"] is w
    (torch.bfloat16, True, torch.int64, True)
    """
    if dtype == "float32":
        return dict(state)
    to = getattr(torch, dtype)
    cast: dict[int, torch.Tensor] = {}  # data_ptr -> its cast (tied weights stay one tensor)
    return {k: cast.setdefault(v.data_ptr(), v.to(to)) if v.is_floating_point() else v for k, v in state.items()}


def iter_trainable(policies: Mapping[str, Policy]) -> Iterator[Policy]:
    """The policies an update trains (not frozen, used by a role)."""
    return (p for p in policies.values() if p.trainable)
