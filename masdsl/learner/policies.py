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
    >>> effective_policies(wf, {"p": PolicyOverride(chat_template_kwargs={"enable_thinking": False})})["p"].chat_template_kwargs
    {'enable_thinking': False}
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
        if getattr(ov, "chat_template_kwargs", None):  # merged over the file's: these keys win
            changes["chat_template_kwargs"] = {**(specs[name].chat_template_kwargs or {}), **ov.chat_template_kwargs}
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
    compute_dtype: str = "float32"  # forward passes run in this dtype (autocast over fp32 master weights)
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
            trains = not spec.frozen and bool(roles)
            model, tok = load_model(path, dtype=master_dtype(cfg) if trains else cfg.runtime.dtype,
                                    device=cfg.runtime.device)
            if spec.frozen:
                model.requires_grad_(False)
            policies[name] = Policy(name, spec, roles, model, tok, path, compute_dtype=cfg.runtime.dtype)
            continue
        if path not in peft_bases:
            from peft import get_peft_model

            base, tok = load_model(path, dtype=cfg.runtime.dtype, device=cfg.runtime.device)
            peft_bases[path] = (get_peft_model(base, _lora_config(spec.lora), adapter_name=name), tok)
        else:
            peft_bases[path][0].add_adapter(name, _lora_config(spec.lora))
        model, tok = peft_bases[path]
        # peft keeps adapter weights in float32 over a half-precision base (autocast_adapter_dtype)
        policies[name] = Policy(name, spec, roles, model, tok, path, adapter=name, compute_dtype=cfg.runtime.dtype)
    for model, _ in peft_bases.values():  # the shared base never trains; adapters train one at a time
        for n, p in model.named_parameters():
            p.requires_grad_("lora_" in n)
    shared_locks = {}
    for p in policies.values():  # adapters of one PeftModel switch under one lock
        p.lock = shared_locks.setdefault(id(p.model), p.lock)
    return policies


def master_dtype(cfg: Any) -> str:
    """The dtype of a trainable full policy's weights and AdamW state.

    Mixed precision as GPUs train: float32 master weights, forward and backward in
    `runtime.dtype` under autocast. With `train.master_weights=compute` the weights themselves
    are in `runtime.dtype`; in bfloat16 an AdamW step of lr 1e-6 then mostly rounds away
    (a weight of magnitude 0.02 has a bfloat16 spacing of 1.2e-4), see docs/concepts.md.

    >>> from masdsl.config import resolve_config
    >>> master_dtype(resolve_config(overrides=["runtime.dtype=bfloat16"]))
    'float32'
    >>> master_dtype(resolve_config(overrides=["runtime.dtype=bfloat16", "train.master_weights=compute"]))
    'bfloat16'
    """
    return "float32" if cfg.train.master_weights == "float32" else cfg.runtime.dtype


def engine_kind(cfg: Any) -> str:
    """`runtime.engine` with `auto` resolved: vllm when it imports and runs here, else hf."""
    kind = cfg.runtime.engine
    if kind == "auto":
        from masdsl.runtime.backends import vllm_available

        kind = "vllm" if vllm_available()[0] else "hf"
    if kind == "replay":
        raise ConfigError("`runtime.engine=replay` replays fixed outputs and cannot train; use hf or vllm")
    return kind


def build_engines(policies: Mapping[str, Policy], cfg: Any) -> dict[str, Any]:
    """One inference engine per policy, each sampling from that policy's current weights.

    `hf`: the engine holds the very model object the learner trains (for a LoRA policy, the
    shared `PeftModel`, whose adapter the engine activates before each generate), so an update
    is visible to the next rollout with no copy. `vllm`: a full policy gets its own engine and
    receives new weights through `update_weights` (loaded into the running engine); LoRA
    policies on one base share one engine, each syncing its adapter as a new LoRA request.

    `runtime.ray`: each full (non-LoRA) policy's engine lives in its own Ray actor
    (`actors.RemoteEngine`), built there from the policy's model folder with the `runtime.engine`
    kind, and receives new weights through `update_weights`; a dead actor is restarted and
    given the latest weights again. The learner's model stays in the driver. LoRA policies
    keep their engines in the driver.
    """
    from masdsl.runtime.backends import build_engine, engine_kwargs

    kind = engine_kind(cfg)
    kw = engine_kwargs(cfg)
    engines: dict[str, Any] = {}
    lora_bases: dict[str, Any] = {}  # model path -> VLLMEngine with LoRA on
    remote = [n for n, p in policies.items() if p.adapter is None] if cfg.runtime.ray else []
    for name, p in policies.items():
        if name in remote:
            from functools import partial

            import torch

            from masdsl.runtime import actors

            actors.init_ray(cfg)
            on_gpu = str(cfg.runtime.device).startswith("cuda")
            threads = None if on_gpu else torch.get_num_threads()  # sample as the driver would
            engines[name] = actors.RemoteEngine(
                partial(actors.engine_from_folder, kind, p.model_path, kw, threads),
                num_gpus=1.0 / len(remote) if on_gpu else 0.0)
        elif kind == "hf":
            engines[name] = build_engine("hf", (p.model, p.tokenizer), seed=kw["seed"], adapter=p.adapter)
        elif p.adapter is None:
            engines[name] = build_engine("vllm", p.model_path, **kw)
        else:
            if p.model_path not in lora_bases:
                ranks = [int((q.spec.lora or {}).get("r", 8)) for q in policies.values() if q.model_path == p.model_path and q.adapter]
                lora = {"max_lora_rank": max(8, *ranks), "max_loras": len(ranks)}
                lora_bases[p.model_path] = build_engine("vllm", p.model_path, lora=lora, **kw)
            peft_config = p.model.peft_config[p.adapter]
            engines[name] = lora_bases[p.model_path].adapter(name, peft_config)
            engines[name].update_weights(p.state_dict())
    return engines


def close_engines(engines: Mapping[str, Any]) -> None:
    """Close every engine once, and the shared vLLM base behind LoRA adapter engines."""
    seen: set[int] = set()
    for e in list(engines.values()) + [getattr(e, "base", None) for e in engines.values()]:
        if e is not None and id(e) not in seen:
            seen.add(id(e))
            e.close()


def iter_trainable(policies: Mapping[str, Policy]) -> Iterator[Policy]:
    return (p for p in policies.values() if p.trainable)
