"""Memory per GPU and bytes moved per step of a GPU recipe (configs/gpu_*.yaml), computed.

Pure arithmetic over a model's dimensions and a recipe (no torch): `plan(model, recipe)` gives
each kind of GPU's contents in the rollout and in the update phase, and the communication of one
training step. docs/cluster.md ("Recipes") prints the tables; `benchmarks/gpu_plan.py` writes them.

What is counted, per learner rank (the driver is rank 0 of 1 without learner workers), P params:

- weights: float32 master weights 4P (`train.master_weights=float32`), or 2P in bfloat16;
  gradients the same dtype; AdamW 2 states of the weights' dtype (8P in float32). FSDP
  (`masdsl.learner.parallel.FsdpShard`: one unit per decoder layer, the root unit for the rest)
  divides all three by the ranks and adds what a micro-batch gathers, in the master dtype (no
  FSDP mixed-precision policy): the root unit (embeddings, LM head, final norm) all along, two
  layers (running, prefetched); and unsharded gradients before their reduce-scatter: the root's
  (the LM head's is made first, reduced last) and two layers'.
- the bfloat16 copy under autocast: every linear weight cast once per forward, 2 bytes each (the
  autocast cache; kept by autograd until backward), on every rank, FSDP too.
- host RAM per learner rank (`host`, not GPU): the whole AdamW state from before and after the
  last update (FSDP too), and rank 0's new weights for the driver.
- activations of one micro-batch of `train.micro_batch_tokens` tokens: `layer_activation_bytes`
  per layer (exact count of what autograd saves in a Qwen3 layer, checked against transformers
  in tests/plan/test_gpu_plan.py); with gradient checkpointing the layer inputs plus one layer
  recomputed; plus logits, scored in checkpointed chunks (`masdsl.learner.logit_chunks`): 12 bytes
  (float32 logits, softmax, gradient) x min(`LOGIT_CHUNK_ELEMENTS_GPU`, vocab x scored tokens) + 4 bytes
  per scored token. Scored tokens: the response share of the budget at the longest prompt and response.
- a vLLM engine reserves `vllm_gpu_memory_utilization` of each of its GPUs: bfloat16 weights
  (2P / TP) and the KV cache pool; the KV cache the rollout asks for is 2 x layers x kv_heads x
  head_dim x 2 bytes per token, for batch x K x (roles acting at once) sequences of prompt +
  response tokens. With `vllm_sleep_mode` an engine on its learner's GPU frees all of it during
  the update. Not counted: CUDA context (~0.5 GiB per process), allocator fragmentation.

>>> QWEN3_1_7B.params(), QWEN3_8B.params()
(1720574976, 8190735360)
>>> round(QWEN3_1_7B.kv_bytes_per_token() / 2**10)   # KiB of KV cache per token in bfloat16
112
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from masdsl.plan.logit_budget import LOGIT_CHUNK_ELEMENTS_GPU
from masdsl.plan.run_plan import RunPlan

GIB = 2**30


@dataclass(frozen=True)
class ModelDims:
    """A Qwen3-style decoder: GQA attention with q/k RMSNorm, SwiGLU MLP, no biases."""

    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool  # lm_head shares the embedding matrix

    def linear_params_per_layer(self) -> int:
        attention = self.hidden * self.head_dim * (2 * self.heads + 2 * self.kv_heads)  # q, o, k, v
        return attention + 3 * self.hidden * self.intermediate  # gate, up, down

    def layer_params(self) -> int:
        return self.linear_params_per_layer() + 2 * self.head_dim + 2 * self.hidden  # + q/k norms, 2 norms

    def root_params(self) -> int:
        """What is not in a decoder layer: embeddings, LM head (unless tied), final norm (FSDP's root unit)."""
        return self.vocab * self.hidden * (1 if self.tied else 2) + self.hidden

    def params(self) -> int:
        return self.root_params() + self.layers * self.layer_params()

    def linear_params(self) -> int:
        """Weights autocast casts to bfloat16: every linear, the lm_head included."""
        return self.layers * self.linear_params_per_layer() + self.vocab * self.hidden

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes

    def layer_activation_bytes(self, tokens: int, master_fp32: bool) -> int:
        """What autograd keeps for backward of one decoder layer over `tokens` tokens.

        bfloat16 weights: norms save their float32 input (4h), rstd and bfloat16 output (2h+2h);
        q/k save the float32 norm input, rstd and bfloat16 output; SDPA its q, k, v, output and
        float32 log-sum-exp; the MLP gate, SiLU, up and product (8I). float32 master weights under
        autocast: the residual stream is float32 and each linear keeps its own bfloat16 cast of its
        input: 10h more per token.

        >>> QWEN3_1_7B.layer_activation_bytes(1, master_fp32=True)
        133288
        """
        h, hd = self.hidden, self.head_dim
        per_token = (16 * h + (10 * h if master_fp32 else 0) + 10 * (self.heads + self.kv_heads) * hd
                     + 8 * self.intermediate + 8 * self.heads + 4 * self.kv_heads + 8)
        return per_token * tokens

    def lora_params(self, r: int) -> int:
        """Adapter parameters of rank `r` on every linear of every layer (peft's `all-linear`)."""
        h, q, kv, i = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim, self.intermediate
        shapes = [(h, q), (h, kv), (h, kv), (q, h), (h, i), (h, i), (i, h)]
        return self.layers * sum(r * (a + b) for a, b in shapes)


# The released configs (config.json of Qwen/Qwen3-1.7B and Qwen/Qwen3-8B)
QWEN3_1_7B = ModelDims("Qwen3-1.7B", 2048, 28, 16, 8, 128, 6144, 151936, tied=True)
QWEN3_8B = ModelDims("Qwen3-8B", 4096, 36, 32, 8, 128, 12288, 151936, tied=False)
MODELS = (QWEN3_1_7B, QWEN3_8B)


@dataclass(frozen=True)
class Hardware:
    gpus_per_node: int = 1
    nodes: int = 1
    gpu_gib: float = 80.0  # A100/H100 80 GB cards
    driver_gpu: bool = False  # one GPU of the head is left out of Ray for the driver's copies


@dataclass(frozen=True)
class Recipe:
    """The knobs of a run that decide memory and traffic (see `recipe_from_plan`)."""

    name: str
    hardware: Hardware = field(default_factory=Hardware)
    policies: int = 1  # trainable full (or LoRA) policies
    roles_per_policy: int = 2  # roles acting on each policy
    parallel_roles: int = 1  # of those, the most that sample in the same tick (`a & b`)
    turns: int = 3
    batch: int = 32
    samples: int = 4
    prompt_tokens: int = 4096  # runtime.max_prompt_tokens
    response_tokens: int = 256  # the longest `max_tokens` of the policy's roles
    mini_batch_size: int = 16
    ppo_epochs: int = 1
    micro_batch_tokens: int = 16384
    gradient_checkpointing: bool = True
    master_fp32: bool = True
    lora_r: int = 0  # > 0: LoRA adapters on a frozen bfloat16 base, trained in the driver
    learner_workers: int = 0
    fsdp: bool = False
    engines_in_actors: bool = False  # runtime.ray: each engine replica on GPUs of its own
    engine_replicas: int = 1
    tp: int = 1
    util: float = 0.3
    sleep: bool = False
    note: str = ""  # what a variant changed, for its label

    @property
    def ranks(self) -> int:
        return max(1, self.learner_workers)

    def rows(self) -> int:
        """Rows one policy trains on per step (every role step of every episode, K candidates)."""
        return self.batch * self.samples * self.turns * self.roles_per_policy

    def optimizer_steps(self) -> int:
        size = self.mini_batch_size or self.rows()
        return math.ceil(self.rows() / size) * self.ppo_epochs


@dataclass
class GpuLoad:
    """One kind of GPU in a recipe: what it holds (bytes) in the rollout and in the update."""

    what: str
    count: int
    parts: dict[str, float]  # item -> bytes at the update's peak
    rollout: float
    update: float

    @property
    def peak(self) -> float:
        return max(self.rollout, self.update)


@dataclass
class Plan:
    model: ModelDims
    recipe: Recipe
    gpus: list[GpuLoad]  # GPUs of their own; a driver GPU shared with a Ray piece has count 0
    kv_needed: float  # bytes of KV cache per engine GPU for one tick's sequences
    kv_pool: float  # bytes an engine GPU has for the KV cache
    comm: dict[str, float]  # bytes per training step, per policy
    host: dict[str, float] = field(default_factory=dict)  # host RAM per learner rank (learner workers)

    @property
    def gpus_used(self) -> int:
        return sum(g.count for g in self.gpus)

    def worst(self) -> float:
        """The fullest GPU; a driver GPU that Ray also uses (count 0) adds to the fullest other."""
        shared = sum(g.peak for g in self.gpus if g.count == 0)
        return max(g.peak + (shared if g.count else 0.0) for g in self.gpus)

    def problems(self) -> list[str]:
        """Why the recipe cannot run with this model (empty when it can)."""
        hw, out = self.recipe.hardware, []
        if self.gpus_used > hw.gpus_per_node * hw.nodes:
            out.append(f"needs {self.gpus_used} GPUs, has {hw.gpus_per_node * hw.nodes}")
        if self.worst() > hw.gpu_gib * GIB:
            out.append(f"needs {self.worst() / GIB:.1f} GiB on one GPU, has {hw.gpu_gib:g}")
        return out

    def kv_share(self) -> float:
        """The share of one tick's sequences (at the longest) the KV pool holds at once; vLLM queues the rest."""
        return min(1.0, max(0.0, self.kv_pool) / self.kv_needed) if self.kv_needed else 1.0


def learner_parts(m: ModelDims, r: Recipe) -> dict[str, float]:
    """Bytes on one learner rank at the update's peak, by item."""
    p = m.params()
    if r.lora_r:
        a = m.lora_params(r.lora_r)
        parts = {"weights": 2.0 * p + 4.0 * a, "grads": 4.0 * a, "AdamW": 8.0 * a, "bf16 copy": 0.0}
    else:
        wb = 4 if r.master_fp32 else 2
        shard = r.ranks if r.fsdp else 1
        parts = {"weights": wb * p / shard, "grads": wb * p / shard, "AdamW": 2 * wb * p / shard,
                 "bf16 copy": 2.0 * m.linear_params() if r.master_fp32 else 0.0}
        if r.fsdp:  # the root unit all along, the running layer and the prefetched one; their gradients
            parts["FSDP gathered"] = parts["FSDP unsharded grads"] = wb * (m.root_params() + 2.0 * m.layer_params())
    parts["activations"] = activation_bytes(m, r)
    return parts


def activation_bytes(m: ModelDims, r: Recipe) -> float:
    """One micro-batch's activations at its peak (see the module docstring for the terms)."""
    seq = r.prompt_tokens + r.response_tokens
    tokens = max(r.micro_batch_tokens, seq)  # a row longer than the budget runs alone
    scored = tokens * r.response_tokens / seq
    master = r.master_fp32 and not r.lora_r
    layer = m.layer_activation_bytes(tokens, master)
    if r.gradient_checkpointing:  # each layer's input kept, one layer recomputed at a time
        body = m.layers * (4 if master else 2) * m.hidden * tokens + layer
    else:
        body = m.layers * layer
    return body + 12.0 * min(LOGIT_CHUNK_ELEMENTS_GPU, m.vocab * scored) + 4.0 * scored


def plan(m: ModelDims, r: Recipe) -> Plan:
    """Memory per GPU and traffic per step of recipe `r` for model `m`.

    >>> p = plan(QWEN3_1_7B, Recipe("one GPU", sleep=True, util=0.35))
    >>> [(g.what, round(g.rollout / GIB, 1), round(g.update / GIB, 1)) for g in p.gpus]
    [('driver: learner + engine', 47.2, 36.0)]
    """
    learner = learner_parts(m, r)
    keep = learner["weights"] + learner["AdamW"]  # between updates (gradients are freed)
    step = sum(learner.values())
    engine = r.util * r.hardware.gpu_gib * GIB
    copies = 1 if r.lora_r else r.policies  # model copies: LoRA adapters share one base
    in_actors = r.engines_in_actors and not r.lora_r
    gpus = []
    if r.learner_workers:
        gpus.append(GpuLoad("learner rank", r.policies * r.ranks, learner, keep, step))
        # the driver keeps every trained policy's weights (engine sync, checkpoints) on its cuda:0
        weights: float = m.params() * (4 if r.master_fp32 else 2) * r.policies
        what, parts, rollout, update = "driver: weights", {"driver's weights": weights}, weights, weights
    else:
        what, parts = "driver: learner", dict(learner)
        if copies > 1:
            parts["other policies"] = keep * (copies - 1)
        rollout, update = keep * copies, step + keep * (copies - 1)
    if not in_actors:  # the engines run in the driver, on its GPU
        what += " + engine"
        parts["engine (asleep)" if r.sleep else "engine"] = 0.0 if r.sleep else engine * copies
        rollout += engine * copies
        update += 0.0 if r.sleep else engine * copies
    own = not (r.learner_workers and in_actors) or r.hardware.driver_gpu  # else it shares a Ray GPU
    gpus.insert(0, GpuLoad(what, 1 if own else 0, parts, rollout, update))
    if in_actors:
        gpus.append(GpuLoad("vLLM engine", r.policies * r.engine_replicas * r.tp, {"engine": engine}, engine, engine))
    concurrent = r.batch * r.samples * r.parallel_roles / (r.engine_replicas if in_actors else 1)
    kv_needed = concurrent * (r.prompt_tokens + r.response_tokens) * m.kv_bytes_per_token() / r.tp
    return Plan(m, r, gpus, kv_needed, engine - 2.0 * m.params() / r.tp, communication(m, r), host_parts(m, r))


def host_parts(m: ModelDims, r: Recipe) -> dict[str, float]:
    """Host RAM of a learner rank: the whole AdamW state before and after the update; rank 0's new weights."""
    wb, p = (4 if r.master_fp32 else 2), m.params()
    return {"AdamW copies": 2 * 2 * wb * p, "rank 0: new weights": (wb + (2 if r.master_fp32 else 0)) * p
            } if r.learner_workers else {}


def communication(m: ModelDims, r: Recipe) -> dict[str, float]:
    """Bytes per training step, per policy (each rank sends and receives about this much).

    - DDP gradient all-reduce (ring): 2 x gradient bytes x (N-1)/N per rank per optimizer step;
    - FSDP (one unit per layer; counted on the tiny model): per micro-batch (as many on every
      rank as on the busiest) the forward gathers the root and each layer, the backward each layer
      again, then each unit's gradient is reduce-scattered once; without gradient checkpointing
      the layers are gathered twice each way (the shared-prompt forward's two calls). The old
      log-probs' forward gathers once more; after the update every rank gathers the new weights
      and the AdamW state whole. Each (N-1)/N of the full size per rank;
    - weights rank 0 -> driver, driver -> each engine in bfloat16; the AdamW state to the host.
    """
    p, n, wb = m.params(), r.ranks, (4 if r.master_fp32 else 2)
    trained = m.lora_params(r.lora_r) if r.lora_r else p
    out: dict[str, float] = {}
    ring = (n - 1) / n
    if r.learner_workers and r.fsdp:
        seq = r.prompt_tokens + r.response_tokens
        per_micro = max(1, r.micro_batch_tokens // seq)
        micro = math.ceil(math.ceil(r.mini_batch_size / n) / per_micro)  # per optimizer step, every rank
        calls, root, layers = 1 if r.gradient_checkpointing else 2, m.root_params(), m.layers * m.layer_params()
        old = math.ceil(r.rows() / (r.mini_batch_size or r.rows())) * micro  # the old log-probs' forward
        gathered = r.optimizer_steps() * micro * (root + 2 * calls * layers) + old * (root + calls * layers)
        out["FSDP all-gather per rank"] = gathered * wb * ring
        out["FSDP reduce-scatter per rank"] = r.optimizer_steps() * micro * wb * p * ring
        out["FSDP gather of weights and AdamW per rank"] = 3 * wb * p * ring
    elif r.learner_workers:
        out["DDP all-reduce per rank"] = r.optimizer_steps() * 2 * wb * trained * ring
    if r.learner_workers:
        out["weights rank 0 -> driver"] = wb * p
        out["AdamW to host per rank"] = 2 * wb * p
    out["weights driver -> engines"] = 2.0 * (trained if r.lora_r else p) * r.engine_replicas
    return out


def recipe_from_plan(name: str, plan: RunPlan, hardware: Hardware) -> Recipe:
    """A `Recipe` from a run plan (`masdsl.plan.run_plan.resolve_run`) of the `Workflow` it runs."""
    specs, workflow = plan.policies, plan.workflow
    roles = {p.policy: p.roles for p in plan.placement.policies if p.trainable}
    trained = list(roles)
    groups = [tuple(d.get("roles", ())) for _, d in workflow.graph.nodes(data=True)]
    parallel = max(max(sum(1 for x in g if x in rs) for g in groups) for rs in roles.values())
    longest = max(plan.max_tokens(x) for rs in roles.values() for x in rs)
    lora = [specs[n].lora_settings.r for n in trained if specs[n].lora]  # type: ignore[union-attr]  # .lora: settings
    tc, rt = plan.train, plan.runtime
    return Recipe(
        name, hardware, policies=len(trained), roles_per_policy=max(len(rs) for rs in roles.values()),
        parallel_roles=parallel, turns=workflow.max_turns or 1, batch=tc.batch,
        samples=max(plan.samples[x].samples or tc.samples for x in workflow.roles),
        prompt_tokens=rt.max_prompt_tokens, response_tokens=longest, mini_batch_size=tc.mini_batch_size,
        ppo_epochs=tc.ppo_epochs, micro_batch_tokens=tc.micro_batch_tokens,
        gradient_checkpointing=tc.gradient_checkpointing,
        master_fp32=tc.master_weights == "float32" or rt.dtype == "float32", lora_r=max(lora, default=0),
        learner_workers=rt.learner_workers, fsdp=rt.learner_fsdp, engines_in_actors=rt.ray,
        engine_replicas=rt.engine_replicas, tp=rt.vllm_tensor_parallel_size,
        util=rt.vllm_gpu_memory_utilization, sleep=rt.vllm_sleep_mode,
    )


def variant(r: Recipe, **changes: Any) -> Recipe:
    """`r` with some knobs changed (e.g. `lora_r=16` for an 8B model on one GPU)."""
    return replace(r, **changes)


# The shipped recipes: config file, the workflow its command runs, the machines it is sized for
RECIPES = {
    "gpu_1": ("configs/gpu_1.yaml", "workflows/plan_path.mas", Hardware(1, 1)),
    "gpu_8": ("configs/gpu_8.yaml", "workflows/plan_path_per_role.mas", Hardware(8, 1)),
    "gpu_2x8": ("configs/gpu_2x8.yaml", "workflows/plan_path_per_role.mas", Hardware(8, 2, driver_gpu=True)),
}
HEADER_BEGIN = "# --- computed plan (masdsl.plan.gpu_plan; rewrite: python benchmarks/gpu_plan.py --write) ---"
HEADER_END = "# --- end of computed plan ---"


def gib(x: float) -> str:
    return f"{x / GIB:.1f}"


def label(p: Plan) -> str:
    return p.model.name + p.recipe.note


def recipe_plans(r: Recipe) -> list[Plan]:
    """What a recipe's header shows: each model; on one GPU also no sleep mode, and 8B with LoRA."""
    plans = [plan(m, r) for m in MODELS]
    if r.hardware.gpus_per_node * r.hardware.nodes == 1:
        plans.insert(1, plan(QWEN3_1_7B, variant(r, sleep=False, note=", no sleep mode")))
        plans.append(plan(QWEN3_8B, variant(r, lora_r=16, note=" + LoRA r=16")))
    return plans


def header_lines(p: Plan) -> list[str]:
    """The plan as the comment lines of a recipe's header (tests compare them with the file).

    >>> header_lines(plan(QWEN3_1_7B, Recipe("x", sleep=True, util=0.6)))[0]
    '#   Qwen3-1.7B: fits: fullest GPU 67.2 GiB of 80 (1 GPU used of 1)'
    """
    hw, bad = p.recipe.hardware, p.problems()
    used = f"{p.gpus_used} GPU{'s' if p.gpus_used != 1 else ''} used of {hw.gpus_per_node * hw.nodes}"
    verdict = "DOES NOT FIT: " + "; ".join(bad) if bad else "fits"
    out = [f"#   {label(p)}: {verdict}: "
           f"fullest GPU {gib(p.worst())} GiB of {hw.gpu_gib:g} ({used})"]
    for g in p.gpus:
        where = f"x{g.count}" if g.count else "on a Ray GPU"
        parts = ", ".join(f"{k} {gib(v)}" for k, v in g.parts.items())
        out.append(f"#     {g.what} {where}: rollout {gib(g.rollout)}, update {gib(g.update)} GiB ({parts})")
    out.append(f"#     KV cache per engine GPU: {gib(p.kv_needed)} GiB for one tick's sequences at the longest, "
               f"pool {gib(p.kv_pool)} GiB ({p.kv_share():.0%} at once)")
    out.append("#     per step and policy: " + ", ".join(f"{k} {gib(v)} GiB" for k, v in p.comm.items()))
    if p.host:
        out.append("#     host RAM per learner rank: " + ", ".join(f"{k} {gib(v)} GiB" for k, v in p.host.items()))
    return out
