"""A tracking server that is away for the whole run: the run, its child runs, params, tags,
metrics, files and models are created by `python -m masdsl.tracking.resend` once it answers."""

from __future__ import annotations

from pathlib import Path

from masdsl.config import RunRecord, flatten, resolve_config
from masdsl.tracking import start_run
from masdsl.tracking.resend import main as resend_main

from tests.support.tracking import MlflowServer, artifact_paths, children, history, journal, step_metrics, unique


def test_run_with_the_server_away_from_start_to_end_is_created_by_resend(make_workflow, tiny_model_dir,
                                                                       tmp_path, capsys):
    from mlflow.tracking import MlflowClient

    (tmp_path / "late").mkdir()
    server = MlflowServer(tmp_path / "late")  # its port is chosen now; it starts after the run
    wf = make_workflow(unique("away"))
    cfg = resolve_config(overrides=[f"tracking.uri={server.uri}", "tracking.register=true"])
    run_dir = tmp_path / "run"
    tracker = start_run(wf, RunRecord.of(cfg), kind="run", run_dir=run_dir)
    for step in range(3):
        tracker.log_metrics(step_metrics(step), step=step)
    tracker.log_text("## episode 0\ncoder: print(1)\n", "traces/eval_step000002.md")
    tracker.log_models({"writer": tiny_model_dir}, step=2)
    tracker.finish_wait_s = 0.5
    tracker.finish()
    assert tracker.run_id is None and tracker.monitor is None
    err = capsys.readouterr().err
    assert err.count("tracking server unreachable") == 1
    assert f"python -m masdsl.tracking.resend {run_dir}" in err
    stamps = [r["timestamp"] for r in journal(run_dir) if r["op"] == "metrics"]

    server.start()
    try:
        assert resend_main([str(run_dir)]) == 0
        assert "sent 51 metric values" in capsys.readouterr().out  # 3 steps x 16 metrics and `Key metrics/success train`
        client = MlflowClient(server.uri)
        exp = client.get_experiment_by_name(wf.name)
        assert exp is not None and exp.tags["mlflow.experimentKind"] == "custom_model_development"
        runs = client.search_runs([exp.experiment_id])
        parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
        assert len(parents) == 1 and len(runs) == 3
        run = parents[0]
        assert run.info.status == "FINISHED" and run.info.run_name == "run run"
        assert run.info.start_time == tracker._started_ms and run.info.end_time >= run.info.start_time
        assert run.data.params == {k: str(v) for k, v in flatten(cfg).items()}
        assert run.data.tags["masdsl.workflow"] == wf.name and run.data.tags["masdsl.file_hash"] == wf.file_hash
        assert run.data.tags["masdsl.run_dir"] == str(run_dir.resolve())
        assert history(client, run.info.run_id, "success/train") == [(0, 0.0), (1, 0.1), (2, 0.2)]
        assert sorted(m.timestamp for m in client.get_metric_history(run.info.run_id, "success/train")) == stamps
        kids = children(client, run)
        assert set(kids) == {"writer", "checker"} and {k.info.status for k in kids.values()} == {"FINISHED"}
        assert kids["writer"].data.params["roles"] == "coder"
        assert [s for s, _ in history(client, kids["writer"].info.run_id, "loss/writer")] == [0, 1, 2]
        assert "loss/writer" not in kids["checker"].data.metrics

        paths = artifact_paths(client, run.info.run_id)
        assert {f"source/{wf.name}.mas", "config/resolved.yaml", "graph/workflow.mmd", "plots/progress.png",
                "traces/eval_step000002.md"} <= paths
        got = Path(client.download_artifacts(run.info.run_id, "traces/eval_step000002.md", str(tmp_path)))
        assert got.read_text() == "## episode 0\ncoder: print(1)\n"
        (version,) = client.search_model_versions(f"name='{wf.name}-writer'")
        assert version.run_id == kids["writer"].info.run_id and version.tags["masdsl.run_id"] == run.info.run_id

        assert resend_main([str(run_dir)]) == 0  # twice is harmless: nothing is created twice
        assert len(client.search_runs([exp.experiment_id])) == 3
        assert len(client.get_metric_history(run.info.run_id, "success/train")) == 3
        assert len(client.search_model_versions(f"name='{wf.name}-writer'")) == 1
    finally:
        server.stop()
