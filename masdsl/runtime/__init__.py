"""The runtime: walk a compiled workflow for many tasks at once with inference engines.

- `executor.rollout`: the lockstep ticks (`step_requests` renders each role's turn into an
  engine request, `batching` makes one engine batch per engine and tick, `walk` scores the
  candidates, continues the winners and follows the flow's edges; `episodes` holds the state);
- `backends`: the engines behind one `Engine` protocol (`backends.base`): `hf`, `vllm`,
  `replay`, and `build_engine` to pick one; `actors`: worker pools and `RemoteEngine` in Ray;
- `prompts`, `parsing`, `sampling`: templates, parsers, and the scoring of candidates;
- `records`, `rundir`: the step records and the run folder they are written to;
- `inputs`: a workflow's env (under the plan's sandbox limits) and its task splits.
"""
