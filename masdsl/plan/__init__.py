"""The plan: what a command will run, decided once, before any model loads.

- `run_plan`: `resolve_run` / `resolve_rollout` turn a workflow and its config into a `RunPlan`,
  or one `RunPlanError` that lists every problem;
- `placement`: where each policy's engines and learner go (Ray or not, GPUs, replay, LoRA sharing);
- `gpu_plan`: the GPU memory a plan needs, per device, before anything is allocated;
- `inputs`: a workflow's env (under the plan's sandbox limits) and its task splits;
- `schedule`: at which steps each policy trains; `probes`: whether an eval probe fits the env;
- `model_names`: what a `model:` value names, without loading anything; `models`: where the
  weights come from (a built-in's conversion, a folder, the hub) and loading them, for the
  runtime's engines and the learner's policies alike.

The runtime and the learner execute the plan; nothing here imports them.
"""
