"""`Tracker`: one MLflow parent run per `masdsl run`/`masdsl eval`, one child run per policy.

Every store call is an *action* (a plain dict, see sender.py) put in an `Outbox` (see
outbox.py), so an unreachable server never raises into training: an action that cannot be sent
now is kept in memory and written to `<run_dir>/metrics.jsonl`, and sent, in order and with its
original steps and timestamps, when the server returns or at `finish()`. If the server never
answers, `python -m masdsl.tracking.resend RUN_DIR` applies the written actions later, creating
the runs if they were never created. mlflow (an optional dependency, in `masdsl[train]`) is
imported only inside the methods that talk to the store, so importing this module never needs it.

The tracker knows nothing of the learner: a training run hands `finish()` its newest complete
checkpoint, whose weights `tracking.log_weights` stores, and `log_models()` its exported
Hugging Face folders.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from masdsl.config import RunRecord
from masdsl.tracking import lineage, plot, store
from masdsl.tracking.outbox import Op, Outbox, short
from masdsl.tracking.sender import Sender

if TYPE_CHECKING:
    from masdsl.lang.workflow import Workflow

PLOT_FILE = "progress.png"
RUN_FILE = "mlflow.json"  # in the run folder: the parent run's id, so that --resume continues it
WEIGHT_SUFFIXES = (".safetensors", ".pt")  # a checkpoint's policies/<policy><suffix>, newest format first
UNSENT_DIR = "unsent"  # texts that could not be sent are written here for `resend`
SYSTEM_METRICS_INTERVAL_S = 10.0  # MLflow's default; $MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL wins


def say(message: str) -> None:
    print(f"masdsl: tracking: {message}", file=sys.stderr, flush=True)


def now_ms() -> int:
    return int(time.time() * 1000)


class Tracker:
    """Logs one masdsl run to MLflow. Create it with `masdsl.tracking.start_run`."""

    def __init__(self, workflow: Workflow, record: RunRecord, *, kind: str, run_dir: Path, uri: str,
                 finish_wait_s: float = 10.0, retry_every_s: float = 5.0, resume: bool = False) -> None:
        from mlflow.tracking import MlflowClient  # heavy, optional: mlflow, only when tracking is on

        self.workflow, self.record, self.kind = workflow, record, kind
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.uri = uri
        self.experiment_name = record.tracking.experiment or workflow.name
        self.history: dict[str, list[tuple[int, float]]] = {}
        self.metrics_file = self.run_dir / "metrics.jsonl"
        self.finish_wait_s = finish_wait_s
        self.finished = False
        self.monitor: Any = None  # MLflow's SystemMetricsMonitor while a training run is on
        self._started_ms = now_ms()
        self._lock = threading.RLock()
        try:
            self._client = MlflowClient(tracking_uri=uri)
        except Exception as exc:  # e.g. postgresql:// without its driver installed
            raise store.TrackingError(f"cannot open the tracking store `{uri}`: {short(exc)}") from None
        store.quiet_handled_store_errors()  # the outbox reports a failed call itself, in one line
        self.sender = Sender(self._client, role_policy={r.name: r.policy for r in workflow.roles.values()})
        self.outbox = Outbox(
            lambda: store.reachable(uri), say=say, retry_every_s=retry_every_s,
            where=f"; they are also kept in {self.metrics_file}",
        )
        self._begin(self._resumed_run() if resume else None)

    @property
    def run_id(self) -> str | None:
        return self.sender.run_id

    @property
    def experiment_id(self) -> str | None:
        return self.sender.experiment_id

    @property
    def child_ids(self) -> dict[str, str]:
        return self.sender.child_ids

    @property
    def wants_models(self) -> bool:
        """Whether the run should hand `log_models` its policies (`tracking.log_models` or
        `tracking.register`): exporting folders costs time and disk, so only when asked."""
        return bool(self.record.tracking.log_models or self.record.tracking.register)

    # -- start -------------------------------------------------------------------------------
    def _resumed_run(self) -> str | None:
        """The parent run id the run folder names (`mlflow.json`), when it is in this store."""
        try:
            saved = json.loads((self.run_dir / RUN_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if saved.get("uri") != self.uri:
            say(f"the run folder's MLflow run {saved.get('run_id')} is in {saved.get('uri')}, not {self.uri}: "
                "this run gets a new one")
            return None
        return saved.get("run_id")

    def _remember_run(self) -> None:
        """`mlflow.json`: the parent run's id in the run folder, for `--resume` (training runs)."""
        if self.kind != "run":
            return
        try:
            (self.run_dir / RUN_FILE).write_text(json.dumps({"run_id": self.run_id, "experiment_id": self.experiment_id,
                                                             "uri": self.uri}) + "\n", encoding="utf-8")
        except OSError as exc:
            say(f"cannot write {self.run_dir / RUN_FILE}: {exc}")

    def _begin(self, resume_run_id: str | None = None) -> None:
        wf, kind = self.workflow, self.kind
        self._put({"op": "create_parent", "experiment": self.experiment_name, "start_time": self._started_ms,
                   "run_name": f"{kind} {self.run_dir.name}", "resume_run_id": resume_run_id,
                   "tags": {"masdsl.run_dir": str(self.run_dir.resolve())}}, "create parent run", essential=True)
        # resumed: a param the overrides changed (train.steps=20) cannot be logged again; the sender keeps it as a tag
        self._put({"op": "params", "params": lineage.params_of(self.record.params), "resume": bool(resume_run_id)},
                  "log params")
        self._put({"op": "tags", "tags": lineage.parent_tags(wf, self.record, kind)}, "set tags")
        for policy in wf.policies:
            self._put({"op": "create_child", "policy": policy, "start_time": self._started_ms,
                       "tags": lineage.child_tags(wf, policy, kind), "params": lineage.child_params(wf, policy)},
                      f"create child run {policy}", essential=True)
        self._log_source()
        try:
            graphs = lineage.graph_texts(wf)
        except Exception as exc:  # noqa: BLE001 - a rendering bug must not stop training
            graphs = {}
            say(f"could not render the workflow graph: {short(exc)}")
        for name, text in graphs.items():
            self.log_text(text, f"graph/{name}")
        self.log_text(self.record.yaml, "config/resolved.yaml")

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

    def _start_system_metrics(self) -> None:
        """MLflow's system metrics (`system/cpu_utilization_percentage`, memory, disk, network,
        GPU) on a training run's parent run, sampled in a thread that `finish()` stops."""
        if self.kind != "run" or not self.record.tracking.system_metrics or self.monitor is not None:
            return
        try:
            import psutil  # noqa: F401 - optional: MLflow's CPU and memory monitors need it
            from mlflow.system_metrics.system_metrics_monitor import (  # heavy, optional: mlflow
                SystemMetricsMonitor,
            )
        except ImportError as exc:
            say(f"tracking.system_metrics: not available ({short(exc)}); install psutil")
            return
        self.monitor = SystemMetricsMonitor(self.run_id, sampling_interval=SYSTEM_METRICS_INTERVAL_S,
                                            tracking_uri=self.uri)
        self.monitor.start()

    def _stop_system_metrics(self) -> None:
        if self.monitor is not None:
            try:
                self.monitor.finish()  # joins its thread and sends what it sampled
            except Exception as exc:  # noqa: BLE001 - never fails a run
                say(f"could not stop the system metrics monitor: {short(exc)}")
            self.monitor = None

    # -- logging -----------------------------------------------------------------------------
    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        """Log `metrics` at `step` on the parent run; per-policy ones also on the child run; the
        headline ones again under `Key metrics/`, which MLflow's UI charts first (`lineage.key_metrics`)."""
        with self._lock:
            if self.finished:
                return
            clean = {}
            for raw, value in {**metrics, **lineage.key_metrics(metrics)}.items():
                try:
                    number = float(value)
                except (TypeError, ValueError):
                    continue
                key = lineage.metric_key(raw)
                clean[key] = number
                self.history.setdefault(key, []).append((int(step), number))
            if clean:
                self._put({"op": "metrics", "step": int(step), "timestamp": now_ms(), "metrics": clean},
                          f"metrics step {step}")

    def remember(self, metrics: dict[str, float], step: int) -> None:
        """Metrics logged before (by the run a resumed one continues): kept for the progress plot
        that `finish()` draws, not sent again."""
        with self._lock:
            for raw, value in metrics.items():
                if isinstance(value, (int, float)):
                    self.history.setdefault(lineage.metric_key(raw), []).append((int(step), float(value)))

    def log_artifact(self, path: Path, artifact_path: str | None = None, policy: str | None = None) -> None:
        """Upload a file or folder (sent later if the server is down; it must still exist) to the
        parent run, or to `policy`'s child run."""
        with self._lock:
            path = Path(path).resolve()
            self._put({"op": "artifact", "policy": policy, "path": str(path), "artifact_path": artifact_path},
                      f"upload {path.name}")

    def log_text(self, text: str, artifact_file: str) -> None:
        """Store `text` as the artifact `artifact_file` (e.g. an eval transcript)."""
        with self._lock:
            self._put({"op": "text", "text": text, "artifact_file": artifact_file}, f"write {artifact_file}")

    def log_models(self, folders: Mapping[str, Path], step: int | None = None) -> None:
        """Log each policy's Hugging Face folder (`save_pretrained` output: config.json, weights,
        tokenizer) as an MLflow transformers model (task text-generation) in that policy's child
        run; with `tracking.register`, also as a new version of the registered model
        `<workflow>-<policy>`, tagged with its lineage (workflow, file hash, run ids, step, roles).

        Call it once, at the end of a finished run, before `finish()`, and only when
        `wants_models` is true. The folders must exist until the upload (it may wait for the
        server). `step`: the optimizer steps the weights have seen.
        """
        with self._lock:
            if self.finished:
                say("log_models after finish(): the runs are ended, nothing logged")
                return
            for policy, folder in folders.items():
                folder = Path(folder).resolve()
                if policy not in self.workflow.policies:
                    say(f"log_models: `{policy}` is not a policy of {self.workflow.name}; skipped")
                elif not (folder / "config.json").is_file():
                    say(f"log_models: {folder} is not a Hugging Face model folder (no config.json); skipped")
                else:
                    name = f"{self.workflow.name}-{policy}" if self.record.tracking.register else None
                    self._put({"op": "model", "policy": policy, "folder": str(folder), "step": int(step or 0),
                               "registered_name": name, "tags": lineage.model_tags(self.workflow, policy, step)},
                              f"log model {policy}")

    # -- end ---------------------------------------------------------------------------------
    def finish(self, status: str = "FINISHED", checkpoint: Path | None = None) -> None:
        """Stop the system metrics, log the progress plot, end the child and parent runs, send
        what is buffered.

        `checkpoint`: a training run's newest complete checkpoint folder (None: there is none);
        with `tracking.log_weights`, a finished training run stores its weights.
        """
        with self._lock:
            if self.finished:
                return
            self.finished = True
            self._stop_system_metrics()
            try:
                png = plot.plot_progress(self.history, self.run_dir / PLOT_FILE,
                                         title=f"{self.workflow.name} ({self.kind})")
            except Exception as exc:  # noqa: BLE001 - a plot never fails a run
                png = None
                say(f"could not draw the progress plot: {exc}")
            if png is not None:
                self.log_artifact(png, "plots")
            if self.record.tracking.log_weights and self.kind == "run" and status == "FINISHED":
                self._log_final_weights(checkpoint)
            self._put({"op": "end", "status": status, "end_time": now_ms()}, "end runs")
            self._drain(self.finish_wait_s)
            if self.run_id and not len(self.outbox):
                say(f"run {self.run_id} in experiment `{self.experiment_name}`; open the dashboard with:"
                    f"\n    {self.ui_command()}")

    def _log_final_weights(self, ckpt: Path | None) -> None:
        """`tracking.log_weights`: each policy's weights (or LoRA adapter) from the newest
        complete checkpoint (`policies/<policy>.safetensors` in it, `.pt` in checkpoints of
        earlier versions), as `weights/<policy>.safetensors` in that policy's child run."""
        if ckpt is None:
            say(f"tracking.log_weights: no complete checkpoint in {self.run_dir}")
            return
        for policy in self.workflow.policies:
            for suffix in WEIGHT_SUFFIXES:
                path = Path(ckpt) / "policies" / f"{policy}{suffix}"
                if path.is_file():  # frozen policies have no weights of their own to save
                    self.log_artifact(path, "weights", policy=policy)
                    break

    def _drain(self, wait_s: float) -> None:
        deadline = time.monotonic() + wait_s
        while not self.outbox.pump(force=True) and not self.outbox.broken:
            if time.monotonic() >= deadline:
                say(f"{len(self.outbox)} tracking calls could not be sent before the end of the run; "
                    f"they are kept in {self.metrics_file} (send them once the server is back: "
                    f"python -m masdsl.tracking.resend {self.run_dir})")
                return
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))

    def ui_command(self) -> str:
        return store.ui_command(self.uri, self.experiment_id, self.run_id)

    def __enter__(self) -> "Tracker":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        self.finish("FINISHED" if exc_type is None else ("KILLED" if exc_type is KeyboardInterrupt else "FAILED"))

    # -- the outbox and the journal ------------------------------------------------------------
    def _put(self, action: dict[str, Any], label: str, essential: bool = False) -> bool:
        """Send `action` now, or keep it (in memory and in metrics.jsonl) for later."""
        sent = self.outbox.put(Op(label, lambda: self._send(action), essential=essential))
        if not sent and not self.outbox.broken:
            self._journal(action)
        return sent

    def _send(self, action: dict[str, Any]) -> None:
        created = self.sender.apply(action)
        if action["op"] == "create_parent" and created:
            self._remember_run()
            self._start_system_metrics()
        if "key" in action:  # it was written to the journal: resend must not apply it again
            self._append_row({"done": action["key"], "run_id": created})

    def _journal(self, action: dict[str, Any]) -> None:
        """Write a kept action to metrics.jsonl, for `resend` if the server never comes back.
        Metrics are sent again harmlessly (MLflow ignores identical points); other actions get a
        key, and a `done` row when they are sent after all."""
        row = dict(action)
        if action["op"] != "metrics":
            action["key"] = row["key"] = uuid.uuid4().hex
        if action["op"] == "text":  # the text goes to a file, uploaded like any other
            file = self.run_dir / UNSENT_DIR / action["artifact_file"]
            try:
                file.parent.mkdir(parents=True, exist_ok=True)
                file.write_text(action["text"], encoding="utf-8")
            except OSError as exc:
                say(f"cannot write {file}: {exc}")
                return
            parent = str(Path(action["artifact_file"]).parent)
            row = {"op": "artifact", "policy": action.get("policy"), "path": str(file.resolve()),
                   "artifact_path": None if parent == "." else parent, "key": row["key"]}
        self._append_row(row | {"run_id": self.run_id, "uri": self.uri})

    def _append_row(self, row: dict[str, Any]) -> None:
        try:
            with open(self.metrics_file, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")
        except OSError as exc:
            say(f"cannot write {self.metrics_file}: {exc}")
