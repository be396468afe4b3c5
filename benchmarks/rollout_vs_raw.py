"""One training step's rollout of a workflow, through the engine a run builds, against the raw
`vllm.LLM.generate` on the same prompts in the same batches (issue 46: the rollout at or above raw
vLLM's tokens per second at the same batch).

    .venv/bin/python benchmarks/rollout_vs_raw.py workflows/math_arith_check.mas --config configs/first_run.yaml \
        [--tasks 8] [--repeats 2] [KEY=VALUE ...] [--json benchmarks/results/rollout_vs_raw.json]

The executor (`masdsl.runtime.executor.rollout`, training mode, K = `train.samples`) runs
`--tasks` training problems; each of its ticks is one `generate` call (a role step of every
episode), with the sandbox and the parsers between the ticks. Each call's requests are recorded,
and the raw engine then runs exactly those calls, one `LLM.generate` each, in order, with the
very `SamplingParams` the engine builds (the same seeds, so the same tokens): the same batches,
so the ratio is the executor's tokens per second (generation, parsing, sandboxed scoring,
bookkeeping) over what the engine alone gives on the same work. Every timed run starts with an empty prefix cache; the two alternate,
`--repeats` times each (the machine's load drifts), and the best of each is reported.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rollout import Clock, cold  # noqa: E402  (a script beside this one)


class Recorder:
    """An engine's `generate`, recording each call's requests (the executor's ticks, in order)."""

    def __init__(self, engine) -> None:
        self.engine, self.calls = engine, []

    def __enter__(self) -> "Recorder":
        self.inner = self.engine.generate

        def generate(requests, *args, **kwargs):
            self.calls.append(list(requests))
            return self.inner(requests, *args, **kwargs)

        self.engine.generate = generate
        return self

    def __exit__(self, *exc) -> None:
        del self.engine.generate  # the class's method again


def raw_same_calls(engine, calls) -> tuple[int, float, float]:
    """The raw `LLM.generate` on each recorded call, with the very `SamplingParams` the engine
    builds from it (same seeds: the same tokens): (tokens, seconds, CPU seconds)."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from masdsl.runtime.backends.vllm.engine import sampling_params

    tokens, wall, cpu = 0, 0.0, 0.0
    cold(engine)  # once, as the rollout: a later tick may reuse an earlier tick's prefix in both
    for requests in calls:
        prompts = [TokensPrompt(prompt_token_ids=list(r.prompt_ids)) for r in requests]
        params = [SamplingParams(**sampling_params(r, r.seed)) for r in requests]
        with Clock() as c:
            outs = engine.llm.generate(prompts, params, use_tqdm=False)
        tokens += sum(len(o.token_ids) for ro in outs for o in ro.outputs)
        wall, cpu = wall + c.wall, cpu + c.cpu
    return tokens, wall, cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workflow")
    ap.add_argument("overrides", nargs="*", help="KEY=VALUE, as on masdsl's command line")
    ap.add_argument("--config", action="append", default=[])
    ap.add_argument("--tasks", type=int, default=8, help="training problems in the step (train.batch's default 8)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json", default="benchmarks/results/rollout_vs_raw.json")
    args = ap.parse_args()

    import masdsl
    from masdsl.config import resolve_config
    from masdsl.plan.run_plan import resolve_rollout
    from masdsl.runtime.engine_factory import build_engines, close_engines
    from masdsl.runtime.executor import rollout
    from masdsl.runtime.inputs import prepare

    wf = masdsl.load(args.workflow)
    cfg = resolve_config(wf.train, args.config or None, overrides=[*args.overrides, "train.seed=0"])
    plan = resolve_rollout(wf, cfg)
    env, splits = prepare(wf, cfg.sandbox)
    tasks = splits["train"][: args.tasks]
    t = time.perf_counter()
    engines = build_engines(plan)
    started = time.perf_counter() - t
    engine = next(iter(engines.values()))
    if getattr(engine, "llm", None) is None:
        raise SystemExit(f"the plan's engine is {type(engine).__name__}: this compares a vLLM engine with its raw self")
    k = cfg.train.samples
    ours, raw = [], []
    try:
        rollout(plan, env, tasks[:1], engines, mode="train", step=0)  # warm-up
        for i in range(args.repeats):
            cold(engine)
            with Recorder(engine) as calls, Clock() as c:
                ro = rollout(plan, env, tasks, engines, mode="train", step=0)
            if any(r.seed is None for call in calls.calls for r in call):
                raise SystemExit("a request without a seed: the raw engine could not sample the same tokens")
            sizes = [sum(r.n for r in call) for call in calls.calls]
            ours.append({"tokens": sum(len(r.response_ids) for r in ro.records), "seconds": c.wall, "cpu": c.cpu,
                         "gen_s": ro.gen_s, "env_s": ro.env_s, "sequences_per_call": sizes})
            tokens, wall, cpu = raw_same_calls(engine, calls.calls)
            raw.append({"tokens": tokens, "seconds": wall, "cpu": cpu})
            print(f"repeat {i}: executor {ours[-1]['tokens']} tok in {c.wall:.1f} s (generate {ro.gen_s:.1f} s, "
                  f"sandbox and parsers {ro.env_s:.1f} s), raw {tokens} tok in {wall:.1f} s; sequences per call {sizes}",
                  flush=True)
    finally:
        close_engines(engines)
    best_ours = max(ours, key=lambda r: r["tokens"] / r["seconds"])
    best_raw = max(raw, key=lambda r: r["tokens"] / r["seconds"])
    result = {
        "workflow": args.workflow, "config": args.config, "overrides": args.overrides, "tasks": len(tasks), "k": k,
        "model": {p: s.model for p, s in plan.policies.items()}, "dtype": cfg.runtime.dtype,
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {platform.processor() or ''} {len(os.sched_getaffinity(0))} CPUs".strip(),
        "load_avg_1m_end": round(os.getloadavg()[0], 2), "engine_start_s": round(started, 1),
        "executor": [{k2: (round(v, 2) if isinstance(v, float) else v) for k2, v in r.items()} for r in ours],
        "raw": [{k2: (round(v, 2) if isinstance(v, float) else v) for k2, v in r.items()} for r in raw],
        "executor_tok_s": round(best_ours["tokens"] / best_ours["seconds"], 1),
        "raw_tok_s": round(best_raw["tokens"] / best_raw["seconds"], 1),
        "command": " ".join(["python", *sys.argv]),
    }
    result["ratio"] = round(result["executor_tok_s"] / result["raw_tok_s"], 3)
    print(json.dumps(result, indent=1))
    out = Path(args.json)
    old = json.loads(out.read_text()) if out.is_file() else []
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps([*old, result], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
