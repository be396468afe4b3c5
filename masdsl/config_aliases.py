"""What other RL libraries call masdsl's config keys, for the hint of an unknown key.

Spelling distance alone gives the wrong hint for a name carried over from TRL, verl or OpenRLHF
(`train.learning_rate` is closest to `train.eval_temperature`), so `ecosystem_hint` is asked
first: it knows those libraries' names (`learning_rate`, `num_generations`, `beta`, verl's
`actor_rollout_ref.actor.optim.lr`, ...) and the masdsl key that does the same job, with a note
where the two differ in what they count. Every target is a key of `masdsl.config_schema`
(tests/test_config_aliases.py checks it); `sample.*.<key>` and `policy.*.<key>` stand for the
per-role and per-policy sections.

>>> ecosystem_hint("train.learning_rate")
"TRL's name; masdsl calls it `train.lr`"
>>> ecosystem_hint("actor_rollout_ref.rollout.n")
"verl's name; masdsl calls it `train.samples`"
>>> ecosystem_hint("runtime.seed"), ecosystem_hint("train.sampels")
("masdsl's `seed` is `train.seed`", None)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import lru_cache

from masdsl.config_schema import ADVANTAGES, DEFAULT_ADVANTAGE, GROUPINGS, NAMED_SECTIONS, Config


@dataclass(frozen=True)
class Alias:
    """Another library's name for a masdsl key: `libraries` say whose (`TRL`, `verl`, ...),
    `target` is the masdsl key ("": no key does its job, `note` says what does), `note` how they
    differ (empty when they do the same)."""

    libraries: tuple[str, ...]
    target: str
    note: str = ""


_ROWS_PER_STEP = "masdsl counts candidate replies (rows) per optimizer step"
_TASKS = "masdsl counts tasks per step, each sampled `train.samples` times per role turn"
_STEPS = "masdsl counts steps, each of `train.batch` tasks"
_ESTIMATOR = (f"each role names its estimator in the `.mas` file, `advantage NAME` in the role ({', '.join(ADVANTAGES)}; "
              f"{DEFAULT_ADVANTAGE} without the line), and `train.grouping` forms the groups ({', '.join(GROUPINGS)})")
_KL_IN_REWARD = ("verl puts this KL into the reward; masdsl's `train.kl_coef` weighs a KL loss term, like verl's "
                 "`actor_rollout_ref.actor.kl_loss_coef`")
_ACCUMULATE = ("masdsl accumulates gradients by itself: `train.mini_batch_size` sets the rows per optimizer step, "
               "`train.micro_batch_tokens` the tokens per forward/backward")
_LORA = "a mapping, e.g. `policy.shared.lora={r: 16, alpha: 32}`"
_LOGGED = "masdsl logs every step's metrics (MLflow and the terminal); `train.eval_every` sets the steps between evaluations"
_CONSTANT_LR = "masdsl's learning rate is constant: `train.lr`, or a policy's own `lr`"

# (names, libraries, target, note): names and libraries separated by spaces and commas; a name is
# bare (`learning_rate`) or a full dotted path (verl's). Names masdsl uses too (`temperature`,
# `seed`) are not here: `ecosystem_hint` finds them in the schema, in their own section.
_ROWS: tuple[tuple[str, str, str, str], ...] = (
    ("learning_rate", "TRL", "train.lr", ""),
    ("async", "", "train.async_rollout", "`async` is a Python keyword; 1 is one-step off-policy"),
    ("actor_learning_rate", "OpenRLHF", "train.lr", ""),
    ("actor_rollout_ref.actor.optim.lr", "verl", "train.lr", ""),
    ("num_generations", "TRL", "train.samples", ""),
    ("n_samples_per_prompt", "OpenRLHF", "train.samples", ""),
    ("actor_rollout_ref.rollout.n", "verl", "train.samples", ""),
    ("num_return_sequences", "transformers", "train.samples", ""),
    ("group_size", "", "train.samples", ""),
    ("beta", "TRL", "train.kl_coef", ""),
    ("kl kl_beta kl_coeff", "", "train.kl_coef", ""),
    ("init_kl_coef", "OpenRLHF", "train.kl_coef", ""),
    ("use_kl_loss", "OpenRLHF", "train.kl_coef", "the KL term is on when `train.kl_coef` > 0"),
    ("actor_rollout_ref.actor.kl_loss_coef", "verl", "train.kl_coef", ""),
    ("actor_rollout_ref.actor.use_kl_loss", "verl", "train.kl_coef", "the KL term is on when `train.kl_coef` > 0"),
    ("algorithm.kl_ctrl.kl_coef", "verl", "train.kl_coef", _KL_IN_REWARD),
    ("max_completion_length", "TRL", "sample.*.max_tokens", ""),
    ("generate_max_len", "OpenRLHF", "sample.*.max_tokens", ""),
    ("max_new_tokens", "transformers", "sample.*.max_tokens", ""),
    ("data.max_response_length actor_rollout_ref.rollout.response_length", "verl", "sample.*.max_tokens", ""),
    ("max_prompt_length", "TRL", "runtime.max_prompt_tokens", ""),
    ("prompt_max_len", "OpenRLHF", "runtime.max_prompt_tokens", ""),
    ("data.max_prompt_length", "verl", "runtime.max_prompt_tokens", ""),
    ("actor_rollout_ref.rollout.temperature", "verl", "sample.*.temperature", ""),
    ("actor_rollout_ref.rollout.top_p", "verl", "sample.*.top_p", ""),
    ("actor_rollout_ref.rollout.top_k", "verl", "sample.*.top_k", ""),
    ("per_device_train_batch_size", "TRL", "train.batch", "TRL counts completions per device; " + _TASKS),
    ("rollout_batch_size", "OpenRLHF", "train.batch", ""),
    ("data.train_batch_size", "verl", "train.batch", ""),
    ("batch_size", "", "train.batch", _TASKS),
    ("train_batch_size", "OpenRLHF", "train.mini_batch_size", _ROWS_PER_STEP),
    ("actor_rollout_ref.actor.ppo_mini_batch_size", "verl", "train.mini_batch_size",
     "verl counts prompts; " + _ROWS_PER_STEP),
    ("gradient_accumulation_steps", "TRL", "train.mini_batch_size", _ACCUMULATE),
    ("trainer.accumulate_grad_batches", "PyTorch Lightning", "train.mini_batch_size", _ACCUMULATE),
    ("actor_rollout_ref.actor.ppo_max_token_len_per_gpu", "verl", "train.micro_batch_tokens", ""),
    ("max_steps", "TRL", "train.steps", ""),
    ("num_train_epochs", "TRL", "train.steps", _STEPS),
    ("num_episodes", "OpenRLHF", "train.steps", _STEPS),
    ("trainer.total_training_steps", "verl", "train.steps", ""),
    ("trainer.max_steps", "PyTorch Lightning", "train.steps", ""),
    ("trainer.total_epochs", "verl", "train.steps", _STEPS),
    ("trainer.max_epochs", "PyTorch Lightning", "train.steps", _STEPS),
    ("epsilon clip_range", "TRL", "train.clip_eps", ""),
    ("eps_clip", "OpenRLHF", "train.clip_eps", ""),
    ("actor_rollout_ref.actor.clip_ratio", "verl", "train.clip_eps", ""),
    ("epsilon_high", "TRL", "train.clip_eps", "masdsl clips symmetrically: `train.clip_eps` is both bounds"),
    ("actor_rollout_ref.actor.clip_ratio_c", "verl", "train.dual_clip", ""),
    ("num_iterations", "TRL", "train.ppo_epochs", ""),
    ("max_epochs", "OpenRLHF", "train.ppo_epochs", ""),
    ("actor_rollout_ref.actor.ppo_epochs", "verl", "train.ppo_epochs", ""),
    ("algorithm.adv_estimator", "verl", "", _ESTIMATOR),
    ("advantage_estimator", "OpenRLHF", "", _ESTIMATOR),
    ("loss_type", "TRL", "train.loss", ""),
    ("max_norm", "OpenRLHF", "train.max_grad_norm", ""),
    ("actor_rollout_ref.actor.grad_clip", "verl", "train.max_grad_norm", ""),
    ("trainer.gradient_clip_val", "PyTorch Lightning", "train.max_grad_norm", ""),
    ("l2", "OpenRLHF", "train.weight_decay", ""),
    ("actor_rollout_ref.actor.optim.weight_decay", "verl", "train.weight_decay", ""),
    ("actor_rollout_ref.model.enable_gradient_checkpointing", "verl", "train.gradient_checkpointing", ""),
    ("eval_steps", "TRL,OpenRLHF", "train.eval_every", ""),
    ("logging_steps", "TRL,OpenRLHF", "", _LOGGED),
    ("warmup_steps warmup_ratio lr_scheduler_type", "TRL", "", _CONSTANT_LR),
    ("lr_warmup_ratio", "OpenRLHF", "", _CONSTANT_LR),
    ("actor_rollout_ref.actor.optim.lr_warmup_steps actor_rollout_ref.actor.optim.lr_warmup_steps_ratio", "verl", "",
     _CONSTANT_LR),
    ("scale_rewards", "TRL", "", "`scale_rewards=false` is `advantage drgrpo` in a role of the `.mas` file (no division "
     "by the group's std); " + _ESTIMATOR),
    ("trainer.test_freq", "verl", "train.eval_every", ""),
    ("trainer.val_check_interval", "PyTorch Lightning", "train.eval_every", ""),
    ("save_steps", "TRL,OpenRLHF", "train.checkpoint_every", ""),
    ("trainer.save_freq", "verl", "train.checkpoint_every", ""),
    ("data.seed", "verl", "train.seed", ""),
    ("output_dir", "TRL", "runtime.runs_dir", ""),
    ("save_path ckpt_path", "OpenRLHF", "runtime.runs_dir", ""),
    ("trainer.default_local_dir", "verl", "runtime.runs_dir", ""),
    ("hydra.run.dir", "Hydra", "runtime.runs_dir", ""),
    ("use_vllm", "TRL", "runtime.engine", "`runtime.engine=vllm`"),
    ("vllm_mode", "TRL", "runtime.engine", "`runtime.engine=vllm`"),
    ("actor_rollout_ref.rollout.name", "verl", "runtime.engine", ""),
    ("actor_rollout_ref.rollout.gpu_memory_utilization", "verl", "runtime.vllm_gpu_memory_utilization", ""),
    ("actor_rollout_ref.rollout.tensor_model_parallel_size", "verl", "runtime.vllm_tensor_parallel_size", ""),
    ("bf16", "TRL", "runtime.dtype", "`runtime.dtype=bfloat16`"),
    ("trainer.precision", "PyTorch Lightning", "runtime.dtype", ""),
    ("report_to", "TRL", "tracking.enabled", "masdsl logs to MLflow; `tracking.enabled=false` turns it off"),
    ("trainer.logger", "verl", "tracking.enabled", "masdsl logs to MLflow; `tracking.enabled=false` turns it off"),
    ("trainer.project_name", "verl", "tracking.experiment", ""),
    ("model_name_or_path", "TRL", "policy.*.model", ""),
    ("pretrain", "OpenRLHF", "policy.*.model", ""),
    ("actor_rollout_ref.model.path", "verl", "policy.*.model", ""),
    ("lora_r use_peft", "TRL", "policy.*.lora", _LORA),
    ("lora_rank", "OpenRLHF", "policy.*.lora", _LORA),
    ("actor_rollout_ref.model.lora_rank", "verl", "policy.*.lora", _LORA),
)


@lru_cache(maxsize=1)
def aliases() -> dict[str, Alias]:
    """Another library's name (bare or dotted) -> its `Alias`."""
    out = {}
    for names, libraries, target, note in _ROWS:
        for name in names.split():
            out[name] = Alias(tuple(libraries.split(",")) if libraries else (), target, note)
    return out


