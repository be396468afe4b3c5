"""What the tests share, imported from here and nowhere else (tests/test_test_tree.py keeps it so).

- `toy`: the toy workflow (tests/support/toy_data: a namer says a hidden digit, a copier repeats it),
  its dense-reward variant, the config that runs it on the tiny model, and short training runs.
- `overrides`: the override lists tests repeat (tracking off, the tiny model on the hf engine).
- `counter`: `CounterEnv` and hand-built workflows for the runtime tests.
- `rollouts`: tests/support/adder/toy.mas sampled through one engine.
- `updates`: hand-made rollouts on a tiny model for the PPO update tests.
- `workers`: the learner-worker comparisons (weights, records, tolerances).
- `exports`: one-step toy runs for export and the checks on exported models.
- `engines`: teacher-forced log-probs and model edits for the engine tests.
- `tracking`: a real `mlflow server` and readers of what a run tracked.
- `fuzz`: the mutation fuzzer's seeds, strategy and timer.
"""
