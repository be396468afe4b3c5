"""`success` and `reward` first in MLflow's UI (issue 43, item 4). MLflow 3 charts a run's
metrics in one section per name prefix and orders the sections by a plain `sort()` of their
names (`RunsChartsCardConfig.getBaseChartAndSectionConfigs` in mlflow/server/js: code-unit
order, so `adv_abs` and `clip_frac` came before `reward` and `success`); a chart layout is kept in
the browser's local storage only. masdsl logs the headline figures again under `Key metrics/`,
which sorts before every lowercase prefix, and says so in the run's description."""

from __future__ import annotations

from masdsl.config import RunRecord, resolve_config
from masdsl.tracking import lineage, start_run
from tests.support.tracking import unique

STEP = {"adv_abs/coder": 0.4, "clip_frac/shared": 0.1, "entropy/shared": 1.2, "groups/nonflat_frac": 0.5,
        "reward/coder/turn0/mean": 0.75, "reward/tester/turn0/mean": 0.25, "success/train": 0.5,
        "time/rollout_s": 1.0, "loss/shared": 0.3}


def sections(keys) -> list[str]:
    """MLflow's section order: the prefix before the last `/`, sorted by code unit (JS `sort()`)."""
    return sorted({k.rsplit("/", 1)[0] for k in keys if "/" in k}, key=lambda s: s.encode("utf-16-be"))


def test_the_headline_sorts_first_and_reads_the_same_numbers():
    key = lineage.key_metrics(STEP)
    assert key == {"Key metrics/success train": 0.5, "Key metrics/reward train": 0.5}
    assert sections({**STEP, **key})[0] == "Key metrics"
    assert sections(STEP)[0] == "adv_abs"  # without it: the problem the issue saw
    evaluation = lineage.key_metrics({"success/eval": 0.25, "reward/eval": 1.5, "eval_reward/coder/turn0": 2.0})
    assert evaluation == {"Key metrics/success eval": 0.25, "Key metrics/reward eval": 1.5}


def test_a_tracked_run_logs_them_and_its_description_points_at_them(mlflow_server, make_workflow, tmp_path):
    from mlflow.tracking import MlflowClient

    wf = make_workflow(unique("key"))
    tracker = start_run(wf, RunRecord.of(resolve_config(overrides=[f"tracking.uri={mlflow_server.uri}"])), kind="run",
                        run_dir=tmp_path / "run")
    for step in (1, 2):
        tracker.log_metrics({**STEP, "success/train": step / 4}, step=step)
    tracker.log_metrics({"success/eval": 0.75, "reward/eval": 2.0}, step=2)
    tracker.finish()
    run = MlflowClient(mlflow_server.uri).get_run(tracker.run_id)
    m = run.data.metrics
    assert m["Key metrics/success train"] == 0.5 and m["Key metrics/reward train"] == 0.5
    assert m["Key metrics/success eval"] == 0.75 and m["Key metrics/reward eval"] == 2.0
    assert sections(m)[0] == "Key metrics"
    assert "**Key metrics**" in run.data.tags["mlflow.note.content"]
    history = MlflowClient(mlflow_server.uri).get_metric_history(tracker.run_id, "Key metrics/success train")
    assert [(p.step, p.value) for p in history] == [(1, 0.25), (2, 0.5)]
