"""Sweeps (`masdsl sweep`): a grid of arms crossed with seeds, run, kept and compared.

- `grid`: the trials and their stable ids; `compare`: each finished trial summarised, the arms
  compared over seeds; `runner`: the trials as Ray tasks, resumable; `parent_run`: the MLflow
  parent run that holds every trial.
"""
