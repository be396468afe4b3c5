"""A short supervised warm start on demonstrations the env generates (a lever of the learning table).

    .venv/bin/python benchmarks/warm_start.py WORKFLOW --roles tool [--tasks 32] [--epochs 1] [--lr 1e-4]
                                              [--model smollm2-135m-instruct] --out runs/warm/NAME

Renders each listed role's turn-0 prompt on the first `--tasks` train tasks, pairs it with the
reply the env's own solver gives (`demonstration(role, task)`: for a plan_path tool with the
planning helper, the three-line program that calls `grid.shortest_path`; for a planner, the
shortest path as a JSON list), and trains the model on the reply tokens with cross-entropy for
`--epochs` passes (AdamW, one demonstration per step). The result is a Hugging Face folder that
every arm of `benchmarks/learning.py` can start from (`--warm-start`), so the arms stay equal.
Deviation from the paper, which starts from the instruct model: at CPU scale the built-in models
never write a tool program that runs (docs/performance.md `## base rates`).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOL_PROGRAM = "```python\nimport sys, json, grid\nboard = sys.stdin.read()\nprint(json.dumps(grid.shortest_path(board)))\n```"


def demonstration(role: str, task: dict) -> str:
    """The reply the env's solver gives for `role` on `task` (plan_path)."""
    from masdsl.envs import plan_path as pp

    if role == "tool":
        return TOOL_PROGRAM
    maze, start = pp.maze_from_task(task)
    return json.dumps(pp.shortest_path(maze, start))


def pairs(workflow, cfg, tokenizer, roles: list[str], tasks: list[dict],
          after_tool: bool | str = False, copy_tasks: int | None = None) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, reply ids) for each role and task, the prompt exactly as a rollout renders it
    at turn 0; with `after_tool` the planner's prompt is the one it sees after the demonstrated
    tool program ran (it shows the printed plan)."""
    from masdsl.envs.parsers import code_block
    from masdsl.runtime.prompts import encode, messages_for, prompt_variables, text_ids
    from masdsl.runtime.session import make_env

    env = make_env(workflow, cfg)
    out = []
    for n, task in enumerate(tasks):
        state = env.reset(task)
        tooled = env.apply(state, "tool", {"code": code_block(TOOL_PROGRAM, "python"), "ok": True}) if after_tool else state
        views = {"tool": [state], "planner": [tooled] if after_tool else [state]}
        if after_tool == "both":  # the planner alone, and (on the first `copy_tasks` tasks) after the tool
            views["planner"] = [state, tooled] if copy_tasks is None or n < copy_tasks else [state]
        for role, view in ((r, env.view(v)) for r in roles for v in views.get(r, [state])):
            spec = workflow.roles[role]
            variables = prompt_variables(task, view, 0, role, {}, [])
            messages = messages_for(spec.prompt, spec.system, variables, f"{role} prompt")
            ids = encode(tokenizer, messages, max_tokens=cfg.runtime.max_prompt_tokens)[0]
            reply = text_ids(tokenizer, demonstration(role, task)) + [tokenizer.eos_token_id]
            out.append((ids, reply))
    return out


def train_sft(model, data: list[tuple[list[int], list[int]]], epochs: int, lr: float, seed: int) -> list[float]:
    """Cross-entropy on the reply tokens, one demonstration per AdamW step; the losses."""
    import torch

    torch.manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    losses = []
    order = list(range(len(data)))
    for epoch in range(epochs):
        random.Random(seed + epoch).shuffle(order)
        for i in order:
            prompt, reply = data[i]
            ids = torch.tensor([prompt + reply])
            labels = torch.tensor([[-100] * len(prompt) + reply])
            loss = model(input_ids=ids, labels=labels).loss
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            losses.append(float(loss.detach()))
            print(f"warm start step {len(losses)}/{epochs * len(data)}: loss {losses[-1]:.4f}", flush=True)
    model.eval()
    return losses


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workflow")
    ap.add_argument("--roles", nargs="+", required=True)
    ap.add_argument("--tasks", type=int, default=32)
    ap.add_argument("--after-tool", nargs="?", const=True, default=False, choices=(True, "both"),
                    help="the planner's demonstrations answer the prompt it sees after the tool program ran "
                         "(`both`: that prompt and its prompt with no tool, as a single agent sees it)")
    ap.add_argument("--copy-tasks", type=int, default=None,
                    help="with --after-tool both: only this many tasks also get the after-the-tool demonstration")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    import torch

    from masdsl.api import config_of, workflow_of
    from masdsl.runtime.models import load_model
    from masdsl.runtime.session import load_split

    torch.set_num_threads(2)
    wf = workflow_of(args.workflow)
    cfg = config_of(wf, ["tracking.enabled=false"])
    model, tok = load_model(args.model)
    tasks = load_split(wf.data["train"])[-args.tasks:]  # the last tasks: a run's first batches see others first
    data = pairs(wf, cfg, tok, args.roles, tasks, args.after_tool, args.copy_tasks)
    t0 = time.perf_counter()
    losses = train_sft(model, data, args.epochs, args.lr, args.seed)
    out = Path(args.out)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    n = len(losses)
    info = {"workflow": args.workflow, "roles": args.roles, "tasks": args.tasks, "after_tool": args.after_tool, "copy_tasks": args.copy_tasks,
            "epochs": args.epochs, "lr": args.lr,
            "model": args.model, "steps": n, "loss_first": sum(losses[:4]) / min(4, n),
            "loss_last": sum(losses[-4:]) / min(4, n), "wall_s": time.perf_counter() - t0}
    (out / "warm_start.json").write_text(json.dumps(info, indent=1))
    print(json.dumps(info), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
