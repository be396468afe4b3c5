"""`runtime.learner_workers`: policies trained by Ray actors with torch.distributed (gloo, CPU).

Two learner workers on a tiny model compute the same update as the driver alone on the same
global batch. Exact equality is not possible: each rank sums its own rows' gradients, then
gloo adds the two ranks' sums, a different order of float additions than one process
accumulating every micro-batch. In float32 that noise was visible: AdamW's first steps move every
weight by about `lr * g / |g|`, so a gradient component that is itself ~0 (terms that cancel)
turns rounding into a whole step of that one weight, and ||w_workers - w_driver|| / ||w|| sat at
0.9e-6-1.3e-6, at the edge of any bound tight enough to catch a mistake. So these runs compute
in float64 (`runtime.dtype=float64, train.master_weights=compute`): measured 1.8e-16 after one
update (the same runs in float32: 1.3e-6), about eps64 (1.1e-16). A
real mistake (a row dropped or counted twice, a rank's gradient lost) moves the weights by a
fraction of the update itself, ~1e-4 of ||w|| here. RTOL sits between, 1e-11: 5 orders of
magnitude above the noise it must tolerate, 7 below the errors it must catch.

After a second step the driver's run and every worker run (data parallel, FSDP, resumed,
restarted) differ by 1.04e-9 of ||w|| (the same 1.0393e-9 in each comparison; the worker runs
agree with one another within RTOL). Measured where it sits: not in the records (step 2 samples
the same tokens and log-probs), but in the embedding rows of rarely seen tokens, whose AdamW
second moment is at eps's scale (the largest, 1.6e-8 of a weight, in a row with sqrt(v) 1.4e-8
against eps 1e-8), where the update lr * m / (sqrt(v) + eps) is most sensitive to the 1.8e-16
step 1 left (the exact path of that amplification was not traced). It is the same in every
comparison because every worker run starts step 2 from bitwise the same weights (the same gloo
sums), and the driver from its own. RTOL_TWO_STEPS, 1e-7, keeps 96x above it and 1000x below a
mistake. The sampled log-probs in the records are compared at float32's resolution whatever the
run's dtype: transformers' `generate` casts the logits to float32, so two runs whose float64
weights differ by 1e-16 can round one logit to neighbouring float32 values (measured: 4.77e-7 =
2^-21 apart at |logit| < 8). LOGPROB_TOL, 4 ulps of 8 (1.9e-6), allows that flip with a 4x
margin; a different token or reward still fails exactly.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

import masdsl
from masdsl.config import ConfigError, resolve_config
from masdsl.learner import workers
from masdsl.plan.run_plan import resolve_run

from tests.support.toy import TOY_DIR, TOY_LORA, dense_reward, toy_text, train_into
from tests.support.workers import (RTOL, RTOL_TWO_STEPS, assert_close_weights, assert_same_records,
                                   kill_rank_1_after_step_1, records, shared_toy, weights, workers_config)

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/learner/conftest.py


def per_role_toy():
    """Two full policies, one per role (both start from the same model folder)."""
    text = toy_text().replace('policy shared { model: "smollm2-135m-instruct" }',
                              'policy namer_p { model: "smollm2-135m-instruct" }\n'
                              'policy copier_p { model: "smollm2-135m-instruct" }')
    head, sep, tail = text.partition("role copier")
    text = head.replace("policy shared", "policy namer_p") + sep + tail.replace("policy shared", "policy copier_p")
    return masdsl.loads(dense_reward(text), name="dense_per_role", base_dir=TOY_DIR)


def test_config_checks(tiny_model_dir):
    wf = shared_toy()
    with pytest.raises(ConfigError, match="learner_workers` must be >= 0"):
        resolve_run(wf, workers_config(wf, tiny_model_dir, "runtime.learner_workers=-1"))
    lora = masdsl.load(TOY_LORA)
    with pytest.raises(ConfigError, match="LoRA policies namer_p, copier_p"):
        resolve_run(lora, workers_config(lora, tiny_model_dir, "runtime.learner_workers=2"))
    resolve_run(wf, workers_config(wf, tiny_model_dir, "runtime.learner_workers=2"))  # full policies: fine


def test_shard_rows_cover_each_mini_batch_once():
    for n in range(0, 12):
        for world in (1, 2, 3):
            parts = [workers.Shard(r, world).rows(list(range(n))) for r in range(world)]
            assert sum(parts, []) == list(range(n))


def test_a_rank_answers_the_optimizer_state_after_the_updates_the_driver_kept(monkeypatch):
    """A restart (or the checkpoint of a failed step) asks a rank for the AdamW state after the
    updates the driver kept: the same state whether the rank's update of the failed step has not
    started (under load the query can run first: it got the state from *before the previous* step,
    a fresh AdamW, 8% off in test_learner_fsdp.py), or finished; none for another count."""
    import types

    def one_adamw_step(policy, optimizer, *args, **kwargs):  # stands in for update_policy
        policy.model.weight.grad = torch.ones_like(policy.model.weight)
        optimizer.step()
        return "stats"

    monkeypatch.setattr(workers, "update_policy", one_adamw_step)
    w = workers.LearnerWorker(0, 1, 0)
    wf = shared_toy()
    w.policy, w.plan = types.SimpleNamespace(model=torch.nn.Linear(2, 1, bias=False)), resolve_run(wf, resolve_config(wf.train))
    w.optimizer = torch.optim.AdamW(w.policy.model.parameters())
    w.load_optimizer_state(w.optimizer.state_dict())  # as a (re)started group: 0 updates

    def steps(state):
        return [float(s["step"]) for s in state["state"].values()]

    assert steps(w.optimizer_state(0)) == [] and w.optimizer_state(1) is None  # update 1 not started
    w.update([], [], None)
    assert steps(w.optimizer_state(1)) == [1.0] and steps(w.optimizer_state(0)) == []  # kept, or not
    w.update([], [], None)  # update 2 finished here, but its step failed: the driver still asks for 1
    assert steps(w.optimizer_state(1)) == [1.0] and steps(w.optimizer_state(2)) == [2.0]
    assert w.optimizer_state(0) is None and w.optimizer_state(3) is None  # no copy: never another state


@pytest.fixture(scope="module")
def shared_runs(tiny_model_dir, tmp_path_factory, local_ray):
    """The same 2-step run in the driver and with 2 learner workers (checkpoints after each step)."""
    wf, root = shared_toy(), tmp_path_factory.mktemp("shared")
    import io

    from rich.console import Console

    printed = io.StringIO()  # what the run prints (the placement line)
    out = {}
    for n in (0, 2):
        cfg = workers_config(wf, tiny_model_dir, "train.steps=2", f"runtime.learner_workers={n}")
        out[n] = train_into(resolve_run(wf, cfg),
                            root / f"w{n}", console=Console(file=printed, width=400) if n else None)
    return out, printed.getvalue().splitlines()


def test_one_update_on_two_workers_equals_the_driver(shared_runs, tiny_model_dir):
    runs, lines = shared_runs
    first = {n: runs[n].run_dir / "checkpoints" / "step_000001" for n in runs}
    a, b = weights(first[0], "shared"), weights(first[2], "shared")
    rel = assert_close_weights(a, b)
    from safetensors.torch import load_file

    initial = load_file(str(Path(tiny_model_dir) / "model.safetensors"))
    moved = sum(float(((a[k] - initial[k].to(a[k].dtype)) ** 2).sum()) for k in a) ** 0.5
    diff = sum(float(((a[k] - b[k]) ** 2).sum()) for k in a) ** 0.5
    print(f"after one update: ||w2 - w0|| / ||w0|| = {rel:.2e} (bound {RTOL:.0e}, margin {RTOL / max(rel, 1e-300):.0f}x);"
          f" / ||update|| = {diff / moved:.2e}")
    assert moved > 1e3 * RTOL * sum(float((a[k] ** 2).sum()) for k in a) ** 0.5  # the update is far above the bound
    h0, h2 = runs[0].history[0], runs[2].history[0]
    assert h2["grad_norm/shared"] == pytest.approx(h0["grad_norm/shared"], rel=1e-11)  # the all-reduced gradient
    assert h2["loss/shared"] == pytest.approx(h0["loss/shared"], rel=1e-11, abs=1e-14)
    assert (first[2] / "optim").is_dir() and any((first[2] / "optim").iterdir())  # the workers' AdamW state
    assert any("learner shared: 2 workers: rank 0 pid" in line and "rank 1 pid" in line for line in lines), lines


def test_two_steps_with_workers_sample_the_same_records(shared_runs):
    runs, _ = shared_runs
    assert_same_records(records(runs[0].run_dir), records(runs[2].run_dir))
    last = {n: runs[n].checkpoints[-1] for n in runs}
    assert last[0].name == last[2].name == "step_000002"
    assert_close_weights(weights(last[0], "shared"), weights(last[2], "shared"), rtol=RTOL_TWO_STEPS)


def test_resume_with_workers_continues_from_the_checkpoint(shared_runs, tiny_model_dir, tmp_path):
    """Resume the worker run's step-1 checkpoint (weights and AdamW state go to the workers)."""
    import shutil

    runs, _ = shared_runs
    wf = shared_toy()
    run = tmp_path / "resumed"
    shutil.copytree(runs[2].run_dir, run)
    shutil.rmtree(run / "checkpoints" / "step_000002")
    resumed = train_into(resolve_run(wf, workers_config(wf, tiny_model_dir, "train.steps=2", "runtime.learner_workers=2")), run,
                    resume=run)
    assert resumed.steps == 2
    assert_close_weights(weights(runs[0].checkpoints[-1], "shared"), weights(resumed.checkpoints[-1], "shared"),
                         rtol=RTOL_TWO_STEPS)


