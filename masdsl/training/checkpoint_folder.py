"""A checkpoint folder read without torch: where it is, its state, the configuration it was
trained with, the policies it holds weights of, and the workflow its run keeps.

The light halves of `masdsl export` and `masdsl eval --checkpoint` (and `masdsl.evaluate`,
`export_run`) plan a checkpoint with these, once, before any model loads:

    path = checkpoint_of(workflow, run_dir)            # found, and refused if it meant another workflow
    plan = resolve_rollout(workflow, checkpoint_config(path)).with_policies(trained_of(workflow, path))
    PlannedCheckpoint(path, plan)                      # what the heavy half exports or evaluates

`masdsl.training.checkpoint` writes and restores the weights (torch) and re-exports these names.

>>> checkpoint_name(12)
'step_000012'
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from masdsl.config import Config, resolve_config
from masdsl.errors import CheckpointError, UserError
from masdsl.lang import loads
from masdsl.lang.fingerprint import FORMAT_KEY, changed_parts, changes, fingerprint, is_setting
from masdsl.lang.workflow import Workflow
from masdsl.plan.run_plan import RunPlan
from masdsl.runtime import run_files
from masdsl.runtime.rundir import CONFIG, SOURCE

SHOWN_CHANGES = 12  # changed parts a refusal lists
WEIGHTS = ".safetensors"  # policies/<name>.safetensors; `.pt` in checkpoints of earlier versions


def checkpoint_name(step: int) -> str:
    return f"step_{step:06d}"


def checkpoints_dir(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / "checkpoints"


def list_complete(run_dir: str | os.PathLike) -> list[Path]:
    """Complete checkpoints of a run, oldest first (a folder counts once its state.json exists)."""
    root = checkpoints_dir(run_dir)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.name.startswith("step_") and (p / "state.json").is_file()]
    return sorted(found, key=lambda p: int(p.name.split("_")[1]))


def latest(run_dir: str | os.PathLike) -> Path | None:
    done = list_complete(run_dir)
    return done[-1] if done else None


@dataclass
class TrainState:
    """The small, JSON-safe part of a checkpoint."""

    step: int  # optimizer steps completed
    cursor: int  # tasks consumed from the train split (see trainer.next_batch)
    workflow: str
    workflow_hash: str  # sha256 of the .mas text (all an earlier masdsl compared)
    history: list[dict[str, Any]] = field(default_factory=list)  # per-step metrics
    evals: list[dict[str, Any]] = field(default_factory=list)  # {"step", "success", ...}
    extra: dict[str, Any] = field(default_factory=dict)
    # `fingerprint(workflow)`: what the workflow meant, part by part; {} in checkpoints of earlier versions
    workflow_fingerprint: dict[str, str] = field(default_factory=dict)

    @classmethod
    def fresh(cls, workflow: Workflow) -> "TrainState":
        """Step 0 of `workflow`."""
        return cls(step=0, cursor=0, workflow=workflow.name, workflow_hash=workflow.file_hash,
                   workflow_fingerprint=fingerprint(workflow))


def read_state(path: str | os.PathLike, workflow: Workflow | None = None, *, settings: bool = True) -> TrainState:
    """The JSON part of a checkpoint. With `workflow`, refuses (CheckpointError) a checkpoint whose
    workflow meant something else: the message names each changed part. Comments and layout do not
    count. `settings=False` (evaluating or exporting trained weights) leaves out the parts the
    command line overrides anyway (`train { }` keys, `sample { }` blocks)."""
    path = Path(path)
    try:
        state = TrainState(**json.loads((path / "state.json").read_text()))
    except (OSError, ValueError, TypeError) as exc:
        raise CheckpointError(f"checkpoint `{path}` is incomplete or unreadable: {exc}") from None
    if workflow is not None:
        _same_workflow(path, state, workflow, settings)
    return state


def _same_workflow(path: Path, state: TrainState, workflow: Workflow, settings: bool) -> None:
    kept = path.parent.parent / SOURCE  # `masdsl run` keeps the source it started from
    as_it_was = f"use the workflow as it was (the run folder keeps it: {kept}), or start a new run"
    now = fingerprint(workflow)
    if state.workflow_fingerprint.get(FORMAT_KEY) != now[FORMAT_KEY]:
        # written by a masdsl that kept only the text's hash (or another fingerprint format):
        # the same text is the same workflow; any other text cannot be told apart from a change
        if state.workflow_hash != workflow.file_hash:
            raise CheckpointError(
                f"checkpoint `{path}` of workflow `{state.workflow}` was written by an earlier masdsl, which kept "
                f"only the hash of the .mas text ({state.workflow_hash[:12]}), and this file's text differs "
                f"({workflow.file_hash[:12]}; even a comment counts for such a checkpoint): {as_it_was}")
        return
    ignore = None if settings else is_setting
    parts = changed_parts(state.workflow_fingerprint, now, ignore)
    if not parts:
        return
    hint = as_it_was
    if all(p.startswith("train.") for p in parts):  # only the file's train { } block: an override says it
        overrides = " ".join(f"{p}={now[p]}" for p in parts if p in now and not now[p].startswith("sha256:"))
        hint = ("a resumed run continues with the configuration saved in the checkpoint, not the file's `train { }` "
                f"block: restore the block and give the change as an override ({overrides or 'train.KEY=VALUE'}), "
                "or start a new run")
    lines = changes(state.workflow_fingerprint, now, ignore)
    if len(lines) > SHOWN_CHANGES:  # another workflow altogether: its first differences say enough
        lines = lines[:SHOWN_CHANGES - 1] + [f"... and {len(lines) - SHOWN_CHANGES + 1} more parts"]
    raise CheckpointError(f"checkpoint `{path}` was trained on workflow `{state.workflow}` as it was then, and this "
                          "file means something else (comments and layout do not count):\n  - "
                          + "\n  - ".join(lines) + f"\n{hint}")


def find(run_dir: str | os.PathLike) -> Path:
    """The newest complete checkpoint of `run_dir` (a run folder or a checkpoint folder)."""
    run_dir = Path(run_dir)
    if (run_dir / "state.json").is_file():
        return run_dir
    if not run_dir.is_dir():
        raise CheckpointError(f"`{run_dir}` is not a run folder")
    path = latest(run_dir)
    if path is None:
        raise CheckpointError(f"run folder `{run_dir}` has no complete checkpoint under checkpoints/")
    return path


def trained_policies(path: str | os.PathLike) -> list[str]:
    """The names of the policies whose weights the checkpoint folder `path` holds."""
    folder = Path(path) / "policies"
    files = sorted(folder.glob(f"*{WEIGHTS}")) + sorted(folder.glob("*.pt")) if folder.is_dir() else []
    return list(dict.fromkeys(f.name.rsplit(".", 1)[0] for f in files))


@dataclass(frozen=True)
class PlannedCheckpoint:
    """A checkpoint folder and the plan its trained policies are rebuilt with: its saved
    configuration, on the CPU, narrowed to those policies (no frozen judge is loaded for nothing)."""

    path: Path
    plan: RunPlan


def checkpoint_of(workflow: Workflow, run_dir: str | os.PathLike, step: int | None = None) -> Path:
    """The checkpoint folder of `run_dir` (`find_checkpoint`) with weights of `workflow`: one of a
    workflow that meant something else is refused (CheckpointError), settings aside (an export or
    an evaluation overrides them anyway)."""
    path = find_checkpoint(run_dir, step)
    read_state(path, workflow, settings=False)
    return path


def find_checkpoint(run_dir: str | os.PathLike, step: int | None = None) -> Path:
    """The checkpoint folder of `run_dir` (a run folder or one checkpoint): the newest, or `step`'s."""
    path = find(run_dir)
    if step is None or read_state(path).step == step:
        return path
    run = path.parent.parent
    wanted = checkpoints_dir(run) / checkpoint_name(step)
    if not (wanted / "state.json").is_file():
        have = ", ".join(str(read_state(p).step) for p in list_complete(run)) or "none"
        raise CheckpointError(f"run `{run}` has no complete checkpoint of step {step}; steps with one: {have}")
    return wanted


