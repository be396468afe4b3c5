"""`Tracker`: one MLflow parent run per `masdsl run`/`masdsl eval`, one child run per policy.

Every store call goes through an `Outbox` (see outbox.py), so an unreachable server never
raises into training: metrics are buffered (and appended to `<run_dir>/metrics.jsonl`) and
sent, in order and with their original steps and timestamps, when the server returns or at
`finish()`. mlflow (an optional dependency, in `masdsl[train]`) is imported only inside the
methods that talk to the store, so importing this module never needs it.

The tracker knows nothing of the learner: a training run hands `finish()` its newest complete
checkpoint, whose weights `tracking.log_weights` stores.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

from masdsl.config import flatten, to_yaml
from masdsl.tracking import lineage, plot, store
from masdsl.tracking.outbox import Op, Outbox, short

METRICS_PER_BATCH = 1000  # MLflow's log_batch limits
PARAMS_PER_BATCH = 100
TAGS_PER_BATCH = 100
PLOT_FILE = "progress.png"
# MLflow 3's UI opens experiments it cannot classify in its GenAI layout; this is model training.
EXPERIMENT_TAGS = {"mlflow.experimentKind": "custom_model_development"}


def say(message: str) -> None:
    print(f"masdsl: tracking: {message}", file=sys.stderr, flush=True)


class Tracker:
    """Logs one masdsl run to MLflow. Create it with `masdsl.tracking.start_run`."""

    run_id: str | None

    def __init__(self, workflow: Any, cfg: Any, *, kind: str, run_dir: Path, uri: str,
                 finish_wait_s: float = 10.0, retry_every_s: float = 5.0) -> None:
        from mlflow.tracking import MlflowClient  # heavy, optional: mlflow, only when tracking is on

        self.workflow, self.cfg, self.kind = workflow, cfg, kind
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.uri = uri
        self.experiment_name = cfg.tracking.experiment or workflow.name
        self.experiment_id: str | None = None
        self.run_id = None
        self.child_ids: dict[str, str] = {}  # policy -> run id
        self.history: dict[str, list[tuple[int, float]]] = {}
        self.metrics_file = self.run_dir / "metrics.jsonl"
        self.finish_wait_s = finish_wait_s
        self.finished = False
        self._status = "RUNNING"
        self._lock = threading.RLock()
        self._role_policy = {r.name: r.policy for r in workflow.roles.values()}
        try:
            self._client = MlflowClient(tracking_uri=uri)
        except Exception as exc:  # e.g. postgresql:// without its driver installed
            raise store.TrackingError(f"cannot open the tracking store `{uri}`: {short(exc)}") from None
        self.outbox = Outbox(
            lambda: store.reachable(uri), say=say, retry_every_s=retry_every_s,
            where=f"; metrics are also kept in {self.metrics_file}",
        )
        self._begin()

    # -- start -------------------------------------------------------------------------------
    def _begin(self) -> None:
        wf, kind = self.workflow, self.kind
        self._put("create parent run", self._create_parent, essential=True)
        params = lineage.params_of(flatten(self.cfg))
        self._put("log params", lambda: self._log_dicts(self.run_id, params=params))
        tags = lineage.parent_tags(wf, self.cfg, kind)
        self._put("set tags", lambda: self._log_dicts(self.run_id, tags=tags))
        for policy in wf.policies:
            self._put(f"create child run {policy}", lambda p=policy: self._create_child(p), essential=True)
        self._log_source()
        try:
            graphs = lineage.graph_texts(wf)
        except Exception as exc:  # noqa: BLE001 - a rendering bug must not stop training
            graphs = {}
            say(f"could not render the workflow graph: {short(exc)}")
        for name, text in graphs.items():
            self.log_text(text, f"graph/{name}")
        self.log_text(to_yaml(self.cfg), "config/resolved.yaml")

    def _create_parent(self) -> None:
        if self.experiment_id is None:
            self.experiment_id = self._experiment()
        if self.run_id is None:
            run = self._client.create_run(
                self.experiment_id, run_name=f"{self.kind} {self.run_dir.name}",
                tags={"masdsl.run_dir": str(self.run_dir.resolve())},
            )
            self.run_id = run.info.run_id

    def _experiment(self) -> str:
        found = self._client.get_experiment_by_name(self.experiment_name)
        if found is not None:
            return found.experiment_id
        try:
            return self._client.create_experiment(self.experiment_name, tags=EXPERIMENT_TAGS)
        except Exception:  # created meanwhile by another process
            found = self._client.get_experiment_by_name(self.experiment_name)
            if found is None:
                raise
            return found.experiment_id

    def _create_child(self, policy: str) -> None:
        if policy in self.child_ids:
            return
        tags = lineage.child_tags(self.workflow, policy, self.kind) | {"mlflow.parentRunId": self.run_id}
        run = self._client.create_run(self.experiment_id, run_name=policy, tags=tags)
        self.child_ids[policy] = run.info.run_id
        self._log_dicts(run.info.run_id, params=lineage.child_params(self.workflow, policy))

    def _log_source(self) -> None:
        wf = self.workflow
        path = Path(wf.path) if wf.path else None
        if path is not None and path.is_file():
            self.log_artifact(path, "source")
        elif wf.source:
            self.log_text(wf.source, f"source/{wf.name}.mas")
        for imported in wf.imports:
            if Path(imported).is_file():
                self.log_artifact(Path(imported), "source/imports")

    # -- logging -----------------------------------------------------------------------------
    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        """Log `metrics` at `step` on the parent run; per-policy ones also on the child run."""
        with self._lock:
            if self.finished:
                return
            ts = int(time.time() * 1000)
            clean = {}
            for raw, value in metrics.items():
                try:
                    number = float(value)
                except (TypeError, ValueError):
                    continue
                key = lineage.metric_key(raw)
                clean[key] = number
                self.history.setdefault(key, []).append((int(step), number))
            if not clean:
                return
            if not self._put(f"metrics step {step}", lambda: self._send_metrics(clean, int(step), ts)):
                self._keep_locally(clean, int(step), ts)

    def _send_metrics(self, values: dict[str, float], step: int, ts: int) -> None:
        from mlflow.entities import Metric  # heavy, optional: mlflow, only when tracking is on

        by_run: dict[str, list[Metric]] = {self.run_id: []}
        policies = set(self.workflow.policies)
        for key, value in values.items():
            metric = Metric(key, value, ts, step)
            by_run[self.run_id].append(metric)
            policy = lineage.route(key, policies, self._role_policy)
            if policy in self.child_ids:
                by_run.setdefault(self.child_ids[policy], []).append(metric)
        for run_id, items in by_run.items():
            for i in range(0, len(items), METRICS_PER_BATCH):
                self._client.log_batch(run_id, metrics=items[i : i + METRICS_PER_BATCH])

    def _keep_locally(self, values: dict[str, float], step: int, ts: int) -> None:
        self._append_row({"step": step, "timestamp": ts, "metrics": values, "run_id": self.run_id, "uri": self.uri})

    def _keep_end_locally(self) -> None:
        """The run's final status, for `resend` to end runs whose end call never got through."""
        if self.run_id is not None:
            self._append_row({"end": self._status, "run_id": self.run_id, "uri": self.uri})

    def _append_row(self, row: dict[str, Any]) -> None:
        try:
            with open(self.metrics_file, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")
        except OSError as exc:
            say(f"cannot write {self.metrics_file}: {exc}")

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        """Upload a file or folder (sent later if the server is down; it must still exist)."""
        with self._lock:
            path = Path(path)
            self._put(f"upload {path.name}", lambda: self._upload(path, artifact_path))

    def _upload(self, path: Path, artifact_path: str | None) -> None:
        if path.is_dir():  # a folder keeps its name: log_artifact(Path("ckpt/step3")) -> step3/...
            dest = f"{artifact_path}/{path.name}" if artifact_path else path.name
            self._client.log_artifacts(self.run_id, str(path), dest)
        else:
            self._client.log_artifact(self.run_id, str(path), artifact_path)

    def log_text(self, text: str, artifact_file: str) -> None:
        """Store `text` as the artifact `artifact_file` (e.g. an eval transcript)."""
        with self._lock:
            self._put(f"write {artifact_file}",
                      lambda: self._client.log_text(self.run_id, text, artifact_file))

    # -- end ---------------------------------------------------------------------------------
    def finish(self, status: str = "FINISHED", checkpoint: Path | None = None) -> None:
        """Log the progress plot, end the child and parent runs, send what is buffered.

        `checkpoint`: a training run's newest complete checkpoint folder (None: there is none);
        with `tracking.log_weights`, a finished training run stores its weights.
        """
        with self._lock:
            if self.finished:
                return
            self.finished = True
            self._status = status
            try:
                png = plot.plot_progress(self.history, self.run_dir / PLOT_FILE,
                                         title=f"{self.workflow.name} ({self.kind})")
            except Exception as exc:  # noqa: BLE001 - a plot never fails a run
                png = None
                say(f"could not draw the progress plot: {exc}")
            if png is not None:
                self._put("upload progress plot",
                          lambda: self._client.log_artifact(self.run_id, str(png), "plots"))
            if self.cfg.tracking.log_weights and self.kind == "run" and status == "FINISHED":
                self._log_final_weights(checkpoint)
            for policy in self.workflow.policies:
                self._put(f"end child run {policy}",
                          lambda p=policy: self._end(self.child_ids.get(p), status))
            self._put("end parent run", lambda: self._end(self.run_id, status))
            self._drain(self.finish_wait_s)
            if self.run_id and not len(self.outbox):
                say(f"run {self.run_id} in experiment `{self.experiment_name}`; open the dashboard with:"
                    f"\n    {self.ui_command()}")

    def _log_final_weights(self, ckpt: Path | None) -> None:
        """`tracking.log_weights`: each policy's weights (or LoRA adapter) from the newest
        complete checkpoint (`policies/<policy>.pt` in it), as `weights/<policy>.pt` in that
        policy's child run."""
        if ckpt is None:
            say(f"tracking.log_weights: no complete checkpoint in {self.run_dir}")
            return
        for policy in self.workflow.policies:
            path = Path(ckpt) / "policies" / f"{policy}.pt"
            if path.is_file():  # frozen policies have no weights of their own to save
                self._put(f"upload weights {policy}", lambda p=policy, f=path: self._client.log_artifact(
                    self.child_ids.get(p) or self.run_id, str(f), "weights"))

    def _end(self, run_id: str | None, status: str) -> None:
        if run_id is not None:
            self._client.set_terminated(run_id, status)

    def _drain(self, wait_s: float) -> None:
        deadline = time.monotonic() + wait_s
        while not self.outbox.pump(force=True) and not self.outbox.broken:
            if time.monotonic() >= deadline:
                self._keep_end_locally()
                say(f"{len(self.outbox)} tracking calls could not be sent before the end of the run; "
                    f"its metrics are in {self.metrics_file}"
                    + (f" (send them later: python -m masdsl.tracking.resend {self.run_dir})" if self.run_id else ""))
                return
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))

    def ui_command(self) -> str:
        return store.ui_command(self.uri, self.experiment_id, self.run_id)

    def __enter__(self) -> "Tracker":
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        self.finish("FINISHED" if exc_type is None else ("KILLED" if exc_type is KeyboardInterrupt else "FAILED"))

    # -- helpers -----------------------------------------------------------------------------
    def _put(self, label: str, send: Any, essential: bool = False) -> bool:
        return self.outbox.put(Op(label, send, essential=essential))

    def _log_dicts(self, run_id: str | None, params: dict[str, str] | None = None,
                   tags: dict[str, str] | None = None) -> None:
        from mlflow.entities import Param, RunTag  # heavy, optional: mlflow, only when tracking is on

        p = [Param(k, v) for k, v in (params or {}).items()]
        t = [RunTag(k, v) for k, v in (tags or {}).items()]
        for i in range(0, len(p), PARAMS_PER_BATCH):
            self._client.log_batch(run_id, params=p[i : i + PARAMS_PER_BATCH])
        for i in range(0, len(t), TAGS_PER_BATCH):
            self._client.log_batch(run_id, tags=t[i : i + TAGS_PER_BATCH])
