"""Log a Hugging Face folder (written by `save_pretrained`) as an MLflow 3 transformers model.

MLflow's transformers flavour takes a local checkpoint path (`transformers_model=str(folder)`
with a `task`) and copies it without loading the weights. `mlflow.transformers.log_model` would
put the logged model in the *active* experiment of MLflow's global state, so this does the same
steps with an explicit client: create the logged model under the policy's run, write the flavour
into a temporary folder, upload it, mark it ready, link it to the run as an output, and (when
asked) register it as a new version of `registered_name` with the run's lineage as tags.
"""

from __future__ import annotations

import tempfile
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

TASK = "text-generation"
# what loading the model back needs; MLflow's own guess also lists torchvision, which masdsl
# neither needs nor installs (and whose absence makes `save_model` fail)
REQUIREMENTS = ("transformers", "torch", "accelerate", "safetensors", "tokenizers")


def requirements() -> list[str]:
    """Pinned pip requirements of the installed packages (local labels such as `+cpu` dropped)."""
    out = []
    for name in REQUIREMENTS:
        try:
            out.append(f"{name}=={metadata.version(name).split('+')[0]}")
        except metadata.PackageNotFoundError:
            continue
    return out


def log_hf_folder(client: MlflowClient, experiment_id: str, run_id: str | None, name: str, folder: Path, *,
                  step: int = 0, tags: dict[str, str] | None = None, registered_name: str | None = None,
                  version_tags: dict[str, Any] | None = None) -> tuple[str, str | None]:
    """Log `folder` as model `name` of run `run_id`; returns (model id, registered version or None)."""
    import mlflow.transformers  # heavy, optional: mlflow's transformers flavour, only when logging models
    from mlflow.entities import LoggedModelOutput, LoggedModelStatus
    from mlflow.models import Model

    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{folder} is not a Hugging Face model folder (no config.json)")
    model = client.create_logged_model(experiment_id, name=name, source_run_id=run_id,
                                       tags={k: str(v) for k, v in (tags or {}).items()})
    with tempfile.TemporaryDirectory(prefix="masdsl-model-") as tmp:
        local = Path(tmp) / "model"
        flavour = Model(artifact_path=model.artifact_location, model_uuid=model.model_id, run_id=run_id,
                        model_id=model.model_id)
        mlflow.transformers.save_model(str(folder.resolve()), str(local), task=TASK, mlflow_model=flavour,
                                       pip_requirements=requirements())
        client.log_model_artifacts(model.model_id, str(local))
    client.finalize_logged_model(model.model_id, LoggedModelStatus.READY)
    if run_id is not None:
        client.log_outputs(run_id, [LoggedModelOutput(model.model_id, step=step)])
    version = None
    if registered_name:
        ensure_registered_model(client, registered_name)
        made = client.create_model_version(
            registered_name, source=f"models:/{model.model_id}", run_id=run_id, model_id=model.model_id,
            tags={k: str(v) for k, v in (version_tags or {}).items()}, await_creation_for=0)
        version = str(made.version)
    return model.model_id, version


def ensure_registered_model(client: MlflowClient, name: str) -> None:
    from mlflow.exceptions import MlflowException  # heavy, optional: mlflow, only when logging models

    try:
        client.create_registered_model(name)
    except MlflowException as exc:
        if exc.error_code not in ("RESOURCE_ALREADY_EXISTS", "ALREADY_EXISTS"):
            raise
