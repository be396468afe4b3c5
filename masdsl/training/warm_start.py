"""A short supervised warm start on the replies the env itself knows to be good (`masdsl warm-start`).

Why: AT-GRPO learns only from groups whose K rewards differ. A small model that never writes a
tool program that runs, or never closes its move list, gives all-flat groups, and no algorithm
learns from those (docs/performance.md `## base rates`). A few cross-entropy steps on the env's
demonstrations (`Env.demonstration(state, field)`, `masdsl.envs.base.Demonstrates`) move the
model to where some candidates succeed and some fail; RL then does the rest. It is a deviation
from the paper (which starts from the instruct model) and is documented as such.

Each demonstration pairs a role's prompt, rendered exactly as a rollout renders it at turn 0 on
the task's initial state (no other role has acted), with the env's reply for the first field
the role parses that the env can demonstrate. Training: one demonstration per AdamW step, loss
on the reply tokens only, in a seeded order; the result is a Hugging Face folder that
`masdsl run FILE policy.<name>.model=DIR` starts from.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from masdsl.envs.base import Demonstrates, Env
from masdsl.errors import UserError
from masdsl.lang.workflow import Workflow
from masdsl.models import load as models
from masdsl.plan.run_plan import RunPlan
from masdsl.runtime.inputs import load_split, make_env
from masdsl.runtime.prompts import encode, messages_for, prompt_variables, text_ids

if TYPE_CHECKING:
    from torch import nn
    from transformers import PreTrainedTokenizerBase

DEFAULT_TASKS = 12  # enough for the 135M model to write the plan_path tool program (docs/performance.md)
DEFAULT_LR = 1e-5
INFO_FILE = "warm_start.json"  # written next to the weights: what made them


@dataclass(frozen=True)
class Demonstration:
    role: str
    task_id: str
    prompt_ids: list[int]
    reply_ids: list[int]


@dataclass(frozen=True)
class WarmStartInfo:
    workflow: str
    model: str
    roles: list[str]
    tasks: int
    epochs: int
    lr: float
    seed: int
    steps: int
    loss_first: float  # mean of the first four steps' losses
    loss_last: float  # mean of the last four
    wall_s: float


def demonstrated_field(env: Env, workflow: Workflow, role: str, state: Any) -> str | None:
    """The first field `role` parses that `env` has a demonstration for on `state`, else None."""
    if not isinstance(env, Demonstrates):
        return None
    return next((p.name for p in workflow.roles[role].parses if env.demonstration(state, p.name) is not None), None)


def pick_roles(env: Env, workflow: Workflow, roles: Sequence[str] | None, state: Any) -> list[str]:
    """`roles` checked (each must exist and be demonstrable), or every demonstrable role."""
    if not isinstance(env, Demonstrates):
        raise UserError(f"env `{workflow.env}` has no demonstrations, so it cannot be warm-started "
                        "(an env gets them by defining `demonstration(state, field)`)")
    for role in roles or ():
        if role not in workflow.roles:
            raise UserError(f"warm start: the workflow has no role `{role}`; roles: {', '.join(workflow.roles)}")
        if demonstrated_field(env, workflow, role, state) is None:
            fields = ", ".join(p.name for p in workflow.roles[role].parses) or "none"
            raise UserError(f"warm start: env `{workflow.env}` has no demonstration for role `{role}` "
                            f"(it parses: {fields})")
    chosen = list(roles) if roles else [r for r in workflow.roles if demonstrated_field(env, workflow, r, state)]
    if not chosen:
        raise UserError(f"warm start: env `{workflow.env}` demonstrates none of the fields the roles parse")
    return chosen


def demonstrations(env: Env, plan: RunPlan, tokenizer: PreTrainedTokenizerBase, tasks: Sequence[dict],
                   roles: Sequence[str]) -> list[Demonstration]:
    """(prompt ids, reply ids) for each task and role, in that order (see the module docstring)."""
    out, workflow = [], plan.workflow
    for task in tasks:
        state = env.reset(task)
        view = env.view(state)
        for role in roles:
            spec = workflow.roles[role]
            variables = prompt_variables(task, view, 0, role, {}, [])
            messages = messages_for(spec.prompt, spec.system, variables, f"{role} prompt")
            ids = encode(tokenizer, messages, max_tokens=plan.runtime.max_prompt_tokens)[0]
            # pick_roles refused an env without demonstrations
            reply = env.demonstration(state, demonstrated_field(env, workflow, role, state))  # type: ignore[attr-defined]
            out.append(Demonstration(role, str(task["id"]), ids, text_ids(tokenizer, reply) + [tokenizer.eos_token_id]))
    return out


def train_sft(model: nn.Module, data: Sequence[Demonstration], *, epochs: int, lr: float, seed: int,
              on_step: Callable[[int, int, float], None] | None = None) -> list[float]:
    """Cross-entropy on the reply tokens, one demonstration per AdamW step; the losses.
    `on_step(step, total, loss)` after each step."""
    import torch  # heavy: the module loads without torch (the CLI checks before any model)

    torch.manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    losses: list[float] = []
    order = list(range(len(data)))
    total = epochs * len(data)
    for epoch in range(epochs):
        random.Random(seed + epoch).shuffle(order)
        for i in order:
            d = data[i]
            ids = torch.tensor([d.prompt_ids + d.reply_ids])
            labels = torch.tensor([[-100] * len(d.prompt_ids) + d.reply_ids])
            loss = model(input_ids=ids, labels=labels).loss
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            losses.append(float(loss.detach()))
            if on_step is not None:
                on_step(len(losses), total, losses[-1])
    model.eval()
    return losses


def warm_start(plan: RunPlan, out: str | Path, *, roles: Sequence[str] | None = None,
               tasks: int = DEFAULT_TASKS, epochs: int = 1, lr: float = DEFAULT_LR, seed: int = 0,
               on_step: Callable[[int, int, float], None] | None = None) -> WarmStartInfo:
    """Warm-start the policy the chosen roles share on the last `tasks` train tasks and save it to
    `out`; what was done. They are train tasks, never eval ones; a run draws each epoch's batches
    from a seeded permutation of the whole train split (`trainer.next_batch`), so RL may draw them too."""
    from masdsl.learner.policies import master_dtype  # heavy: torch, as above

    workflow = plan.workflow  # planned by the caller (`resolve_rollout`): names and ranges, before any data or model
    if tasks < 1 or epochs < 1 or not lr > 0:
        raise UserError(f"warm start: tasks and epochs must be >= 1 and lr > 0 (got {tasks}, {epochs}, {lr})")
    if "train" not in workflow.data:
        raise UserError(f"warm start: workflow `{workflow.name}` has no `data train` line")
    rows = load_split(workflow, "train")[-tasks:]
    if not rows:
        raise UserError("warm start: the train split is empty")
    env = make_env(workflow, plan.sandbox)
    chosen = pick_roles(env, workflow, roles, env.reset(rows[0]))  # before any model loads
    names = sorted({workflow.roles[r].policy for r in chosen})
    if len(names) > 1:
        raise UserError(f"warm start: the roles {', '.join(chosen)} use {len(names)} policies ({', '.join(names)}); "
                        "warm-start one policy at a time with --roles")
    spec = plan.policies[names[0]]
    if spec.lora:
        raise UserError(f"warm start: policy `{spec.name}` is a LoRA policy; warm start trains full weights")
    model, tokenizer = models.load_model(spec.model, dtype=master_dtype(plan))
    data = demonstrations(env, plan, tokenizer, rows, chosen)
    t0 = time.perf_counter()
    losses = train_sft(model, data, epochs=epochs, lr=lr, seed=seed, on_step=on_step)
    folder = Path(out)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    n = len(losses)
    info = WarmStartInfo(workflow=workflow.name, model=str(spec.model), roles=chosen,
                         tasks=len(rows), epochs=epochs, lr=lr, seed=seed, steps=n,
                         loss_first=sum(losses[:4]) / min(4, n), loss_last=sum(losses[-4:]) / min(4, n),
                         wall_s=time.perf_counter() - t0)
    (folder / INFO_FILE).write_text(json.dumps(asdict(info), indent=1))
    return info
