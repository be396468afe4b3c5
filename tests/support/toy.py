"""The toy workflow of the training tests: a namer says a hidden digit, a copier repeats it.

Its files live in tests/support/toy_data (`toy_digits.mas` on one shared policy, `toy_digits_lora.mas`
with a LoRA adapter per role, and `toy_env.py`, which both import); docs and benchmarks name that
folder.

>>> toy().name, sorted(toy("toy_digits_lora.mas").policies)
('toy_digits', ['copier_p', 'namer_p'])
>>> dense_toy().roles["copier"].reward.source
'len(output)'
"""

from __future__ import annotations

from pathlib import Path

import masdsl
from masdsl.config import resolve_config
from masdsl.runtime.records import read_records

from .overrides import tiny_hf
from tests.support.paths import TOY_DIR

TOY = TOY_DIR / "toy_digits.mas"
TOY_LORA = TOY_DIR / "toy_digits_lora.mas"

# A short run: 4 steps of 5 tasks x K 4, no evaluation between steps, a checkpoint every 2.
SHORT = ("train.steps=4", "train.samples=4", "train.batch=5", "train.eval_every=0", "train.lr=0.01",
         "train.checkpoint_every=2", "train.eval_tasks=4")


def toy(name: str = "toy_digits.mas") -> masdsl.Workflow:
    return masdsl.load(TOY_DIR / name)


def toy_text(name: str = "toy_digits.mas") -> str:
    return (TOY_DIR / name).read_text()


def dense_reward(text: str) -> str:
    """The toy's text with a dense reward (the length of the output text, up to 4 tokens), so a
    few steps from a random model already have groups with different rewards to learn from."""
    for role_reward in ("reward same(digit, task.target)", "reward same(digit, namer.digit)"):
        text = text.replace(role_reward, "reward len(output)")
    return text.replace("max_tokens: 1", "max_tokens: 4")


def dense_toy(name: str = "toy_digits.mas") -> masdsl.Workflow:
    return masdsl.loads(dense_reward(toy_text(name)), name=f"dense_{name}", base_dir=TOY_DIR)


def toy_config(wf, model_dir, *extra: str):
    """The workflow's own `train { }` on the tiny model (every policy), the hf engine, no tracking."""
    return resolve_config(wf.train, overrides=[*tiny_hf(model_dir, wf.policies), *extra])


def train_into(plan, folder, **kw):
    """`train(plan, RunDir.open(plan, folder), **kw)`: a test's run in a folder of its own (or,
    with `resume=`, continued in it); the trainer takes a `RunDir` only."""
    from masdsl.runtime.rundir import RunDir
    from masdsl.training.trainer import train  # torch and the trainer only for the tests that train

    return train(plan, RunDir.open(plan, folder), **kw)


def run_short(wf, model_dir, run_dir, *extra: str, **kw):
    """`train` a `SHORT` run of `wf` (then `extra`) into `run_dir`; `kw` go to `train`."""
    from masdsl.plan.run_plan import resolve_run

    return train_into(resolve_run(wf, toy_config(wf, model_dir, *SHORT, *extra)), run_dir, **kw)


def records_without_timings(run_dir: Path) -> list:
    """The run's records, with the two timings two identical runs differ in (`gen_s`, `env_s`) set to 0."""
    out = []
    for r in read_records(run_dir / "records.jsonl"):
        r.gen_s = r.env_s = 0.0
        out.append(r)
    return out
