"""The learner-worker comparisons (`runtime.learner_workers`, `runtime.learner_fsdp`): the toy run
in float64 on the driver and on Ray workers, and the checks that their weights and records agree.

Why the tolerances are what they are (measured): tests/learner/test_learner_workers.py's docstring.
"""

from __future__ import annotations

from pathlib import Path

import masdsl
import torch

from masdsl.config import resolve_config
from masdsl.runtime.records import read_records

from .overrides import tiny_hf
from .toy import TOY_DIR, dense_reward, toy_text

RTOL = 1e-11  # ||w_workers - w_driver|| / ||w_driver|| in float64 after one update
RTOL_TWO_STEPS = 1e-7  # the same after a second rollout and update: measured 1.04e-9
LOGPROB_TOL = 4 * 8 * 2.0 ** -24  # 4 float32 ulps at |logit| 8: measured 4.77e-7


def shared_toy() -> masdsl.Workflow:
    """The toy on its one shared policy, with a dense reward (a random model's groups are not flat)."""
    return masdsl.loads(dense_reward(toy_text()), name="dense_shared", base_dir=TOY_DIR)


def workers_config(wf, model_dir, *extra: str):
    """A short run in float64 (`runtime.dtype=float64, train.master_weights=compute`), a checkpoint
    every step, no evaluation between steps."""
    return resolve_config(wf.train, overrides=[*tiny_hf(model_dir, wf.policies),
                                               "train.samples=4", "train.batch=5", "train.eval_every=0",
                                               "train.eval_tasks=2", "train.lr=0.001", "train.mini_batch_size=8",
                                               "train.checkpoint_every=1", "runtime.dtype=float64",
                                               "train.master_weights=compute", *extra])


def weights(ck: Path, name: str) -> dict[str, torch.Tensor]:
    """Policy `name`'s weights in checkpoint folder `ck`."""
    (file,) = (ck / "policies").glob(f"{name}.*")
    if file.suffix == ".safetensors":
        from safetensors.torch import load_file  # the checkpoint format may be either

        return load_file(str(file))
    return torch.load(file, weights_only=True)


def assert_close_weights(a: dict, b: dict, rtol: float = RTOL) -> float:
    """||a - b|| / ||a|| over all tensors within `rtol`; returns it."""
    assert a.keys() == b.keys()
    diff = sum(float(((a[k] - b[k]) ** 2).sum()) for k in a) ** 0.5
    rel = diff / sum(float((a[k] ** 2).sum()) for k in a) ** 0.5
    assert rel <= rtol, rel
    return rel


def records(run_dir: Path):
    return list(read_records(run_dir / "records.jsonl"))


def assert_same_records(a, b) -> None:
    """Same tokens, rewards and advantages' inputs; log-probs equal up to float noise."""
    assert len(a) == len(b) > 0
    for x, y in zip(a, b):
        assert (x.step, x.task_id, x.role, x.turn, x.candidate, x.policy) == (y.step, y.task_id, y.role, y.turn,
                                                                              y.candidate, y.policy)
        assert x.response_ids == y.response_ids and x.prompt_ids == y.prompt_ids and x.reward == y.reward
        assert all(abs(p - q) <= LOGPROB_TOL for p, q in zip(x.logprobs, y.logprobs)), (x.logprobs, y.logprobs)


def kill_rank_1_after_step_1(printed):
    """An `on_step` that SIGKILLs rank 1 (its pid from the placement line the run printed) after step 1."""
    import os
    import re
    import signal

    def kill(step, metrics):
        if step == 1:
            pid = re.findall(r"rank 1 pid (\d+)", printed.getvalue())[0]
            os.kill(int(pid), signal.SIGKILL)

    return kill
