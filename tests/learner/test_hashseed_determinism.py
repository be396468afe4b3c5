"""Same seed, same CPU machine: identical step records and final weights, whatever the
processes' `PYTHONHASHSEED`, with torch running more than one thread (issues 4 and 7).

The leak these tests guard, found by bisecting two runs that differed in the last bits: the
step-0 records, advantages and loss were equal, and the first gradients to differ were layer
1's k_proj/v_proj (not its q_proj, o_proj or MLP), i.e. the gradient flowing back through the
prompt's KV cache. `shared_prefix_logprobs` gathered that cache to one row per candidate with
`keys[idx]` (transformers' `batch_select_indices`); on CPU, with more than one torch thread
and at least 32768 elements, the backward of that gather (`index_put_` with accumulate) adds
the K candidates' rows into their shared prompt row with parallel atomic float adds, so the
order of the additions changes from run to run. The weights after step 1, and so the step-2
log-probs, then differ in their last bits (measured: log-probs by ~5e-7, weights by up to
3e-6 after two steps). It was not a hash-order dependence: runs with the *same* hash
seed differed too; different hash seeds only made it show in multi-process tests. Gathering
with `index_select` (whose backward, `index_add_`, adds in index order) makes it exact.

The prompts here are long enough, and shared by enough candidates, for torch's parallel path
(candidates * prompt tokens * kv heads * head dim >= 32768); without the fix both of the first
two tests failed in every one of the runs measured.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest
import torch

from tests.support.toy import TOY_DIR


# One role whose prompt never changes: every candidate of a step shares one prompt, the case
# where the candidates' gradients are summed into the same cache rows.
WORKFLOW = """
workflow hashseed_probe "One role, one shared prompt, a dense reward."
import "toy_env.py"
env toy_digits
data train toy_digits("train", 8)
data eval  toy_digits("eval", 1)
policy shared { model: "smollm2-135m-instruct" }
role speaker {
  policy shared
  prompt "Say a number. Say a number. Say a number. Say a number."
  sample { temperature: 1.0, max_tokens: 4 }
  parse digit = digit(output)
  reward len(output)
}
flow { start -> speaker -> end }
train { samples: 4, batch: 4, steps: 2, lr: 0.01, eval_tasks: 1 }
"""

# Runs in a fresh interpreter: train 2 steps, write the records (timings dropped) and weights.
CHILD = """
import json, sys
import torch
torch.set_num_threads(2)
import masdsl
from masdsl.config import resolve_config
from masdsl.plan.run_plan import resolve_run
from masdsl.runtime.rundir import RunDir
from masdsl.training.checkpoint import policy_weights
from masdsl.training.trainer import train

model_dir, toy_dir, out = sys.argv[1:4]
wf = masdsl.loads(sys.stdin.read(), name="hashseed_probe", base_dir=toy_dir)
cfg = resolve_config(wf.train, overrides=[f"policy.shared.model={model_dir}", "tracking.enabled=false",
                                          "runtime.engine=hf", "train.seed=3"])
plan = resolve_run(wf, cfg)
result = train(plan, RunDir.open(plan, out))
rows = [json.loads(line) for line in open(f"{out}/records.jsonl")]
for r in rows:
    r.pop("gen_s"), r.pop("env_s")
json.dump(rows, open(f"{out}/rows.json", "w"))
torch.save(policy_weights(result.checkpoints[-1], "shared"), f"{out}/final.pt")
"""


def test_training_in_processes_with_different_hash_seeds_is_identical(tiny_model_dir, tmp_path):
    """Two `train` runs at once in two processes (hash seeds 1 and 2, two torch threads each):
    the same step records, log-probs included, and bit-identical final weights."""
    procs = {}
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "MASDSL_NO_VLLM": "1"}
        procs[seed] = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(tiny_model_dir), str(TOY_DIR), str(tmp_path / seed)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        procs[seed].stdin.write(WORKFLOW)
        procs[seed].stdin.close()
    for seed, proc in procs.items():
        log = proc.stdout.read()
        assert proc.wait(timeout=300) == 0, log[-3000:]
    rows = {s: json.loads((tmp_path / s / "rows.json").read_text()) for s in procs}
    weights = {s: torch.load(tmp_path / s / "final.pt", weights_only=True) for s in procs}
    assert len(rows["1"]) == 2 * 4 * 4  # steps * tasks * K
    assert {r["step"] for r in rows["1"]} == {1, 2}
    assert any(r["logprobs"] for r in rows["1"] if r["step"] == 2)
    for a, b in zip(rows["1"], rows["2"]):
        assert a == b, (a["step"], a["task_id"], a["candidate"])
    assert rows["1"] == rows["2"]
    assert weights["1"].keys() == weights["2"].keys()
    assert all(torch.equal(weights["1"][k], weights["2"][k]) for k in weights["1"]), \
        [k for k in weights["1"] if not torch.equal(weights["1"][k], weights["2"][k])]


def test_shared_prefix_gradient_is_bitwise_repeatable_with_two_threads(tiny_model_dir):
    """The isolated cause: one prompt, 24 candidates, two torch threads; the backward through
    the shared prompt's cache gives the same gradient bits every time."""
    from masdsl.learner.logprobs import shared_prefix_logprobs
    from masdsl.models.load import load_model

    model, tok = load_model(tiny_model_dir)
    rng = random.Random(0)
    prompt = [rng.randrange(5, 500) for _ in range(30)]
    responses = [[rng.randrange(5, 500) for _ in range(6)] for _ in range(24)]
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        grads = []
        for _ in range(4):
            model.zero_grad(set_to_none=True)
            logp, mask = shared_prefix_logprobs(model, [prompt], [0] * len(responses), responses, tok.pad_token_id)
            (logp * mask).sum().backward()
            grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    finally:
        torch.set_num_threads(before)
    assert all(torch.equal(grads[0], g) for g in grads[1:]), \
        [float((grads[0] - g).abs().max()) for g in grads[1:]]


@pytest.mark.parametrize("n_threads", [1, 2])
def test_cache_row_selection_matches_indexing(n_threads):
    """`select_cache_rows` keeps exactly the rows `cache.batch_select_indices` keeps, with
    the same gradient up to float rounding."""
    from transformers import DynamicCache

    from masdsl.learner.logprobs import select_cache_rows

    before = torch.get_num_threads()
    torch.set_num_threads(n_threads)
    try:
        keys = torch.randn(3, 1, 5, 4, generator=torch.Generator().manual_seed(0), requires_grad=True)
        values = torch.randn(3, 1, 5, 4, generator=torch.Generator().manual_seed(1), requires_grad=True)
        idx = torch.tensor([2, 0, 0, 1, 2, 2])
        got, want = DynamicCache(), DynamicCache()
        got.update(keys * 1, values * 1, 0)
        want.update(keys * 1, values * 1, 0)
        select_cache_rows(got, idx)
        want.batch_select_indices(idx)
        assert torch.equal(got.layers[0].keys, want.layers[0].keys)
        assert torch.equal(got.layers[0].values, want.layers[0].values)
        w = torch.randn(6, 1, 5, 4, generator=torch.Generator().manual_seed(2))
        g1 = torch.autograd.grad((got.layers[0].keys * w).sum(), keys)[0]
        g2 = torch.autograd.grad((want.layers[0].keys * w).sum(), keys)[0]
        assert torch.allclose(g1, g2, atol=1e-6)
    finally:
        torch.set_num_threads(before)
