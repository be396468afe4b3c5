"""The plan: what a command will run, decided once, before any model loads.

- `run_plan`: `resolve_run` / `resolve_rollout` turn a workflow and its config into a `RunPlan`,
  or one `RunPlanError` that lists every problem;
- `placement`: where each policy's engines and learner go (Ray or not, GPUs, replay, LoRA sharing);
- `gpu_plan`: the GPU memory a plan needs, per device, before anything is allocated;
- `schedule`: at which steps each policy trains; `probes`: whether an eval probe fits the env;
- `old_logprobs`, `logit_budget`: where an update's old log-probs come from, and the logits'
  memory budget.

The plan decides and executes nothing: what a `model:` value names it asks `masdsl.models.names`
(loading is `masdsl.models.load`), and a workflow's env and tasks are built by the runtime
(`masdsl.runtime.inputs`). The runtime and the learner execute the plan; nothing here imports
them, nor torch, transformers, vllm, ray or `masdsl.envs` (tests/test_architecture.py checks).
"""