def test_per_role_policies_update_concurrently(tiny_model_dir, tmp_path, local_ray, monkeypatch):
    wf = per_role_toy()
    intervals: dict[str, tuple[float, float]] = {}
    collect = workers.LearnerGroup.collect

    def timed(self, refs):  # the real collect, recording each group's update interval
        out = collect(self, refs)
        intervals[self.name] = self.interval
        return out

    monkeypatch.setattr(workers.LearnerGroup, "collect", timed)
    extra = ("train.steps=2", "train.old_logprobs=trainer", "train.ppo_epochs=2")
    base = train_into(resolve_run(wf, workers_config(wf, tiny_model_dir, *extra)), tmp_path / "w0")
    t0 = time.time()
    dist = train_into(resolve_run(wf, workers_config(wf, tiny_model_dir, *extra, "runtime.learner_workers=2")), tmp_path / "w2")
    (s1, e1), (s2, e2) = intervals["namer_p"], intervals["copier_p"]
    assert t0 < s1 and max(s1, s2) < min(e1, e2), intervals  # the two groups' updates overlap in time
    # each engine sampled step 2 from its own policy's new weights: the records match the driver run's
    assert_same_records(records(base.run_dir), records(dist.run_dir))
    for name in ("namer_p", "copier_p"):
        assert_close_weights(weights(base.checkpoints[-1], name), weights(dist.checkpoints[-1], name), rtol=RTOL_TWO_STEPS)
    a, b = weights(dist.checkpoints[-1], "namer_p"), weights(dist.checkpoints[-1], "copier_p")
    assert any(not torch.equal(a[k], b[k]) for k in a)  # two policies, two different updates


