"""`runtime.learner_fsdp`: the learner workers shard the model with FSDP2 (`fully_shard`, gloo, CPU).

FSDP2 computes the update the data-parallel workers compute: each rank runs its rows of every
mini-batch, the gradients are summed (a reduce-scatter instead of an all-reduce), clipped over the
shards, and each rank's AdamW steps its shard. The runs use `train.mini_batch_size=1`, so in every
optimizer step rank 1 has no row of its own and runs a stand-in row at weight 0 (without it the
collectives would not match and the run would hang). The weights are compared as in
test_learner_workers.py: ||a - b|| / ||a||, in float64, within RTOL.
"""

from __future__ import annotations

import shutil

import pytest
import torch

from masdsl.plan.run_plan import resolve_run
from tests.support.toy import train_into
from tests.support.workers import (RTOL, RTOL_TWO_STEPS, assert_close_weights, assert_same_records,
                                   kill_rank_1_after_step_1, records, shared_toy, weights, workers_config)

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/learner/conftest.py
EXTRA = ("train.steps=2", "train.batch=2", "train.mini_batch_size=1", "runtime.learner_workers=2")


@pytest.fixture(scope="module")
def runs(tiny_model_dir, tmp_path_factory, local_ray):
    """The same 2-step run on 2 data-parallel workers and on 2 FSDP workers."""
    wf, root = shared_toy(), tmp_path_factory.mktemp("fsdp")
    return {fsdp: train_into(resolve_run(wf, workers_config(wf, tiny_model_dir, *EXTRA, f"runtime.learner_fsdp={fsdp}")),
                             root / f"fsdp_{fsdp}") for fsdp in (False, True)}


def optim(ck, name="shared"):
    return torch.load(ck / "optim" / f"{name}.pt", weights_only=True)


def test_fsdp_update_equals_data_parallel(runs):
    ddp, fsdp = (runs[k].run_dir / "checkpoints" / "step_000001" for k in (False, True))
    rel = assert_close_weights(weights(ddp, "shared"), weights(fsdp, "shared"), rtol=RTOL)
    print(f"FSDP vs DDP after one update: ||dw|| / ||w|| = {rel:.2e}")
    h0, h1 = runs[False].history[0], runs[True].history[0]
    assert h1["grad_norm/shared"] == pytest.approx(h0["grad_norm/shared"], rel=1e-11)
    assert h1["loss/shared"] == pytest.approx(h0["loss/shared"], rel=1e-11, abs=1e-14)
    assert h0["optimizer_steps/shared"] == h1["optimizer_steps/shared"] > 2  # one per row: rank 1 stood in
    # the checkpoint's AdamW state is gathered whole, in the layout of the data-parallel one
    a, b = optim(ddp), optim(fsdp)
    assert a["state"].keys() == b["state"].keys() and a["param_groups"] == b["param_groups"]
    for i in a["state"]:
        for k in ("exp_avg", "exp_avg_sq"):
            x, y = a["state"][i][k], b["state"][i][k]
            assert type(y) is torch.Tensor and x.shape == y.shape
            assert float((x - y).norm()) <= 1e-9 * float(x.norm()) + 1e-20, (i, k)
        assert float(a["state"][i]["step"]) == float(b["state"][i]["step"])


def test_two_fsdp_steps_sample_what_data_parallel_samples(runs):
    assert_same_records(records(runs[False].run_dir), records(runs[True].run_dir))
    assert_close_weights(weights(runs[False].checkpoints[-1], "shared"), weights(runs[True].checkpoints[-1], "shared"),
                         rtol=RTOL)