@lru_cache(maxsize=1)
def schema_keys() -> dict[str, str]:
    """Each key name of the schema -> its dotted key (`lr` -> `train.lr`, `max_tokens` ->
    `sample.*.max_tokens`); the sections' names themselves are left out."""
    out: dict[str, str] = {}
    for section in dataclasses.fields(Config):
        if section.name in NAMED_SECTIONS:
            fields = dataclasses.fields(NAMED_SECTIONS[section.name])
            out.update({f.name: f"{section.name}.*.{f.name}" for f in fields if f.name not in out})
        else:
            out.update({f.name: f"{section.name}.{f.name}" for f in dataclasses.fields(section.default_factory())
                        if f.name not in out})
    return out


def _whose(libraries: tuple[str, ...]) -> str:
    """`TRL's name`, `TRL's and OpenRLHF's name`, `a common name`."""
    if not libraries:
        return "a common name"
    owners = [f"{lib}'s" for lib in libraries]
    return (" and ".join(owners) if len(owners) < 3 else ", ".join(owners[:-1]) + " and " + owners[-1]) + " name"


def _split(key: str) -> tuple[str, str]:
    """(the masdsl section part, the rest) of an unknown key: `train.` / `sample.coder.` /
    `policy.p.` and what follows; ("", key) when the key starts elsewhere."""
    parts = key.split(".")
    if parts[0] in NAMED_SECTIONS and len(parts) >= 3:
        return ".".join(parts[:2]), ".".join(parts[2:])
    if parts[0] in {f.name for f in dataclasses.fields(Config)} and len(parts) >= 2:
        return parts[0], ".".join(parts[1:])
    return "", key