def test_a_killed_worker_fails_the_step_and_resume_continues(shared_runs, tiny_model_dir, tmp_path):
    """Rank 1 SIGKILLed after step 1: step 2's update fails (StepFailed, checkpoint of step 1 with
    the pre-step AdamW state from rank 0); `--resume` on fresh workers ends as the uninterrupted run."""
    import io
    import os
    import re
    import signal

    from rich.console import Console

    from masdsl.errors import StepFailed

    runs, _ = shared_runs
    wf, printed = shared_toy(), io.StringIO()
    cfg = workers_config(wf, tiny_model_dir, "train.steps=2", "runtime.learner_workers=2", "runtime.learner_restarts=0")

    def kill_rank_1(step, metrics):
        if step == 1:
            (pid,) = re.findall(r"rank 1 pid (\d+)", printed.getvalue())
            os.kill(int(pid), signal.SIGKILL)

    with pytest.raises(StepFailed, match="learner worker of policy `shared` failed") as failed:
        train_into(resolve_run(wf, cfg), tmp_path / "run", console=Console(file=printed, width=400), on_step=kill_rank_1)
    assert failed.value.checkpoint.name == "step_000001"
    resumed = train_into(resolve_run(wf, cfg), tmp_path / "run", resume=tmp_path / "run")
    assert resumed.steps == 2
    assert_close_weights(weights(runs[2].checkpoints[-1], "shared"), weights(resumed.checkpoints[-1], "shared"),
                         rtol=RTOL)
    assert_same_records(records(runs[2].run_dir), records(tmp_path / "run"))


def test_a_group_with_a_killed_worker_is_restarted_and_the_step_redone(shared_runs, tiny_model_dir, tmp_path):
    """`runtime.learner_restarts=1`: rank 1 SIGKILLed after step 1; step 2's update fails, the group
    restarts from the driver's step-1 weights and the AdamW state from before step 2, redoes the
    update, and the run ends as the uninterrupted one."""
    import io

    from rich.console import Console

    runs, _ = shared_runs
    wf, printed = shared_toy(), io.StringIO()
    cfg = workers_config(wf, tiny_model_dir, "train.steps=2", "runtime.learner_workers=2", "runtime.learner_restarts=1")
    done = train_into(resolve_run(wf, cfg), tmp_path / "run", console=Console(file=printed, width=400),
                 on_step=kill_rank_1_after_step_1(printed))
    assert done.steps == 2
    assert "restarting the group and redoing its update" in printed.getvalue()
    assert "restarted learner shared: 2 workers" in printed.getvalue()
    assert_close_weights(weights(runs[2].checkpoints[-1], "shared"), weights(done.checkpoints[-1], "shared"), rtol=RTOL)
    assert_same_records(records(runs[2].run_dir), records(tmp_path / "run"))
