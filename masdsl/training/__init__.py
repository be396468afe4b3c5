"""Training as an application: the loop, its session and recovery, and what runs beside it.

- `trainer.train`: the loop; `step`: one step (rollout, grouping, update); `session`: what a run
  builds once (data, env, weights, engines, optimizers); `recovery`, `checkpoint`, `interrupt`:
  failures, saved steps, Ctrl-C;
- `display`, `loglines`, `metrics`, `skills`: what a run prints and records;
- `evaluation`, `export`, `warm_start`: evaluating, exporting and warm-starting policies;
- `viewpage`, `groupview`: the run's HTML page (`masdsl view`).

The algorithm itself (grouping, advantages, losses, the update) is `masdsl.learner`. Not named
`masdsl.train`: that is the API function (`masdsl.train(...)`), which a subpackage would shadow.
"""
