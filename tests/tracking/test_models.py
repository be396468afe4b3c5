"""Policies logged as MLflow transformers models and registered with their lineage, system
metrics on training runs, against the real `mlflow server` of conftest.py."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from masdsl.config import RunRecord, resolve_config
from masdsl.tracking import start_run

from tests.support.tracking import children, unique


def test_log_models_logs_each_policy_in_its_child_run_and_registers_it(mlflow_server, make_workflow,
                                                                       tiny_model_dir, tmp_path, capsys):
    import mlflow.artifacts
    import mlflow.transformers
    from mlflow.tracking import MlflowClient

    wf = make_workflow(unique("models"))
    cfg = resolve_config(overrides=[f"tracking.uri={mlflow_server.uri}", "tracking.register=true"])
    tracker = start_run(wf, RunRecord.of(cfg), kind="run", run_dir=tmp_path / "run")
    assert tracker.wants_models
    tracker.log_models({"writer": tiny_model_dir, "checker": tiny_model_dir, "nobody": tiny_model_dir,
                        }, step=3)
    tracker.log_models({"writer": tmp_path}, step=3)  # not an HF folder: skipped with a message
    tracker.finish()
    err = capsys.readouterr().err
    assert "`nobody` is not a policy" in err and "is not a Hugging Face model folder" in err

    client = MlflowClient(mlflow_server.uri)
    kids = children(client, client.get_run(tracker.run_id))
    for policy, role in (("writer", "coder"), ("checker", "tester")):
        kid = client.get_run(kids[policy].info.run_id)
        outputs = kid.outputs.model_outputs
        assert len(outputs) == 1 and outputs[0].step == 3
        model = client.get_logged_model(outputs[0].model_id)
        assert model.name == policy and model.source_run_id == kid.info.run_id
        assert str(model.status) in ("READY", "LoggedModelStatus.READY")
        assert model.experiment_id == kid.info.experiment_id
        assert model.tags["masdsl.file_hash"] == wf.file_hash and model.tags["masdsl.roles"] == role

        versions = client.search_model_versions(f"name='{wf.name}-{policy}'")
        assert len(versions) == 1
        version = versions[0]
        assert version.run_id == kid.info.run_id and version.status == "READY"
        assert version.tags == {
            "masdsl.workflow": wf.name, "masdsl.file_hash": wf.file_hash, "masdsl.policy": policy,
            "masdsl.roles": role, "masdsl.step": "3", "masdsl.run_id": tracker.run_id,
            "masdsl.child_run_id": kid.info.run_id,
        }
    assert not client.search_model_versions(f"name='{wf.name}-nobody'")

    # the logged model is the folder's weights in MLflow's transformers flavour, and loads back
    model_id = client.get_run(kids["writer"].info.run_id).outputs.model_outputs[0].model_id
    local = Path(mlflow.artifacts.download_artifacts(
        artifact_uri=client.get_logged_model(model_id).artifact_location, tracking_uri=mlflow_server.uri,
        dst_path=str(tmp_path / "down")))
    assert "transformers:" in (local / "MLmodel").read_text() and "task: text-generation" in (local / "MLmodel").read_text()
    assert (local / "model" / "model.safetensors").read_bytes() == (tiny_model_dir / "model.safetensors").read_bytes()
    registered = Path(mlflow.artifacts.download_artifacts(  # the registered version points at the same model
        artifact_uri=client.get_model_version_download_uri(f"{wf.name}-writer", "1"), tracking_uri=mlflow_server.uri,
        dst_path=str(tmp_path / "reg")))
    assert (registered / "model" / "model.safetensors").read_bytes() == (tiny_model_dir / "model.safetensors").read_bytes()
    pipe = mlflow.transformers.load_model(str(local))
    assert type(pipe).__name__ == "TextGenerationPipeline"
    assert isinstance(pipe("def f", max_new_tokens=4, do_sample=False)[0]["generated_text"], str)


def test_log_models_without_register_logs_only(make_workflow, tiny_model_dir, tmp_path):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    wf = make_workflow(unique("noreg"))
    tracker = start_run(wf, RunRecord.of(resolve_config(overrides=[f"tracking.uri={uri}", "tracking.log_models=true"])),
                        kind="run", run_dir=tmp_path / "run")
    assert tracker.wants_models
    tracker.log_models({"checker": tiny_model_dir})
    tracker.finish()
    client = MlflowClient(uri)
    kids = children(client, client.get_run(tracker.run_id))
    assert len(client.get_run(kids["checker"].info.run_id).outputs.model_outputs) == 1
    assert not client.get_run(kids["writer"].info.run_id).outputs.model_outputs
    assert not client.search_registered_models()
    off = start_run(wf, RunRecord.of(resolve_config(overrides=[f"tracking.uri={uri}"])), kind="run", run_dir=tmp_path / "r2")
    assert not off.wants_models  # the default: nothing exported, nothing logged
    off.finish()


def monitor_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "SystemMetricsMonitor" and t.is_alive()]


def test_system_metrics_are_logged_on_training_runs_and_stopped_by_finish(mlflow_server, make_workflow,
                                                                          tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL", "0.5")
    wf = make_workflow(unique("system"))
    uri = [f"tracking.uri={mlflow_server.uri}"]
    tracker = start_run(wf, RunRecord.of(resolve_config(overrides=uri)), kind="run", run_dir=tmp_path / "run")
    assert tracker.monitor is not None and len(monitor_threads()) == 1
    deadline = time.monotonic() + 60
    client = MlflowClient(mlflow_server.uri)
    while time.monotonic() < deadline and "system/cpu_utilization_percentage" not in client.get_run(
            tracker.run_id).data.metrics:
        time.sleep(0.5)
    tracker.finish()
    assert tracker.monitor is None and monitor_threads() == []
    metrics = client.get_run(tracker.run_id).data.metrics
    assert {"system/cpu_utilization_percentage", "system/system_memory_usage_megabytes"} <= set(metrics)
    assert 0.0 <= metrics["system/cpu_utilization_percentage"] <= 100.0 * 64

    evaluation = start_run(wf, RunRecord.of(resolve_config(overrides=uri)), kind="eval", run_dir=tmp_path / "eval")
    off = start_run(wf, RunRecord.of(resolve_config(overrides=[*uri, "tracking.system_metrics=false"])), kind="run",
                    run_dir=tmp_path / "off")
    assert evaluation.monitor is None and off.monitor is None and monitor_threads() == []
    evaluation.finish()
    off.finish()
