"""One MLflow run per training and one step numbering, on the tiny model with an SQLite store.

- step N is the N-th update everywhere: the rollout records and `masdsl trace --step N`, the
  checkpoint `step_00000N`, MLflow's step axis and the evaluation files;
- Ctrl-C (SIGINT to a real `masdsl run`, once a step has been checkpointed) prints the exact
  command that continues the run and leaves no leaked shared memory; that command continues the
  same MLflow run, which ends FINISHED with continuous curves (not one KILLED and one FINISHED).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from masdsl.cli import main
from tests.support.toy import TOY


def run_args(model: Path, tmp: Path, *extra: str) -> list[str]:
    return [str(TOY), f"policy.shared.model={model}", "runtime.engine=hf", f"tracking.uri=sqlite:///{tmp}/mlflow.db",
            f"runtime.runs_dir={tmp}/runs", "train.samples=2", "train.batch=4", "train.eval_tasks=2",
            "train.checkpoint_every=1", "tracking.system_metrics=false", *extra]


def parents(client, tags_run_dir: Path | None = None):
    exp = client.get_experiment_by_name("toy_digits")
    runs = client.search_runs([exp.experiment_id])
    return [r for r in runs if "mlflow.parentRunId" not in r.data.tags], runs


def steps(client, run_id: str, key: str) -> list[int]:
    return sorted(m.step for m in client.get_metric_history(run_id, key))


def test_step_numbers_agree_between_trace_checkpoints_mlflow_and_evals(tiny_model_dir, tmp_path, capsys):
    from mlflow.tracking import MlflowClient

    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert main(["run", *run_args(tiny_model_dir, tmp_path, "train.steps=2", "train.eval_every=1")]) == 0
    finally:
        torch.set_num_threads(threads)
    (run_dir,) = (tmp_path / "runs" / "toy_digits").iterdir()
    records = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]
    assert sorted({r["step"] for r in records}) == [1, 2]
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step_000001", "step_000002"]
    assert json.loads((run_dir / "checkpoints" / "step_000002" / "state.json").read_text())["step"] == 2
    assert sorted(p.name for p in (run_dir / "eval").iterdir()) == ["step_000000.jsonl", "step_000001.jsonl",
                                                                     "step_000002.jsonl"]
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    (run,), all_runs = parents(client)
    assert steps(client, run.info.run_id, "success/train") == [1, 2]
    assert steps(client, run.info.run_id, "success/eval") == [0, 1, 2]
    (kid,) = [r for r in all_runs if r.data.tags.get("mlflow.parentRunId") == run.info.run_id]
    assert steps(client, kid.info.run_id, "loss/shared") == [1, 2]
    capsys.readouterr()
    assert main(["trace", str(run_dir), "--step", "2", "--no-prompt"]) == 0  # the rollout of the 2nd update
    out = capsys.readouterr().out
    assert "· step 2 ·" in out and "· step 1 ·" not in out
    assert main(["trace", str(run_dir), "--step", "0"]) == 2
    assert "steps: 1, 2, -1 (evaluation)" in capsys.readouterr().err
    assert main(["trace", str(run_dir), "--step", "-1", "--no-prompt"]) == 0
    out = capsys.readouterr().out
    assert all(f"eval at step {s}" in out for s in (0, 1, 2))


CHECKPOINTED = "checkpoints/step_*/state.json"  # any step saved (older ones are pruned as the run goes)


def test_ctrl_c_prints_the_resume_command_and_resume_continues_one_mlflow_run(tiny_model_dir, tmp_path):
    from mlflow.tracking import MlflowClient

    masdsl = Path(sys.executable).with_name("masdsl")
    # far more steps than the interrupt leaves time for: on a quiet machine the toy runs 30 steps
    # in 6 s, and the checkpoint of step 1 is pruned before a 0.2 s poll sees it
    cmd = [str(masdsl), "run", *run_args(tiny_model_dir, tmp_path, "train.steps=100000")]
    # PYTHONFAULTHANDLER: a run that does not stop prints every thread's stack on SIGABRT (below)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONFAULTHANDLER="1")
    with open(tmp_path / "stderr.txt", "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, cwd=tmp_path, env=env)
        try:
            deadline = time.monotonic() + 300
            while not list((tmp_path / "runs").glob(f"toy_digits/*/{CHECKPOINTED}")):  # a step saved, the next under way
                assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "stderr.txt").read_text()[-3000:]
                time.sleep(0.2)
            proc.send_signal(signal.SIGINT)
            try:
                code = proc.wait(timeout=120)
            except subprocess.TimeoutExpired:  # where it hangs, for the failure message
                proc.send_signal(signal.SIGABRT)
                proc.wait(timeout=30)
                raise AssertionError("the run did not stop within 120 s of Ctrl-C; its threads:\n"
                                     + (tmp_path / "stderr.txt").read_text()[-6000:]) from None
            assert code == 130
        finally:
            if proc.poll() is None:
                proc.kill()
    stderr = (tmp_path / "stderr.txt").read_text()
    (run_dir,) = (tmp_path / "runs" / "toy_digits").iterdir()
    assert f"continue with: masdsl run {TOY} --resume {run_dir} " in stderr, stderr[-3000:]
    assert "leaked shared_memory" not in stderr and "Traceback" not in stderr, stderr[-3000:]
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    (killed,), _ = parents(client)
    assert killed.info.status == "KILLED"
    assert json.loads((run_dir / "mlflow.json").read_text())["run_id"] == killed.info.run_id
    done_steps = json.loads((run_dir / "checkpoints" / sorted(p.name for p in (run_dir / "checkpoints").iterdir())[-1]
                             / "state.json").read_text())["step"]

    # the printed command, with one more step than the checkpoint holds
    resume = stderr.split("continue with: masdsl ")[1].splitlines()[0].split()
    assert resume[:4] == ["run", str(TOY), "--resume", str(run_dir)]
    assert main([*resume, f"train.steps={done_steps + 1}"]) == 0
    (run,), all_runs = parents(client)
    assert run.info.run_id == killed.info.run_id and run.info.status == "FINISHED"
    assert steps(client, run.info.run_id, "success/train")[-1] == done_steps + 1
    assert run.data.tags["masdsl.resumed.train.steps"] == str(done_steps + 1)
    kids = [r for r in all_runs if r.data.tags.get("mlflow.parentRunId") == run.info.run_id]
    assert len(kids) == 1 and kids[0].info.status == "FINISHED"
