"""Tracking *actions*: plain dicts that say what to record, and the one `Sender` that records them.

The tracker turns every call (create a run, log params, metrics, a file, a model, end the run)
into an action and hands it to its outbox, which calls `Sender.apply` when the server answers.
An action the outbox has to keep is also written to `<run_dir>/metrics.jsonl` (see
`Tracker._journal`), so `python -m masdsl.tracking.resend` can apply the same actions with the
same `Sender` later, even when the server never answered during the run: the run and its child
runs are then created by resend, with their original start time, params and tags.

    {"op": "create_parent", "experiment": ..., "run_name": ..., "tags": {...}, "start_time": ms,
     "resume_run_id": id or None}                  (an id: continue that run, RUNNING again, if it exists)
    {"op": "create_child", "policy": p, "tags": {...}, "params": {...}, "start_time": ms}
    {"op": "params" | "tags", "policy": p or None, "params" | "tags": {...}}   (params: "resume": true
                                                       keeps a changed value as a `masdsl.resumed.<key>` tag)
    {"op": "metrics", "step": s, "timestamp": ms, "metrics": {...}}       (parent, routed to children)
    {"op": "artifact", "policy": p or None, "path": local file or folder, "artifact_path": ...}
    {"op": "text", "policy": p or None, "text": ..., "artifact_file": ...}
    {"op": "model", "policy": p, "folder": HF folder, "step": s, "registered_name": ..., "tags": {...}}
    {"op": "end", "status": ..., "end_time": ms}                            (children, then parent)

mlflow is imported only inside the methods that need its types.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from masdsl.tracking import lineage, models

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

METRICS_PER_BATCH = 1000  # MLflow's log_batch limits
PARAMS_PER_BATCH = 100
TAGS_PER_BATCH = 100
# MLflow 3's UI opens experiments it cannot classify in its GenAI layout; this is model training.
EXPERIMENT_TAGS = {"mlflow.experimentKind": "custom_model_development"}


class Sender:
    """Applies actions to one store for one parent run (created by `create_parent`, or given)."""

    def __init__(self, client: MlflowClient, *, run_id: str | None = None,
                 role_policy: dict[str, str] | None = None) -> None:
        self.client = client
        self.experiment_id: str | None = None
        self.run_id = run_id
        self.child_ids: dict[str, str] = {}  # policy -> run id
        self.role_policy = role_policy  # None: read from the parent's `masdsl.roles.*` tags

    def apply(self, action: dict[str, Any]) -> str | None:
        """Record `action`; returns the id of a run it created, else None."""
        return getattr(self, f"_{action['op']}")(action)

    # -- runs --------------------------------------------------------------------------------
    def _create_parent(self, a: dict[str, Any]) -> str | None:
        if self.run_id is None and a.get("resume_run_id") and self._reopen(a["resume_run_id"]):
            return self.run_id
        if self.run_id is None:
            self.experiment_id = experiment_id(self.client, a["experiment"])
            run = self.client.create_run(self.experiment_id, start_time=a.get("start_time"),
                                         run_name=a.get("run_name"), tags=a.get("tags") or {})
            self.run_id = run.info.run_id
            return self.run_id
        return None

    def _reopen(self, run_id: str) -> bool:
        """Continue `run_id` and its child runs (`masdsl run --resume`): RUNNING again, the same
        curves. False when the store does not hold it (deleted, another database): a new run."""
        from mlflow.exceptions import MlflowException  # heavy, optional: mlflow, only when tracking is on

        try:
            run = self.client.get_run(run_id)
        except MlflowException:
            return False
        if run.info.lifecycle_stage != "active":
            return False
        self.run_id, self.experiment_id = run_id, run.info.experiment_id
        self._find_children()
        for rid in [run_id, *self.child_ids.values()]:
            self.client.update_run(rid, status="RUNNING")
        return True

    def _create_child(self, a: dict[str, Any]) -> str | None:
        policy = a["policy"]
        if policy in self.child_ids:
            return None
        tags = dict(a.get("tags") or {}) | {"mlflow.parentRunId": self.run_id}
        run = self.client.create_run(self._experiment(), start_time=a.get("start_time"),
                                     run_name=policy, tags=tags)
        self.child_ids[policy] = run.info.run_id
        self.log_dicts(run.info.run_id, params=a.get("params"))
        return run.info.run_id

    def _experiment(self) -> str:
        if self.experiment_id is None:
            self.experiment_id = self.client.get_run(self.run_id).info.experiment_id
        return self.experiment_id

    def target(self, policy: str | None) -> str | None:
        """The run an action of `policy` goes to: its child run, or the parent."""
        if policy is None:
            return self.run_id
        self._find_children()
        return self.child_ids.get(policy, self.run_id)

    def _find_children(self) -> None:
        if self.child_ids or self.run_id is None:
            return
        found = self.client.search_runs([self._experiment()], f"tags.mlflow.parentRunId = '{self.run_id}'")
        self.child_ids = {r.data.tags.get("masdsl.policy"): r.info.run_id for r in found}

    def _end(self, a: dict[str, Any]) -> None:
        self._find_children()
        for run_id in [*self.child_ids.values(), self.run_id]:
            if run_id is not None and self.client.get_run(run_id).info.status == "RUNNING":
                self.client.set_terminated(run_id, a["status"], end_time=a.get("end_time"))

    # -- data --------------------------------------------------------------------------------
    def _params(self, a: dict[str, Any]) -> None:
        run_id, params, tags = self.target(a.get("policy")), a["params"], {}
        if a.get("resume"):  # MLflow refuses to change a logged param: a resumed run's new value is a tag
            logged = self.client.get_run(run_id).data.params
            tags = {f"masdsl.resumed.{k}": v for k, v in params.items() if k in logged and logged[k] != v}
            params = {k: v for k, v in params.items() if k not in logged}
        self.log_dicts(run_id, params=params, tags=tags)

    def _tags(self, a: dict[str, Any]) -> None:
        self.log_dicts(self.target(a.get("policy")), tags=a["tags"])

    def _metrics(self, a: dict[str, Any]) -> None:
        from mlflow.entities import Metric  # heavy, optional: mlflow, only when tracking is on

        routes = self._routes()
        by_run: dict[str, list[Any]] = {self.run_id: []}
        for key, value in a["metrics"].items():
            metric = Metric(key, float(value), int(a["timestamp"]), int(a["step"]))
            by_run[self.run_id].append(metric)
            policy = lineage.route(key, set(self.child_ids), routes)
            if policy in self.child_ids:
                by_run.setdefault(self.child_ids[policy], []).append(metric)
        for run_id, items in by_run.items():
            for i in range(0, len(items), METRICS_PER_BATCH):
                self.client.log_batch(run_id, metrics=items[i : i + METRICS_PER_BATCH])

    def _routes(self) -> dict[str, str]:
        self._find_children()
        if self.role_policy is None:
            tags = self.client.get_run(self.run_id).data.tags
            self.role_policy = {role: tag.removeprefix("masdsl.roles.") for tag, roles in tags.items()
                                if tag.startswith("masdsl.roles.") for role in roles.split(",") if role}
        return self.role_policy

    def _artifact(self, a: dict[str, Any]) -> None:
        path, artifact_path, run_id = Path(a["path"]), a.get("artifact_path"), self.target(a.get("policy"))
        if path.is_dir():  # a folder keeps its name: artifact of "ckpt/step3" -> step3/...
            dest = f"{artifact_path}/{path.name}" if artifact_path else path.name
            self.client.log_artifacts(run_id, str(path), dest)
        else:
            self.client.log_artifact(run_id, str(path), artifact_path)

    def _text(self, a: dict[str, Any]) -> None:
        self.client.log_text(self.target(a.get("policy")), a["text"], a["artifact_file"])

    def _model(self, a: dict[str, Any]) -> None:
        run_id = self.target(a["policy"])
        models.log_hf_folder(self.client, self._experiment(), run_id, a["policy"], Path(a["folder"]),
                             step=int(a.get("step") or 0), tags=a.get("tags") or {},
                             registered_name=a.get("registered_name"),
                             version_tags=(a.get("tags") or {}) | {"masdsl.run_id": self.run_id,
                                                                   "masdsl.child_run_id": run_id})

    def log_dicts(self, run_id: str | None, params: dict[str, str] | None = None,
                  tags: dict[str, str] | None = None) -> None:
        from mlflow.entities import Param, RunTag  # heavy, optional: mlflow, only when tracking is on

        p = [Param(k, v) for k, v in (params or {}).items()]
        t = [RunTag(k, v) for k, v in (tags or {}).items()]
        for i in range(0, len(p), PARAMS_PER_BATCH):
            self.client.log_batch(run_id, params=p[i : i + PARAMS_PER_BATCH])
        for i in range(0, len(t), TAGS_PER_BATCH):
            self.client.log_batch(run_id, tags=t[i : i + TAGS_PER_BATCH])


def experiment_id(client: MlflowClient, name: str) -> str:
    """The id of the experiment `name`, created (tagged as model training) when missing."""
    found = client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    try:
        return client.create_experiment(name, tags=EXPERIMENT_TAGS)
    except Exception:  # created meanwhile by another process
        found = client.get_experiment_by_name(name)
        if found is None:
            raise
        return found.experiment_id
