"""One-step toy runs through `masdsl run` for the export tests, and the log-probs an exported
model is checked by (tests/training/test_export.py, tests/runtime/backends/test_vllm_tied.py)."""

from __future__ import annotations

from pathlib import Path

import torch

import masdsl
from masdsl.cli import main

from .overrides import NO_TRACKING
from .toy import TOY_DIR, dense_reward, toy_text


def dense_toy_file(tmp: Path, name: str) -> Path:
    """The toy `name` with a dense reward (output length), importing its env by absolute path, so
    that a run learns in one step and the run folder's own copy of the source loads."""
    text = toy_text(name).replace('import "toy_env.py"', f'import "{TOY_DIR / "toy_env.py"}"')
    path = tmp / name
    path.write_text(dense_reward(text))
    return path


def run_args(tmp: Path) -> list[str]:
    """hf engine, no tracking, runs under `tmp/runs`, 2 eval tasks."""
    return ["runtime.engine=hf", NO_TRACKING, f"runtime.runs_dir={tmp / 'runs'}", "train.eval_tasks=2"]


def train_one_step(mas: Path, tmp: Path, models: list[str]) -> Path:
    """`masdsl run mas` for one step (5 tasks x K 4) with the overrides `models`; its run folder."""
    assert main(["run", str(mas), *models, *run_args(tmp), "train.steps=1", "train.samples=4", "train.batch=5",
                 "train.lr=0.01"]) == 0
    (run_dir,) = (tmp / "runs" / masdsl.load(mas).name).iterdir()
    return run_dir


def prompt_ids(tok) -> torch.Tensor:
    """A fixed chat prompt and answer, as one batch of ids."""
    ids = tok.apply_chat_template([{"role": "user", "content": "target:7:7:7"}], add_generation_prompt=True)
    ids = list(getattr(ids, "input_ids", ids)) + tok.encode("7 is the answer")
    return torch.tensor([ids])


@torch.no_grad()
def logprobs(model, ids: torch.Tensor) -> torch.Tensor:
    """The log-prob of each next token of `ids` under `model`."""
    logits = model(input_ids=ids).logits.float()[0, :-1]
    return logits.log_softmax(-1).gather(-1, ids[0, 1:, None])[:, 0]
