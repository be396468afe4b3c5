"""The plan: what a command will run, decided once, before any model loads.

- `run_plan`: `resolve_run` / `resolve_rollout` turn a workflow and its config into a `RunPlan`,
  or one `RunPlanError` that lists every problem;
- `placement`: where each policy's engines and learner go (Ray or not, GPUs, replay, LoRA sharing);
- `gpu_plan`: the GPU memory a plan needs, per device, before anything is allocated;
- `schedule`: at which steps each policy trains; `probes`: whether an eval probe fits the env;
- `model_names`: what a `model:` value names (`masdsl.runtime.models` loads it).

The runtime and the learner execute the plan; nothing here imports them.
"""
