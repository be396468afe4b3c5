"""MLflow experiment tracking for `masdsl run` and `masdsl eval`.

    tracker = start_run(workflow, plan.record(), kind="run", run_dir=Path("runs/x"))
    tracker.log_metrics({"success/train": 0.5, "loss/shared": 0.1}, step=0)
    tracker.log_text(transcript, "transcripts/eval_step0/episode0.md")
    tracker.finish()                      # or use it as a context manager

One parent run per command in the experiment named after the workflow, one child run per policy;
see docs/tracking.md. mlflow is imported only when tracking is on.

>>> from masdsl.config import RunRecord, resolve_config
>>> t = start_run(None, RunRecord.of(resolve_config(overrides=["tracking.enabled=false"])), kind="run", run_dir=Path("."))
>>> t.run_id, t.ui_command()
(None, '')
>>> t.log_metrics({"loss/p": 1.0}, step=0); t.log_models({"p": Path("nowhere")}); t.finish()
>>> t.wants_models
False
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal, Mapping

from masdsl.tracking.store import TrackingError, apply_http_defaults, resolve_uri, ui_command
from masdsl.tracking.tracker import Tracker

if TYPE_CHECKING:
    from masdsl.config import RunRecord, TrackingConfig
    from masdsl.lang.workflow import Workflow

__all__ = ["start_run", "validate", "Tracker", "NullTracker", "TrackingError", "resolve_uri", "ui_command"]

KINDS = ("run", "eval")


class NullTracker(Tracker):
    """What `start_run` returns when `tracking.enabled` is false: every call does nothing."""

    run_id = None
    experiment_id = None
    child_ids: dict[str, str] = {}
    wants_models = False

    def __init__(self) -> None:  # noqa: D107 - deliberately skips Tracker.__init__
        pass

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        pass

    def remember(self, metrics: dict[str, float], step: int) -> None:
        pass

    def log_artifact(self, path: Path, artifact_path: str | None = None, policy: str | None = None) -> None:
        pass

    def log_text(self, text: str, artifact_file: str) -> None:
        pass

    def log_models(self, folders: Mapping[str, Path], step: int | None = None) -> None:
        pass

    def finish(self, status: str = "FINISHED", checkpoint: Path | None = None) -> None:
        pass

    def ui_command(self) -> str:
        return ""


def validate(tracking: TrackingConfig) -> None:
    """Check the tracking settings without contacting any store (cheap: call it before loading
    models). Raises TrackingError for a malformed `tracking.uri`.

    >>> from masdsl.config import resolve_config
    >>> validate(resolve_config(overrides=["tracking.uri=http://127.0.0.1:5000"]).tracking)
    >>> validate(resolve_config(overrides=["tracking.uri=mlflow.db"]).tracking)
    Traceback (most recent call last):
    ...
    masdsl.tracking.store.TrackingError: `tracking.uri` has an unknown scheme `mlflow.db` in `mlflow.db` (did you mean `sqlite:///mlflow.db`?)
    """
    if tracking.enabled:
        resolve_uri(tracking.uri)


def start_run(workflow: Workflow, record: RunRecord, *, kind: Literal["run", "eval"], run_dir: Path,
              resume: bool = False) -> Tracker:
    """Open the MLflow runs for one command; never raises once the settings are valid. `record`:
    the run's plan's record (`RunPlan.record()`): its parameters, its configuration, its tracking settings.

    `resume`: `masdsl run --resume` continues the MLflow run the run folder names (`mlflow.json`,
    written when a training run's parent run is created): one run per training, its curves
    continuous, instead of a KILLED run and a new one (docs/tracking.md, "Resuming").

    Raises TrackingError (a UserError) for a malformed `tracking.uri` or a missing mlflow.
    An unreachable server is not an error: calls are buffered until it answers.
    """
    if not record.tracking.enabled:
        return NullTracker()
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
    uri = resolve_uri(record.tracking.uri)
    try:
        import mlflow  # noqa: F401 - optional: mlflow (masdsl[train]); is it installed?
    except ImportError:
        raise TrackingError(
            "tracking needs mlflow: install `masdsl[train]`, or set `tracking.enabled=false`"
        ) from None
    apply_http_defaults()
    return Tracker(workflow, record, kind=kind, run_dir=Path(run_dir), uri=uri, resume=resume)
