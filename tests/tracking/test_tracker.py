"""The Tracker against a real `mlflow server` (fixture in conftest.py) and the default SQLite store."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from masdsl.config import RunRecord, flatten, resolve_config, to_yaml
from masdsl.errors import UserError
from masdsl.tracking import NullTracker, Tracker, TrackingError, start_run
from tests.support.overrides import NO_TRACKING
from tests.support.tracking import artifact_paths, children, history, journal, step_metrics, unique

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def have_dot() -> bool:
    return shutil.which("dot") is not None


def test_run_records_parent_children_params_tags_metrics_artifacts(mlflow_server, make_workflow, tmp_path):
    # long: one MLflow run tree written and read back, field by field
    from mlflow.tracking import MlflowClient

    wf = make_workflow(unique("wf"))
    cfg = resolve_config(train_block={"samples": 2, "grouping": "agent"},
                         overrides=[f"tracking.uri={mlflow_server.uri}"])
    tracker = start_run(wf, RunRecord.of(cfg), kind="run", run_dir=tmp_path / "run")
    assert isinstance(tracker, Tracker) and tracker.run_id
    for step in range(3):
        tracker.log_metrics(step_metrics(step), step=step)
    tracker.log_metrics({"success/eval": 0.5, "pass@1": 0.25, "skipped": None}, step=2)
    tracker.log_text("## episode 0\ncoder: print(1)\n", "transcripts/eval_step2/episode0.md")
    extra = tmp_path / "weights.txt"
    extra.write_text("adapter")
    tracker.log_artifact(extra, "weights")
    (tmp_path / "adapter" / "sub").mkdir(parents=True)
    (tmp_path / "adapter" / "sub" / "a.json").write_text("{}")
    tracker.log_artifact(tmp_path / "adapter", "weights")
    tracker.finish()
    assert f"/#/experiments/{tracker.experiment_id}/runs/{tracker.run_id}?" in tracker.ui_command()

    client = MlflowClient(mlflow_server.uri)
    exp = client.get_experiment_by_name(wf.name)  # experiment named after the workflow
    assert exp is not None and exp.tags["mlflow.experimentKind"] == "custom_model_development"
    run = client.get_run(tracker.run_id)
    assert run.info.experiment_id == exp.experiment_id and run.info.status == "FINISHED"

    # params: the whole resolved config, flattened
    assert run.data.params == {k: str(v) for k, v in flatten(cfg).items()}
    assert run.data.params["train.samples"] == "2"
    # tags: workflow, hash, grouping, roles per policy
    tags = run.data.tags
    assert tags["masdsl.workflow"] == wf.name and tags["masdsl.file_hash"] == wf.file_hash
    assert len(wf.file_hash) == 64 and tags["mlflow.note.content"].startswith(wf.description + "\n\n**Key metrics**")
    assert tags["masdsl.grouping"] == "agent" and tags["masdsl.kind"] == "run"
    assert tags["masdsl.roles.writer"] == "coder" and tags["masdsl.roles.checker"] == "tester"

    # metrics on the parent, with their steps
    assert history(client, run.info.run_id, "success/train") == [(0, 0.0), (1, 0.1), (2, 0.2)]
    assert history(client, run.info.run_id, "loss/checker") == [(0, 0.0), (1, 0.2), (2, 0.4)]
    key = {"Key metrics/success train", "Key metrics/success eval"}  # the headline, again, charted first
    assert set(step_metrics(0)) | {"success/eval", "pass_1"} | key == set(run.data.metrics)  # `@` is not allowed
    assert history(client, run.info.run_id, "Key metrics/success train") == [(0, 0.0), (1, 0.1), (2, 0.2)]

    # one child run per policy, with its own policy metrics (and its roles' rewards)
    kids = children(client, run)
    assert set(kids) == {"writer", "checker"}
    for policy, role in (("writer", "coder"), ("checker", "tester")):
        kid = kids[policy]
        assert kid.info.status == "FINISHED"
        assert kid.data.tags["masdsl.policy"] == policy and kid.data.tags["masdsl.roles"] == role
        assert {f"{m}/{policy}" for m in ("loss", "clip_frac", "kl", "grad_norm")} <= set(kid.data.metrics)
        assert f"reward/{role}/turn0" in kid.data.metrics
        other = "checker" if policy == "writer" else "writer"
        assert f"loss/{other}" not in kid.data.metrics and "success/train" not in kid.data.metrics
    assert history(client, kids["writer"].info.run_id, "loss/writer") == [(0, 0.0), (1, 0.1), (2, 0.2)]

    # artifacts: source, resolved config, transcript, extra file, progress plot
    paths = artifact_paths(client, run.info.run_id)
    assert {f"source/{wf.name}.mas", "config/resolved.yaml", "plots/progress.png",
            "transcripts/eval_step2/episode0.md", "weights/weights.txt", "weights/adapter/sub/a.json"} <= paths
    from masdsl.lang.graph import to_mermaid

    assert {"graph/workflow.mmd", "graph/workflow.dot"} <= paths
    assert ("graph/workflow.svg" in paths) == have_dot()
    got = Path(client.download_artifacts(run.info.run_id, "graph/workflow.mmd", str(tmp_path)))
    assert got.read_text() == to_mermaid(wf) and "coder & tester" in got.read_text()
    got = Path(client.download_artifacts(run.info.run_id, f"source/{wf.name}.mas", str(tmp_path)))
    assert got.read_text() == wf.source
    got = Path(client.download_artifacts(run.info.run_id, "config/resolved.yaml", str(tmp_path)))
    assert got.read_text() == to_yaml(cfg)
    got = Path(client.download_artifacts(run.info.run_id, "plots/progress.png", str(tmp_path)))
    assert got.read_bytes()[:8] == PNG_MAGIC and got.stat().st_size > 5000
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # nothing had to be buffered


def test_server_outage_mid_run_buffers_and_flushes(mlflow_server, make_workflow, tmp_path, capsys):
    from mlflow.tracking import MlflowClient

    wf = make_workflow(unique("outage"))
    cfg = resolve_config(overrides=[f"tracking.uri={mlflow_server.uri}"])
    tracker = start_run(wf, RunRecord.of(cfg), kind="run", run_dir=tmp_path / "run")
    tracker.outbox.retry_every_s = 0.5  # retry sooner than the default so the test is short
    tracker.log_metrics(step_metrics(0), step=0)
    mlflow_server.stop()
    try:
        t0 = time.monotonic()
        for step in (1, 2, 3):
            tracker.log_metrics(step_metrics(step), step=step)  # must neither raise nor stall
        tracker.log_text("transcript during outage", "transcripts/outage.md")
        outage_s = time.monotonic() - t0
        assert tracker.outbox.down and len(tracker.outbox) == 4
    finally:
        mlflow_server.start()
    # MLflow's defaults (7 retries, exponential backoff) would stall each call for minutes
    assert outage_s < 30, f"logging during the outage took {outage_s:.1f} s"
    err = capsys.readouterr().err
    assert err.count("tracking server unreachable") == 1, err

    rows = [r for r in journal(tmp_path / "run") if r.get("op") == "metrics"]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert rows[2]["metrics"]["loss/writer"] == pytest.approx(0.3)

    time.sleep(0.6)
    tracker.log_metrics(step_metrics(4), step=4)  # the server is back: everything is sent now
    assert not tracker.outbox.down and len(tracker.outbox) == 0
    assert "tracking server is back" in capsys.readouterr().err

    client = MlflowClient(mlflow_server.uri)
    assert [s for s, _ in history(client, tracker.run_id, "success/train")] == [0, 1, 2, 3, 4]
    assert history(client, tracker.run_id, "loss/writer")[3] == (3, pytest.approx(0.3))
    writer = children(client, client.get_run(tracker.run_id))["writer"]
    assert [s for s, _ in history(client, writer.info.run_id, "loss/writer")] == [0, 1, 2, 3, 4]
    assert "transcripts/outage.md" in artifact_paths(client, tracker.run_id)

    # a second outage that lasts until the end of the run: finish() flushes once it is back
    mlflow_server.stop()
    try:
        tracker.log_metrics(step_metrics(5), step=5)
        assert tracker.outbox.down
    finally:
        mlflow_server.start()
    assert capsys.readouterr().err.count("tracking server unreachable") == 1  # once per outage
    tracker.finish()
    assert len(tracker.outbox) == 0
    assert [s for s, _ in history(client, tracker.run_id, "success/train")] == [0, 1, 2, 3, 4, 5]
    assert client.get_run(tracker.run_id).info.status == "FINISHED"
    assert {r.info.status for r in children(client, client.get_run(tracker.run_id)).values()} == {"FINISHED"}
    assert "plots/progress.png" in artifact_paths(client, tracker.run_id)


def test_run_ending_during_an_outage_is_completed_by_resend(mlflow_server, make_workflow, tmp_path, capsys):
    from mlflow.tracking import MlflowClient

    from masdsl.tracking.resend import main as resend_main

    wf = make_workflow(unique("resend"))
    run_dir = tmp_path / "run"
    tracker = start_run(wf, RunRecord.of(resolve_config(overrides=[f"tracking.uri={mlflow_server.uri}"])), kind="run",
                        run_dir=run_dir)
    tracker.log_metrics(step_metrics(0), step=0)
    mlflow_server.stop()
    try:
        tracker.log_metrics(step_metrics(1), step=1)
        tracker.log_metrics(step_metrics(2), step=2)
        tracker.finish_wait_s = 1.0
        tracker.finish()  # the server is still away: the end of the run cannot be sent
        err = capsys.readouterr().err
        assert f"python -m masdsl.tracking.resend {run_dir}" in err, err
    finally:
        mlflow_server.start()
    client = MlflowClient(mlflow_server.uri)
    assert client.get_run(tracker.run_id).info.status == "RUNNING"
    assert resend_main([str(run_dir)]) == 0
    assert "sent 34 metric values" in capsys.readouterr().out  # 2 steps x 16 metrics and `Key metrics/success train`
    assert [s for s, _ in history(client, tracker.run_id, "success/train")] == [0, 1, 2]
    kids = children(client, client.get_run(tracker.run_id))
    assert [s for s, _ in history(client, kids["checker"].info.run_id, "loss/checker")] == [0, 1, 2]
    assert client.get_run(tracker.run_id).info.status == "FINISHED"
    assert {k.info.status for k in kids.values()} == {"FINISHED"}
    assert resend_main([str(run_dir)]) == 0  # twice is harmless: no duplicate points
    assert len(client.get_metric_history(tracker.run_id, "success/train")) == 3


def test_unreachable_from_the_start_never_raises(make_workflow, tmp_path, capsys):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    wf = make_workflow(unique("down"))
    cfg = resolve_config(overrides=[f"tracking.uri=http://127.0.0.1:{port}"])
    t0 = time.monotonic()
    tracker = start_run(wf, RunRecord.of(cfg), kind="eval", run_dir=tmp_path / "run")
    for step in range(5):
        tracker.log_metrics(step_metrics(step), step=step)
    tracker.log_text("t", "transcripts/x.md")
    tracker.finish_wait_s = 1.0
    tracker.finish()
    assert time.monotonic() - t0 < 30
    assert tracker.run_id is None and len(tracker.outbox) > 0
    err = capsys.readouterr().err
    assert err.count("tracking server unreachable") == 1, err
    assert "could not be sent before the end of the run" in err
    rows = journal(tmp_path / "run")
    assert [r["step"] for r in rows if r["op"] == "metrics"] == [0, 1, 2, 3, 4]
    assert rows[0]["op"] == "create_parent" and rows[0]["run_id"] is None  # kept for `resend`
    assert (tmp_path / "run" / "progress.png").read_bytes()[:8] == PNG_MAGIC


def test_default_store_is_sqlite_in_the_working_directory(make_workflow, tmp_path, monkeypatch, capsys):
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    wf = make_workflow(unique("local"))
    with start_run(wf, RunRecord.of(resolve_config()), kind="eval", run_dir=Path("runs/e1")) as tracker:
        tracker.log_metrics({"success/eval": 0.75, "reward/coder/turn0": 1.0}, step=0)
    db = tmp_path / "mlflow.db"
    assert db.exists()
    command = f"mlflow ui --backend-store-uri sqlite:///{db}"
    assert tracker.ui_command() == command
    assert command in capsys.readouterr().err
    run = MlflowClient(f"sqlite:///{db}").get_run(tracker.run_id)
    assert run.data.metrics == {"success/eval": 0.75, "reward/coder/turn0": 1.0, "Key metrics/success eval": 0.75}
    assert run.data.tags["masdsl.kind"] == "eval" and run.info.status == "FINISHED"


def test_failed_run_is_marked_failed(mlflow_server, make_workflow, tmp_path):
    from mlflow.tracking import MlflowClient

    uri = mlflow_server.uri
    cfg = resolve_config(overrides=[f"tracking.uri={uri}", "tracking.experiment=custom_name"])
    with pytest.raises(RuntimeError):
        with start_run(make_workflow(unique("fail")), RunRecord.of(cfg), kind="run", run_dir=tmp_path / "r") as tracker:
            raise RuntimeError("training crashed")
    client = MlflowClient(uri)
    run = client.get_run(tracker.run_id)
    assert run.info.status == "FAILED"
    assert client.get_experiment(run.info.experiment_id).name == "custom_name"  # overrides the workflow name
    assert {r.info.status for r in children(client, run).values()} == {"FAILED"}


def test_log_weights_stores_each_policy_of_the_checkpoint_it_is_given(make_workflow, tmp_path, capsys):
    """`tracking.log_weights`: the trainer hands `finish()` its newest checkpoint; each policy's
    file goes to its child run (a frozen policy has none); no checkpoint: a message, no upload."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = resolve_config(overrides=[f"tracking.uri={uri}", "tracking.log_weights=true"])
    ckpt = tmp_path / "somewhere" / "step_000002"
    (ckpt / "policies").mkdir(parents=True)
    (ckpt / "policies" / "writer.safetensors").write_bytes(b"weights of writer")
    tracker = start_run(make_workflow(unique("weights")), RunRecord.of(cfg), kind="run", run_dir=tmp_path / "r")
    tracker.finish(checkpoint=ckpt)
    client = MlflowClient(uri)
    kids = children(client, client.get_run(tracker.run_id))
    assert artifact_paths(client, kids["writer"].info.run_id) == {"weights/writer.safetensors"}
    assert artifact_paths(client, kids["checker"].info.run_id) == set()

    bare = start_run(make_workflow(unique("weights")), RunRecord.of(cfg), kind="run", run_dir=tmp_path / "r2")
    bare.finish()
    assert f"tracking.log_weights: no complete checkpoint in {tmp_path / 'r2'}" in capsys.readouterr().err
    assert all(not artifact_paths(client, k.info.run_id)
               for k in children(client, client.get_run(bare.run_id)).values())


def test_disabled_and_bad_uri(make_workflow, tmp_path):
    off = start_run(make_workflow("w"), RunRecord.of(resolve_config(overrides=[NO_TRACKING])),
                    kind="run", run_dir=tmp_path)
    assert isinstance(off, NullTracker) and off.run_id is None
    with pytest.raises(TrackingError) as err:
        start_run(make_workflow("w"), RunRecord.of(resolve_config(overrides=["tracking.uri=htp://x:1"])),
                  kind="run", run_dir=tmp_path)
    assert isinstance(err.value, UserError) and "unknown scheme `htp`" in str(err.value)