@pytest.mark.parametrize("resume_workers", [0, 2])
def test_an_fsdp_checkpoint_resumes_with_or_without_workers(runs, tiny_model_dir, tmp_path, resume_workers):
    """The FSDP run's step-1 checkpoint resumed in the driver alone, or on FSDP workers again
    (weights and the gathered AdamW state sharded anew), ends as the uninterrupted FSDP run."""
    wf, run = shared_toy(), tmp_path / "resumed"
    shutil.copytree(runs[True].run_dir, run)
    shutil.rmtree(run / "checkpoints" / "step_000002")
    extra = [*EXTRA[:-1], f"runtime.learner_workers={resume_workers}", f"runtime.learner_fsdp={resume_workers > 0}"]
    resumed = train_into(resolve_run(wf, workers_config(wf, tiny_model_dir, *extra)), run, resume=run)
    assert resumed.steps == 2
    assert_close_weights(weights(runs[True].checkpoints[-1], "shared"), weights(resumed.checkpoints[-1], "shared"),
                         rtol=RTOL)


def test_engine_actors_load_the_new_weights_from_the_object_store(tiny_model_dir, tmp_path, local_ray, monkeypatch):
    """With engine actors (`runtime.ray=true`) the new weights go from rank 0 to the engine through
    the object store: the driver sends a ref, fetches the weights only for the checkpoint at the
    end, and an engine actor killed after step 1 is restarted with that ref (the driver owns it)."""
    from masdsl.learner import workers
    from masdsl.runtime import actors

    wf = shared_toy()
    sent, fetched, engines = [], [], []
    update_weights, fetch = actors.RemoteEngine.update_weights, workers.LearnerGroup.fetch

    def spy_update(self, state):  # the real update_weights, recording what it was given
        sent.append(type(state).__name__)
        engines.append(self)
        return update_weights(self, state)

    def spy_fetch(self, ref):  # the real fetch, counted
        fetched.append(self.name)
        return fetch(self, ref)

    monkeypatch.setattr(actors.RemoteEngine, "update_weights", spy_update)
    monkeypatch.setattr(workers.LearnerGroup, "fetch", spy_fetch)
    extra = ("train.steps=2", "train.checkpoint_every=0", "runtime.ray=true")
    base = train_into(resolve_run(wf, workers_config(wf, tiny_model_dir, *extra)), tmp_path / "w0")
    del sent[:]

    def kill_engine(step, metrics):
        if step == 1:
            local_ray.kill(engines[-1].actor, no_restart=False)

    dist = train_into(resolve_run(wf, workers_config(wf, tiny_model_dir, *extra, "runtime.learner_workers=2")), tmp_path / "w2",
                 on_step=kill_engine)
    assert sent == ["ObjectRef", "ObjectRef"]  # each step's weights, by ref
    assert fetched == ["shared"]  # only the final checkpoint needed them in the driver
    assert engines[-1].restarts == 1
    assert_same_records(records(base.run_dir), records(dist.run_dir))
    assert_close_weights(weights(base.checkpoints[-1], "shared"), weights(dist.checkpoints[-1], "shared"), rtol=RTOL_TWO_STEPS)


def test_an_fsdp_group_with_a_killed_worker_is_restarted(runs, tiny_model_dir, tmp_path):
    """Rank 1 of an FSDP group SIGKILLed after step 1: the group restarts (its shards rebuilt from
    the driver's weights and the whole AdamW state every rank gathered after step 1), redoes
    step 2's update, and the run ends as the uninterrupted FSDP run."""
    import io

    from rich.console import Console

    wf, printed = shared_toy(), io.StringIO()
    cfg = workers_config(wf, tiny_model_dir, *EXTRA, "runtime.learner_fsdp=true", "runtime.learner_restarts=1")
    done = train_into(resolve_run(wf, cfg), tmp_path / "run", console=Console(file=printed, width=400),
                 on_step=kill_rank_1_after_step_1(printed))
    assert done.steps == 2 and "restarted learner shared: 2 workers (FSDP)" in printed.getvalue()
    assert_close_weights(weights(runs[True].checkpoints[-1], "shared"), weights(done.checkpoints[-1], "shared"),
                         rtol=RTOL)
    assert_same_records(records(runs[True].run_dir), records(tmp_path / "run"))
