"""The models a `model:` value names, on the ground floor: it imports only `masdsl.errors`.

- `names`: what a `model:` value names (a built-in, a folder, a hub id), looked up without
  loading anything; the run plan and `masdsl check` ask it;
- `load`: where the weights come from (a built-in's one-time conversion, a folder, the hub) and
  loading them, for the runtime's engines and the learner's policies alike.

It sits below every other package so that the plan can name a model and the runtime and the
learner can load one without either reaching through the other (or through the plan).
"""