def run_workflow(run_dir: str | os.PathLike) -> Workflow:
    """The workflow a run trained, from the copies the run folder keeps (`masdsl.runtime.run_files`:
    the source and its imports and data files, hash-checked); a folder of an earlier version: its
    `workflow.mas`."""
    run_dir = Path(run_dir)
    kept = run_files.load(run_dir)
    if kept is not None:
        return kept
    source = run_dir / SOURCE
    if not source.is_file() or not source.read_text().strip():
        raise UserError(f"`{run_dir}` has no {SOURCE}; name the workflow file (masdsl export RUN_DIR --workflow FILE)")
    try:
        return loads(source.read_text(), name=str(source), base_dir=run_dir)
    except UserError as exc:  # e.g. an `import "env.py"` relative to the original file
        raise UserError(f"the workflow kept in {source} does not load here ({str(exc).splitlines()[0]}); "
                        "name the original file: masdsl export RUN_DIR --workflow FILE") from None


def checkpoint_config(path: Path) -> Config:
    """The configuration a checkpoint was trained with (its `config.yaml`, the run plan's record), on the CPU."""
    return resolve_config(None, path / CONFIG, ["runtime.device=cpu"])


def trained_of(workflow: Workflow, path: Path) -> list[str]:
    """The policies of `workflow` the checkpoint `path` holds trained weights of (what an export
    writes and `eval --checkpoint` evaluates: `RunPlan.with_policies(trained_of(...))`)."""
    names = [n for n in trained_policies(path) if n in workflow.policies]
    if not names:
        raise CheckpointError(f"checkpoint `{path}` holds no trained policy of workflow `{workflow.name}`")
    return names
