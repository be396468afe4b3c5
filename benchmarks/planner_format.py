"""How often the embedded model's plan_path planner writes a move list at all, by temperature.

    .venv/bin/python benchmarks/planner_format.py [--temperatures 1.0 0.7] [--boards 6] [--k 8] [--size 5]

Renders the planner prompt of workflows/plan_path_single.mas (turn 0) on generated boards, samples
K responses per board with the hf engine (SmolLM2-135M-Instruct, float32) and counts the responses
`actions(output)` parses. A response that parses is the precondition of any reward other than the
-2 "no action" penalty, so this rate bounds how many groups can differ before any training.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--temperatures", type=float, nargs="+", default=[1.0, 0.7])
    ap.add_argument("--boards", type=int, default=6)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--size", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=40)
    args = ap.parse_args()

    import masdsl
    from masdsl.envs.parsers import actions
    from masdsl.runtime.backends import hf_engine_on
    from masdsl.runtime.backends.base import GenRequest
    from masdsl.models.load import load_model, resolve_model
    from masdsl.config import resolve_config
    from masdsl.runtime.prompts import encode, messages_for, prompt_variables
    from masdsl.runtime.inputs import prepare

    text = (ROOT / "workflows" / "plan_path_single.mas").read_text()
    text = text.replace('plan_path("train", n=64)', f'plan_path("train", n={args.boards}, size={args.size})')
    wf = masdsl.loads(text, name="planner_format", base_dir=ROOT / "workflows")
    cfg = resolve_config(wf.train, overrides=["tracking.enabled=false"])
    env, data = prepare(wf, cfg.sandbox)
    model, tok = load_model(str(resolve_model("smollm2-135m-instruct")))
    engine = hf_engine_on(model, tok, seed=0)
    role = wf.roles["planner"]
    prompts = []
    for task in data["train"][: args.boards]:
        variables = prompt_variables(task, env.view(env.reset(task)), 0, "planner", {}, [])
        messages = messages_for(role.prompt, role.system, variables, "planner prompt")
        prompts.append(encode(tok, messages, max_tokens=cfg.runtime.max_prompt_tokens)[0])
    for t in args.temperatures:
        reqs = [GenRequest(prompt_ids=p, n=args.k, temperature=t, max_tokens=args.max_tokens, seed=i)
                for i, p in enumerate(prompts)]
        texts = [c.text for cands in engine.generate(reqs) for c in cands]
        ok = sum(actions(x) is not None for x in texts)
        print(f"temperature {t}: {ok}/{len(texts)} responses parse as a move list ({100 * ok / len(texts):.0f} %)",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
