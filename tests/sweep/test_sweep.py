"""`masdsl sweep` end to end: 2 arms x 2 seeds of a tiny model as Ray tasks on a local Ray
instance, one MLflow parent with four tagged children, a comparison equal to the children's
metrics, and a sweep killed after two trials that, restarted, runs only the other two."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time

import pytest

from masdsl.cli import main
from masdsl.errors import UserError
from masdsl.sweep.runner import check_spec
from masdsl.sweep.grid import expand, trials
from tests.support.overrides import NO_TRACKING, tiny_hf
from tests.support.toy import TOY

pytest.importorskip("ray")
pytest.importorskip("mlflow")


def sweep_overrides(tiny_model_dir, tmp_path) -> list[str]:
    return ["train.lr=1e-5,3e-5", f"policy.shared.model={tiny_model_dir}", "runtime.engine=hf",
            f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}", "train.samples=2", "train.batch=4",
            "train.eval_tasks=2", "train.steps=1"]


def sweep_argv(tiny_model_dir, tmp_path) -> list[str]:
    return ["sweep", str(TOY), *sweep_overrides(tiny_model_dir, tmp_path), "--seeds", "0,1",
            "--out", str(tmp_path / "sweep"), "--trial-cpus", "1"]


def children(tmp_path, parent_id):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    parent = client.get_run(parent_id)
    runs = client.search_runs([parent.info.experiment_id], f"tags.`mlflow.parentRunId` = '{parent_id}'")
    return client, parent, runs


def test_a_2x2_sweep_killed_after_two_trials_resumes_and_compares_its_children(tiny_model_dir, tmp_path, local_ray, capsys):
    argv = sweep_argv(tiny_model_dir, tmp_path)
    results = tmp_path / "sweep" / "results.jsonl"
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    proc = subprocess.Popen([sys.executable, "-m", "masdsl", *argv], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 300
    try:
        while not (results.exists() and len(results.read_text().splitlines()) >= 2):
            assert proc.poll() is None, "the sweep ended before two trials finished"
            assert time.monotonic() < deadline, "two trials did not finish in 300 s"
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # the whole process group: the driver and its Ray
        proc.wait()
    finished = [json.loads(line)["id"] for line in results.read_text().splitlines()]
    assert len(finished) in (2, 3)  # a third may have ended between the poll and the kill
    # the same command again: only the trials that had not finished run
    from masdsl.sweep.runner import run_sweep

    overrides = sweep_overrides(tiny_model_dir, tmp_path)
    common, arms = expand(overrides)
    result = run_sweep(str(TOY), overrides, [0, 1], out=tmp_path / "sweep", trial_cpus=1, say=lambda _: None)
    everyone = [t.id for t in trials(arms, [0, 1], common)]
    assert everyone == ["train.lr=1e-5,seed=0", "train.lr=1e-5,seed=1", "train.lr=3e-5,seed=0", "train.lr=3e-5,seed=1"]
    assert sorted(result.ran) == sorted(set(everyone) - set(finished)) and len(result.ran) >= 1
    assert [r["id"] for r in result.rows] == everyone
    # one MLflow parent (reopened, then finished) with the four trials as tagged children
    client, parent, runs = children(tmp_path, result.parent_run_id)
    assert parent.data.tags["masdsl.kind"] == "sweep" and parent.info.status == "FINISHED"
    assert sorted(r.data.tags["masdsl.sweep.trial"] for r in runs) == everyone
    assert {r.data.tags["masdsl.sweep.override.train.lr"] for r in runs} == {"1e-5", "3e-5"}
    # the comparison's numbers are the children's own metrics, averaged over the seeds
    for arm in ("train.lr=1e-5", "train.lr=3e-5"):
        mine = [r for r in runs if r.data.tags["masdsl.sweep.arm"] == arm]
        final = [client.get_metric_history(r.info.run_id, "success/eval")[-1].value for r in mine]
        reward = [client.get_metric_history(r.info.run_id, "reward/eval")[-1].value for r in mine]
        line = next(x for x in result.lines if x["arm"] == arm)
        assert line["final_success"][0] == pytest.approx(statistics.fmean(final), abs=1e-9)
        assert line["eval_reward"][0] == pytest.approx(statistics.fmean(reward), abs=1e-9)
        assert line["seeds"] == [0, 1] and f"| `{arm}` | 0,1 |" in result.table
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"comparison.md", "comparison.json", "curves"} <= artifacts
    assert {a.path for a in client.list_artifacts(parent.info.run_id, "curves")} == {
        "curves/success_eval.png", "curves/reward_eval.png", "curves/groups_nonflat_frac.png"}
    # a third run has nothing left to do, and the CLI prints the same table
    assert main(argv) == 0
    assert capsys.readouterr().out == result.table


def test_a_trial_cut_off_after_a_checkpoint_continues_from_it(tiny_model_dir, tmp_path, local_ray):
    """A trial whose folder holds a checkpoint (the sweep was killed mid-trial) continues from
    that step instead of starting again, and writes its progress lines to progress.log."""
    from masdsl import api
    from masdsl.sweep.runner import PROGRESS_LOG, run_sweep

    common = [*tiny_hf(tiny_model_dir),
              "train.samples=2", "train.batch=2", "train.eval_tasks=2", "train.checkpoint_every=1"]
    (trial,) = trials([[]], [0], [*common, "train.steps=2"])
    folder = tmp_path / "sweep" / "trials" / trial.folder
    api.train(TOY, [*common, "train.steps=1", "train.seed=0"], run_dir=folder)  # the cut-off part: step 1 only
    assert sorted(p.name for p in (folder / "checkpoints").iterdir()) == ["step_000001"]
    said: list[str] = []
    result = run_sweep(str(TOY), [*common, "train.steps=2"], [0], out=tmp_path / "sweep", trial_cpus=1, say=said.append)
    assert f"trial {trial.id}: continues from step_000001" in said
    assert result.ran == [trial.id] and result.rows[0]["curves"]["groups/nonflat_frac"][-1][0] == 2
    steps = [json.loads(line)["step"] for line in (folder / "records.jsonl").read_text().splitlines()]
    assert sorted(set(steps)) == [1, 2]  # step 1's records from the first part, step 2's from the continuation
    log = (folder / PROGRESS_LOG).read_text()
    assert "step 2/2" in log and "step 1/2" not in log


@pytest.mark.parametrize("argv, message", [
    (["train.seed=1,2"], "give the seeds with --seeds"),
    (["train.lr=1e-5,"], "an empty value between commas"),
    (["train.lr=1e-5,2e-5", "--seeds", "0,x"], "`x` is not a seed"),
    (["train.lr=1e-5,2e-5", "train.steps=-1,2"], "train.steps"),
])
def test_sweep_mistakes_exit_2_before_any_trial(tmp_path, capsys, argv, message):
    assert main(["sweep", str(TOY), *argv, NO_TRACKING, "--out", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "s" / "results.jsonl").exists()


def test_a_restart_with_another_grid_is_refused(tmp_path, capsys):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "sweep.json").write_text(json.dumps(
        {"name": "x", "file": str(TOY.resolve()), "overrides": ["train.lr=1,2"], "seeds": [0], "configs": []}))
    assert main(["sweep", str(TOY), "train.lr=1e-5,2e-5", NO_TRACKING, "--out", str(tmp_path / "s")]) == 2
    assert "holds another sweep (overrides" in capsys.readouterr().err


def test_more_seeds_extend_a_sweep_and_others_are_refused(tmp_path):
    spec = {"name": "x", "file": "/w.mas", "overrides": ["train.lr=1,2"], "seeds": [0], "configs": [],
            "trials": ["train.lr=1,seed=0", "train.lr=2,seed=0"], "parent_run_id": "p"}
    check_spec(tmp_path, spec)
    more = {**spec, "seeds": [0, 1], "parent_run_id": None,
            "trials": [*spec["trials"], "train.lr=1,seed=1", "train.lr=2,seed=1"]}
    assert check_spec(tmp_path, more)["parent_run_id"] == "p"  # the same sweep, its MLflow parent kept
    saved = json.loads((tmp_path / "sweep.json").read_text())
    assert saved["seeds"] == [0, 1] and len(saved["trials"]) == 4
    with pytest.raises(UserError, match=r"seeds: \[0, 1\] now \[1\]"):
        check_spec(tmp_path, {**more, "seeds": [1]})  # dropping a seed is another sweep


def test_a_running_trial_reports_the_step_of_its_newest_whole_record(tmp_path):
    from masdsl.sweep.runner import latest_step

    assert latest_step(tmp_path) is None
    big = [0] * 40_000  # records hold token ids: lines longer than the first read window
    lines = [json.dumps({"step": s, "prompt_ids": big}) for s in (0, 0, 1, 2)]
    (tmp_path / "records.jsonl").write_text("\n".join(lines) + "\n" + '{"step": 3, "prompt_ids": [0, 0')  # mid-write
    assert latest_step(tmp_path) == 2
    (tmp_path / "records.jsonl").write_text(json.dumps({"step": 5}) + "\n")
    assert latest_step(tmp_path) == 5


def test_a_trial_that_run_would_refuse_stops_the_sweep_before_any_trial(tmp_path, capsys):
    argv = ["sweep", str(TOY), "train.lr=1e-5,2e-5", "policy.shared.model=/no/such/model", NO_TRACKING,
            "--out", str(tmp_path / "s")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "/no/such/model" in err and "Traceback" not in err and not (tmp_path / "s" / "trials").exists()


def test_run_multirun_is_the_sweep_of_the_same_overrides(tmp_path, capsys, monkeypatch):
    """`masdsl run -m` hands its overrides to the sweep: the sweep's own checks answer, not run's."""
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(TOY), "train.seed=1,2"]) == 2
    assert "this command runs one configuration" in capsys.readouterr().err
    assert main(["run", str(TOY), "-m", "train.seed=1,2", NO_TRACKING]) == 2
    assert "give the seeds with --seeds" in capsys.readouterr().err
    argv = ["run", str(TOY), "--multirun", "train.lr=1e-5,2e-5", "policy.shared.model=/no/such/model"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "/no/such/model" in err and "Traceback" not in err and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("flag", ["--dry-run", "--print-config"])
def test_run_multirun_refuses_the_flags_of_one_configuration(tmp_path, capsys, monkeypatch, flag):
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(TOY), "--multirun", "train.lr=1e-5,2e-5", flag]) == 2
    assert f"cannot take {flag}" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
