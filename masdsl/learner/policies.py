"""Which weights each role trains: shared, per-role full, or per-role LoRA adapters (DESIGN.md §5).

- Roles that name the same `policy` share one model (the paper's "shared policy").
- One policy per role trains each role's weights separately ("per-role policies").
- A policy with `lora: {r, alpha, ...}` is a peft LoRA adapter. All LoRA policies on the same
  base model share *one* frozen copy of it in memory, as adapters of one `PeftModel`; each
  adapter has its own optimizer and is trained only on its own roles' samples.
- `frozen: true` policies act but never train.

The pure part (`effective_policies`, `describe`) needs no torch and is what the run's start-up
line and `masdsl graph` print:

>>> from masdsl.lang.workflow import PolicySpec, RoleSpec, Workflow
>>> import networkx as nx
>>> wf = Workflow("w", "", "code", nx.DiGraph(),
...     roles={"coder": RoleSpec("coder", "shared", ""), "tester": RoleSpec("tester", "shared", ""),
...            "judge": RoleSpec("judge", "judge_p", "")},
...     policies={"shared": PolicySpec("shared", "smollm2-135m-instruct"),
...               "judge_p": PolicySpec("judge_p", "Qwen/Qwen3-8B", frozen=True)}, data={})
>>> print("\\n".join(describe(wf)))
policy shared <- roles coder, tester (full weights, smollm2-135m-instruct)
policy judge_p <- role judge (frozen, Qwen/Qwen3-8B)
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

from masdsl.config import ConfigError
from masdsl.lang.workflow import PolicySpec, Workflow

LORA_KEYS = {"r", "alpha", "dropout", "target_modules"}


def effective_policies(workflow: Workflow, overrides: Mapping[str, Any] | None = None) -> dict[str, PolicySpec]:
    """The workflow's policies with `policy.<name>.*` config overrides applied.

    >>> from masdsl.config import PolicyOverride
    >>> import networkx as nx
    >>> from masdsl.lang.workflow import RoleSpec
    >>> wf = Workflow("w", "", "code", nx.DiGraph(), roles={"a": RoleSpec("a", "p", "")},
    ...               policies={"p": PolicySpec("p", "m1")}, data={})
    >>> effective_policies(wf, {"p": PolicyOverride(model="m2", lora={"r": 8})})["p"].lora
    {'r': 8}
    >>> effective_policies(wf, {"q": PolicyOverride(model="m2")})
    Traceback (most recent call last):
    ...
    masdsl.config.ConfigError: config sets `policy.q` but the workflow has no policy `q` (policies: p)
    """
    specs = dict(workflow.policies)
    for name, ov in (overrides or {}).items():
        if name not in specs:
            raise ConfigError(
                f"config sets `policy.{name}` but the workflow has no policy `{name}` (policies: {', '.join(specs)})"
            )
        changes = {k: getattr(ov, k) for k in ("model", "lora", "frozen") if getattr(ov, k, None) is not None}
        specs[name] = dataclasses.replace(specs[name], **changes)
    for spec in specs.values():
        unknown = set(spec.lora or {}) - LORA_KEYS
        if unknown:
            raise ConfigError(f"policy `{spec.name}`: unknown lora key(s) {sorted(unknown)}; known: {sorted(LORA_KEYS)}")
    return specs


def describe(workflow: Workflow, overrides: Mapping[str, Any] | None = None) -> list[str]:
    """One line per policy: which roles train which weights."""
    lines = []
    for name, spec in effective_policies(workflow, overrides).items():
        roles = workflow.roles_of_policy(name)
        who = f"role{'s' if len(roles) != 1 else ''} {', '.join(roles) or '(none)'}"
        if spec.frozen:
            kind = "frozen"
        elif spec.lora:
            kind = f"LoRA r={spec.lora.get('r', 8)} adapter on a shared base"
        else:
            kind = "full weights"
        lines.append(f"policy {name} <- {who} ({kind}, {spec.model})")
    return lines


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
    lock: threading.Lock = field(default_factory=threading.Lock)  # adapters share one module

    @property
    def trainable(self) -> bool:
        return not self.spec.frozen and bool(self.roles)

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
        if self.adapter is None:
            return self.model.state_dict()
        from peft import get_peft_model_state_dict

        return get_peft_model_state_dict(self.model, adapter_name=self.adapter)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.adapter is None:
            self.model.load_state_dict(state)
            return
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(self.model, state, adapter_name=self.adapter)


def _lora_config(lora: Mapping[str, Any]) -> Any:
    from peft import LoraConfig

    return LoraConfig(
        r=int(lora.get("r", 8)),
        lora_alpha=float(lora.get("alpha", 2 * int(lora.get("r", 8)))),
        lora_dropout=float(lora.get("dropout", 0.0)),
        target_modules=lora.get("target_modules", "all-linear"),
        task_type="CAUSAL_LM",
    )


def load_policies(workflow: Workflow, cfg: Any) -> dict[str, Policy]:
    """Load every policy's model once: full policies get their own copy, LoRA policies on the
    same base get adapters on one shared `PeftModel` (frozen base)."""
    from masdsl.runtime.models import load_model, resolve_model

    specs = effective_policies(workflow, cfg.policy)
    policies: dict[str, Policy] = {}
    peft_bases: dict[str, Any] = {}  # resolved base path -> PeftModel
    for name, spec in specs.items():
        path = str(resolve_model(spec.model))
        roles = workflow.roles_of_policy(name)
        if not spec.lora:
            model, tok = load_model(path, dtype=cfg.runtime.dtype, device=cfg.runtime.device)
            if spec.frozen:
                model.requires_grad_(False)
            policies[name] = Policy(name, spec, roles, model, tok, path)
            continue
        if path not in peft_bases:
            from peft import get_peft_model

            base, tok = load_model(path, dtype=cfg.runtime.dtype, device=cfg.runtime.device)
            peft_bases[path] = (get_peft_model(base, _lora_config(spec.lora), adapter_name=name), tok)
        else:
            peft_bases[path][0].add_adapter(name, _lora_config(spec.lora))
        model, tok = peft_bases[path]
        policies[name] = Policy(name, spec, roles, model, tok, path, adapter=name)
    for model, _ in peft_bases.values():  # the shared base never trains; adapters train one at a time
        for n, p in model.named_parameters():
            p.requires_grad_("lora_" in n)
    shared_locks = {}
    for p in policies.values():  # adapters of one PeftModel switch under one lock
        p.lock = shared_locks.setdefault(id(p.model), p.lock)
    return policies


class AdapterEngine:
    """An engine for a policy whose model is shared: activates the policy's adapter first.

    The executor may call several policies' engines; adapters of one `PeftModel` must not
    generate at the same time with the wrong adapter active, hence the shared lock.
    """

    def __init__(self, policy: Policy, inner: Any):
        self.policy, self.inner = policy, inner
        self.tokenizer = inner.tokenizer

    def generate(self, requests: list[Any]) -> list[list[Any]]:
        with self.policy.lock:
            self.policy.activate()
            return self.inner.generate(requests)

    def update_weights(self, state_dict: dict[str, Any]) -> None:
        self.inner.update_weights(state_dict)

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:  # anything else the executor reads (e.g. seed)
        return getattr(self.inner, name)


def iter_trainable(policies: Mapping[str, Policy]) -> Iterator[Policy]:
    return (p for p in policies.values() if p.trainable)
