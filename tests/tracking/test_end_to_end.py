"""`masdsl eval` / `masdsl run` on the tiny model with tracking on a real `mlflow server`."""

from __future__ import annotations

import re
from pathlib import Path

DUO = Path(__file__).parent / "data" / "duo_math.mas"  # roles reasoner/checker, policies thinker/critic


def parent_and_children(client, experiment: str, kind: str):
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None, f"no experiment `{experiment}`"
    runs = client.search_runs([exp.experiment_id], f"tags.`masdsl.kind` = '{kind}'")
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1, [r.info.run_name for r in runs]
    kids = {r.info.run_name: r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id}
    return parents[0], kids


def artifact_paths(client, run_id: str, path: str | None = None) -> set[str]:
    out = set()
    for item in client.list_artifacts(run_id, path):
        out |= artifact_paths(client, run_id, item.path) if item.is_dir else {item.path}
    return out


def test_masdsl_eval_on_the_tiny_model_is_tracked(mlflow_server, tiny_model_dir, tmp_path):
    from mlflow.tracking import MlflowClient

    from masdsl.cli import main

    experiment = f"duo_eval_{tmp_path.name}"
    assert main(["eval", str(DUO), "runtime.engine=hf", f"policy.thinker.model={tiny_model_dir}",
                 f"policy.critic.model={tiny_model_dir}", f"runtime.runs_dir={tmp_path}",
                 f"tracking.uri={mlflow_server.uri}", f"tracking.experiment={experiment}", "--tasks", "2"]) == 0
    client = MlflowClient(mlflow_server.uri)
    run, kids = parent_and_children(client, experiment, "eval")
    assert run.info.status == "FINISHED"
    assert run.data.tags["masdsl.workflow"] == "duo_math"
    assert run.data.tags["masdsl.roles.thinker"] == "reasoner" and run.data.tags["masdsl.roles.critic"] == "checker"
    assert run.data.params["policy.thinker.model"] == str(tiny_model_dir)
    assert set(kids) == {"thinker", "critic"} and all(k.info.status == "FINISHED" for k in kids.values())
    metrics = run.data.metrics
    assert 0.0 <= metrics["success/eval"] <= 1.0 and metrics["episodes"] == 2
    assert {"eval_reward/reasoner/turn0", "eval_reward/checker/turn0"} <= set(metrics)
    assert "eval_reward/reasoner/turn0" in kids["thinker"].data.metrics  # role metrics reach the policy's run
    assert "eval_reward/checker/turn0" in kids["critic"].data.metrics
    paths = artifact_paths(client, run.info.run_id)
    assert {"source/duo_math.mas", "config/resolved.yaml", "graph/workflow.mmd", "records/records.jsonl",
            "plots/progress.png", "view/view.html"} <= paths
    page = Path(client.download_artifacts(run.info.run_id, "view/view.html", str(tmp_path))).read_text()
    assert page.count('<section class="step" data-label="eval">') == 1  # one evaluation, of 2 tasks x 2 roles or more
    assert page.count('data-role="reasoner"') >= 2 and page.count('data-role="checker"') >= 2


TRAIN_METRICS = {"success/train", "groups/count", "groups/zero_variance_frac", "tokens/generated",
                 "throughput/tokens_per_s", "time/rollout_s", "time/update_s", "time/sync_s", "memory/peak_rss_gb",
                 "success/eval", "time/old_logprobs_s", "time/eval_s", "time/checkpoint_s", "time/tracking_s",
                 "time/step_s"}
POLICY_METRICS = ("loss", "clip_frac", "kl", "grad_norm", "entropy", "kl_old")
ROLE_METRICS = ("success/train", "nonflat", "adv_abs")


def test_masdsl_run_on_the_tiny_model_is_tracked(mlflow_server, tiny_model_dir, tmp_path):
    from mlflow.tracking import MlflowClient

    from masdsl.cli import main

    experiment = f"duo_run_{tmp_path.name}"
    args = ["runtime.engine=hf", f"policy.thinker.model={tiny_model_dir}", f"policy.critic.model={tiny_model_dir}",
            f"runtime.runs_dir={tmp_path}", "train.steps=2", "train.kl_coef=0.01", "tracking.log_weights=true",
            "tracking.register=true", f"tracking.uri={mlflow_server.uri}", f"tracking.experiment={experiment}"]
    assert main(["run", str(DUO), *args]) == 0

    client = MlflowClient(mlflow_server.uri)
    run, kids = parent_and_children(client, experiment, "run")
    assert run.info.status == "FINISHED" and run.data.params["train.kl_coef"] == "0.01"
    assert run.data.tags["masdsl.grouping"] == "at" and run.data.tags["masdsl.roles.critic"] == "checker"
    metrics = set(run.data.metrics)
    assert TRAIN_METRICS <= metrics, TRAIN_METRICS - metrics
    assert {f"{m}/{p}" for m in POLICY_METRICS for p in ("thinker", "critic")} <= metrics
    assert {"reward/reasoner/turn0/mean", "reward/checker/turn0/mean"} <= metrics
    assert {f"{m}/{r}" for m in ROLE_METRICS for r in ("reasoner", "checker")} <= metrics
    assert {"clip_frac/thinker/reasoner", "entropy/thinker", "nonflat/reasoner"} <= set(kids["thinker"].data.metrics)
    assert [m.step for m in client.get_metric_history(run.info.run_id, "success/train")] == [1, 2]
    assert sorted(m.step for m in client.get_metric_history(run.info.run_id, "success/eval")) == [0, 2]

    assert set(kids) == {"thinker", "critic"}
    for policy, role, other in (("thinker", "reasoner", "critic"), ("critic", "checker", "thinker")):
        kid = kids[policy]
        assert kid.info.status == "FINISHED" and kid.data.tags["masdsl.roles"] == role
        assert {f"{m}/{policy}" for m in POLICY_METRICS} | {f"reward/{role}/turn0/mean"} <= set(kid.data.metrics)
        assert not any(k.endswith(f"/{other}") for k in kid.data.metrics)
        assert [m.step for m in client.get_metric_history(kid.info.run_id, f"loss/{policy}")] == [1, 2]
        assert artifact_paths(client, kid.info.run_id) == {f"weights/{policy}.safetensors"}  # tracking.log_weights
        got = Path(client.download_artifacts(kid.info.run_id, f"weights/{policy}.safetensors", str(tmp_path)))
        saved = Path(run.data.tags["masdsl.run_dir"]) / "checkpoints" / "step_000002" / "policies" / f"{policy}.safetensors"
        assert got.read_bytes() == saved.read_bytes()
        (version,) = client.search_model_versions(f"name='duo_math-{policy}'")  # tracking.register: the trainer's export
        assert version.tags["masdsl.step"] == "2" and version.tags["masdsl.policy"] == policy

    paths = artifact_paths(client, run.info.run_id)
    assert {"source/duo_math.mas", "graph/workflow.mmd", "graph/workflow.dot", "config/resolved.yaml",
            "plots/progress.png", "view/view.html"} <= paths, paths
    page = Path(client.download_artifacts(run.info.run_id, "view/view.html", str(tmp_path))).read_text()
    labels = re.findall(r'<section class="step" data-label="([^"]+)">', page)  # both rollouts, then the evaluations
    assert len([x for x in labels if not x.startswith("eval ")]) == 2, labels  # train.steps=2
    assert "eval at step 0" in labels and "eval at step 2" in labels
    assert len([p for p in paths if p.startswith("traces/")]) == 2  # evaluations at steps 0 and 2
