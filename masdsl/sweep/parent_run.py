"""A sweep's MLflow record: one parent run, each trial's training run as its child.

Each trial is an ordinary `masdsl run` (its own run, with one child per policy); when it ends,
`adopt` makes it a child of the sweep's parent and tags it with the trial's overrides
(`masdsl.sweep.override.<key>`), so MLflow's run table and its compare view line the arms up. At
the end the parent keeps the comparison (`artifacts/comparison.md` and `.json`) and one curves
image per metric. A restarted sweep reopens its parent (its id is in the sweep folder).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

from masdsl.tracking.sender import experiment_id
from masdsl.tracking.store import apply_http_defaults

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

    from masdsl.sweep.grid import Trial

SWEEP_TAG = "masdsl.sweep"


def client(uri: str) -> MlflowClient:
    from mlflow.tracking import MlflowClient  # heavy, optional: mlflow, only when tracking is on

    apply_http_defaults()
    return MlflowClient(tracking_uri=uri)


def open_parent(mlflow: MlflowClient, experiment: str, name: str, tags: Mapping[str, str], run_id: str | None = None) -> str:
    """The sweep's parent run: `run_id` reopened (a restarted sweep), else a new one."""
    if run_id is not None:
        mlflow.update_run(run_id, status="RUNNING")
        return run_id
    run = mlflow.create_run(experiment_id(mlflow, experiment), run_name=f"sweep {name}",
                            tags={SWEEP_TAG: name, "masdsl.kind": "sweep", **tags})
    return run.info.run_id


def override_tags(overrides: Sequence[str]) -> dict[str, str]:
    """`masdsl.sweep.override.<key>` tags of a trial's overrides (the seed too).

    >>> override_tags(["train.lr=1e-5", "train.seed=1"])
    {'masdsl.sweep.override.train.lr': '1e-5', 'masdsl.sweep.override.train.seed': '1'}
    """
    out = {}
    for ov in overrides:
        key, _, value = ov.partition("=")
        out[f"masdsl.sweep.override.{key.lstrip('+~')}"] = value
    return out


def adopt(mlflow: MlflowClient, parent_id: str, run_id: str, trial: Trial) -> None:
    """Make a finished trial's run a child of the sweep's parent, tagged with its overrides."""
    tags = {"mlflow.parentRunId": parent_id, SWEEP_TAG + ".trial": trial.id, SWEEP_TAG + ".arm": trial.arm or "base",
            **override_tags(trial.overrides)}
    for key, value in tags.items():
        mlflow.set_tag(run_id, key, value)


def finish_parent(mlflow: MlflowClient, parent_id: str, table: str, lines: list[dict], images: Sequence[Path],
                  status: str = "FINISHED") -> None:
    """Keep the comparison and the curves on the parent, then close it."""
    mlflow.log_text(parent_id, table, "comparison.md")
    mlflow.log_text(parent_id, json.dumps(lines, indent=1), "comparison.json")
    for image in images:
        mlflow.log_artifact(parent_id, str(image), "curves")
    mlflow.set_terminated(parent_id, status=status)