def _shown(target: str, section: str) -> str:
    """`target` as the user would write it: `sample.*.x` in the role's own section when the
    unknown key was under one (`sample.coder.x`), else with the YAML-safe `"*"` and its forms."""
    head, _, rest = target.partition(".*.")
    if not rest:
        return f"`{target}`"
    if section.split(".")[0] == head:
        return f"`{section}.{rest}`"
    what, name, block = (("role", "role", "a role's `sample { }` block") if head == "sample"
                         else ("policy", "name", "a `policy { }` block"))
    return f'`{head}."*".{rest}` for every {what}, `{head}.<{name}>.{rest}` for one, `{rest}` in {block} of the `.mas` file'


def _in_section(target: str, section: str) -> str:
    """`target` moved into the per-role or per-policy section the key was written under, when that
    section has a key of the same name (`policy.shared.learning_rate` -> `policy.*.lr`, the
    policy's own rate, rather than `train.lr`); else `target`."""
    head, leaf = section.split(".")[0], target.rsplit(".", 1)[-1]
    if "." in section and head in NAMED_SECTIONS and leaf in {f.name for f in dataclasses.fields(NAMED_SECTIONS[head])}:
        return f"{head}.*.{leaf}"
    return target


def ecosystem_hint(key: str) -> str | None:
    """Why an unknown dotted `key` is probably another library's name (or a masdsl name in the
    wrong section), and the masdsl key to use; None when it is neither (ask the spelling).

    >>> ecosystem_hint("sample.coder.max_completion_length")
    "TRL's name; masdsl calls it `sample.coder.max_tokens`"
    >>> ecosystem_hint("policy.shared.learning_rate"), ecosystem_hint("train.kl")
    ("TRL's name; masdsl calls it `policy.shared.lr`", 'a common name; masdsl calls it `train.kl_coef`')
    >>> print(ecosystem_hint("train.temperature"))
    masdsl's `temperature` is `sample."*".temperature` for every role, `sample.<role>.temperature` for one, `temperature` in a role's `sample { }` block of the `.mas` file
    """
    section, rest = _split(key)
    alias = aliases().get(key) or aliases().get(rest)
    if alias is not None and not alias.target:
        return f"{_whose(alias.libraries)}; no masdsl config key: {alias.note}"
    if alias is not None:
        note = f": {alias.note}" if alias.note else ""
        return f"{_whose(alias.libraries)}; masdsl calls it {_shown(_in_section(alias.target, section), section)}{note}"
    target = schema_keys().get(rest)
    if target is not None and "." not in rest:  # a masdsl name in another section than its own
        return f"masdsl's `{rest}` is {_shown(target, section)}"
    return None
