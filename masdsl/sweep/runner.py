"""Run a sweep (`masdsl sweep`): each trial a Ray task, each finished trial kept, then compared.

The sweep folder (`runs/<workflow>/sweeps/<name>/`) holds `sweep.json` (the grid, the seeds,
the MLflow parent), `results.jsonl` (one row per finished trial, appended as each ends),
`trials/<trial>/` (each trial's ordinary run folder), `sweeps/NAME/comparison.md` and `curves/<metric>.png`.
Restarted with the same command, a sweep skips the trials in `results.jsonl`, continues a trial
that was cut off from its newest checkpoint (`train.checkpoint_every`; bitwise as `masdsl run
--resume`), and reruns one that had none from scratch; so a killed sweep keeps what finished, and
a table longer than one sitting is built by running the same command again. Each trial writes its
progress lines (`masdsl.training.loglines`) to `trials/<trial>/progress.log`.

Trials are Ray tasks asking for `trial_cpus` CPUs and `trial_gpus` GPUs (default: the whole
local machine, so they run one after another here; on a cluster with room, side by side).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

from rich.console import Console

from masdsl.config import TrackingConfig, resolve_config
from masdsl.errors import UserError
from masdsl.lang import load
from masdsl.lang.fingerprint import changes, fingerprint
from masdsl.lang.workflow import Workflow
from masdsl.plan.run_plan import RunPlan, resolve_run
from masdsl.runtime.rundir import RunDir
from masdsl.startup import start_owned_process
from masdsl.sweep.compare import compare, markdown_table, summarise
from masdsl.sweep.grid import Trial, expand, trials
from masdsl.sweep.parent_run import adopt, client, finish_parent, open_parent
from masdsl.tracking.plot import plot_arms
from masdsl.tracking.store import resolve_uri

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

RESULTS, SPEC, PROGRESS_LOG = "results.jsonl", "sweep.json", "progress.log"
PROGRESS_EVERY_S = 60.0  # how often a running sweep says how far its trials got
CURVES = ("success/eval", "reward/eval", "groups/nonflat_frac")  # one image each
SHOWN_CHANGES = 12  # the changed parts a trial's refusal lists


@dataclass(frozen=True)
class SweepResult:
    folder: Path
    rows: list[dict]  # one per finished trial, in grid order
    lines: list[dict]  # the comparison, one per arm
    table: str  # the comparison as Markdown
    ran: list[str]  # the trial ids this invocation ran (the others were already done)
    parent_run_id: str | None


def default_name(file: str, overrides: Sequence[str], seeds: Sequence[int], configs: Sequence[str]) -> str:
    """A sweep's name when none is given: the same command gives the same name (so it resumes).

    >>> default_name("w.mas", ["a=1,2"], [0], []) == default_name("w.mas", ["a=1,2"], [0], [])
    True
    """
    key = json.dumps([Path(file).name, list(overrides), list(seeds), list(configs)])
    return hashlib.sha256(key.encode()).hexdigest()[:8]


def run_trial(file: str, plan: RunPlan, meant: Mapping[str, str], trial: Trial, run_dir: str,
              resume: str | None = None) -> dict[str, Any]:
    """One trial, in a Ray worker: an ordinary training run of the plan the driver made for it;
    its row of `results.jsonl` (plain data: a pickled `TrainResult` would tie the driver to the
    worker's module paths). The plan crosses without its workflow (a workflow's imported functions
    do not cross to another process): the worker loads the file again and checks that it still
    means what the driver planned (`meant`, its `masdsl.lang.fingerprint`). `resume`: the
    checkpoint a cut-off trial continues from (the driver's plan is the configuration it saved)."""
    start_owned_process()  # the worker runs this one trial only (`max_calls=1`)
    from masdsl.training.trainer import train  # heavy: torch; `masdsl sweep` plans every trial before any runs

    workflow = load(file)
    changed = changes(meant, fingerprint(workflow))
    if changed:
        raise UserError(f"`{file}` changed after the sweep planned trial {trial.id}; it now means something else:\n  - "
                        + "\n  - ".join(changed[:SHOWN_CHANGES]) + "\nrun the sweep again (the same command "
                        "continues it, planning every trial anew)")
    plan = dataclasses.replace(plan, workflow=workflow)
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    with (Path(run_dir) / PROGRESS_LOG).open("a", encoding="utf-8") as log:  # a file: one flushed line per phase
        return summarise(train(plan, RunDir.open(plan, run_dir), resume=resume, console=Console(file=log, width=240)),
                         trial)


def read_rows(folder: Path) -> list[dict]:
    """The finished trials' rows (`results.jsonl`)."""
    path = folder / RESULTS
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:  # the last line of a sweep killed while writing it: rerun that trial
            continue
    return rows


def check_spec(folder: Path, spec: dict) -> dict:
    """The sweep's saved spec, or `spec` saved: a restart with another grid is refused; one that
    adds seeds to the same grid extends the sweep (its finished trials stay)."""
    path = folder / SPEC
    if path.exists():
        saved = json.loads(path.read_text())
        for key in ("file", "overrides", "seeds", "configs"):
            extends = key == "seeds" and set(saved.get(key) or ()) <= set(spec[key])
            if saved.get(key) != spec[key] and not extends:
                raise UserError(f"{folder} holds another sweep ({key}: {saved.get(key)} now {spec[key]}); "
                                "give a new --name, the same command to resume it, or its seeds and more to extend it")
        if saved["seeds"] != spec["seeds"]:
            saved.update(seeds=spec["seeds"], trials=spec["trials"])
            path.write_text(json.dumps(saved, indent=1))
        return saved
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(spec, indent=1))
    return spec


def run_sweep(file: str, overrides: Sequence[str], seeds: Sequence[int], *, configs: Sequence[str] = (),
              name: str | None = None, out: str | Path | None = None, trial_cpus: float | None = None,
              trial_gpus: float = 0.0, say: Callable[[str], None] = print) -> SweepResult:
    """Run every trial not finished yet, then compare; see the module docstring."""
    common, grid = expand(overrides)
    todo = trials(grid, seeds, common)
    workflow = load(file)  # the workflow's mistakes before any trial starts
    # every trial is planned once (what `run` would refuse) before any starts; its worker runs that plan
    plans = [resolve_run(workflow, resolve_config(workflow.train, list(configs) or None, t.overrides)) for t in todo]
    plan = plans[0]  # the settings the sweep itself reads: runs_dir, tracking, Ray, steps
    name = name or default_name(file, overrides, seeds, configs)
    folder = Path(out) if out else Path(plan.runtime.runs_dir) / workflow.name / "sweeps" / name
    spec = check_spec(folder, {"name": name, "file": str(Path(file).resolve()), "overrides": list(overrides),
                               "seeds": list(seeds), "configs": [str(Path(c).resolve()) for c in configs],
                               "trials": [t.id for t in todo], "parent_run_id": None})
    mlflow, parent, uri = _open_tracking(plan.tracking, workflow, folder, spec, grid, seeds)
    if uri:  # every trial logs into the store the parent run is in, wherever its worker runs
        plans = [dataclasses.replace(p, tracking=dataclasses.replace(p.tracking, uri=uri)) for p in plans]
    done = {r["id"]: r for r in read_rows(folder)}
    remaining = [(t, p) for t, p in zip(todo, plans) if t.id not in done]
    say(f"sweep {name}: {len(todo)} trials ({len(grid)} arms x {len(seeds)} seeds), {len(done)} done, "
        f"{len(remaining)} to run; folder {folder}")
    ran: list[str] = []
    status = "FAILED"
    try:
        for trial, row in _run_on_ray(spec["file"], fingerprint(workflow), remaining, folder, plan, trial_cpus,
                                      trial_gpus, say):
            if mlflow is not None and parent is not None and row["mlflow_run_id"]:
                adopt(mlflow, parent, row["mlflow_run_id"], trial)
            with (folder / RESULTS).open("a") as f:
                f.write(json.dumps(row) + "\n")
            done[trial.id] = row
            ran.append(trial.id)
            say(f"trial {trial.id}: eval success {_pct(row['final_success'])} (best {_pct(row['best_success'])}), "
                f"{row['wall_s']:.0f} s")
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        rows = [done[t.id] for t in todo if t.id in done]
        lines = compare(rows)
        table = markdown_table(lines)
        (folder / "comparison.md").write_text(table)
        images = _plot(rows, folder / "curves")
        if mlflow is not None and parent is not None:  # both or neither (`_open_tracking`)
            finish_parent(mlflow, parent, table, lines, images, status=status)
    return SweepResult(folder, rows, lines, table, ran, parent)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


def _open_tracking(tracking: TrackingConfig, workflow: Workflow, folder: Path, spec: dict, grid: list, seeds: Sequence[int]
                   ) -> tuple[MlflowClient | None, str | None, str | None]:
    """(client, parent run id, resolved uri), or (None, None, None) with tracking off."""
    if not tracking.enabled:
        return None, None, None
    uri = resolve_uri(tracking.uri)
    mlflow = client(uri)
    tags = {"masdsl.sweep.grid": json.dumps(grid), "masdsl.sweep.seeds": ",".join(map(str, seeds)),
            "masdsl.workflow": workflow.name}
    parent = open_parent(mlflow, tracking.experiment or workflow.name, spec["name"], tags, spec.get("parent_run_id"))
    if spec.get("parent_run_id") != parent:
        spec["parent_run_id"] = parent
        (folder / SPEC).write_text(json.dumps(spec, indent=1))
    return mlflow, parent, uri


def _run_on_ray(file: str, meant: Mapping[str, str], remaining: list[tuple[Trial, RunPlan]], folder: Path,
                plan: RunPlan, trial_cpus: float | None, trial_gpus: float, say: Callable[[str], None]
                ) -> Iterator[tuple[Trial, dict[str, Any]]]:
    """Yield (trial, its results row) as trials finish, each a Ray task running its plan."""
    if not remaining:
        return
    import ray  # heavy: ray is optional (the train extra); only sweeps and `runtime.ray` runs need it

    from masdsl.runtime.actors import init_ray  # heavy: ray, as above
    from masdsl.training import checkpoint as ckpt  # heavy: torch, only once every trial was planned

    init_ray(plan.runtime)
    cpus = trial_cpus if trial_cpus is not None else ray.cluster_resources().get("CPU", 1.0)
    # max_calls=1: each trial in a fresh worker process, so one trial's models, engines and
    # allocator caches are gone before the next starts (a reused worker had 9.3 GB resident in its second trial)
    task = ray.remote(max_calls=1)(run_trial).options(num_cpus=cpus, num_gpus=trial_gpus, max_retries=0)
    pending = {}
    for trial, trial_plan in remaining:
        run_dir = folder / "trials" / trial.folder
        resume = ckpt.latest(run_dir) if run_dir.exists() else None
        if run_dir.exists() and resume is None:  # cut off by an earlier kill before a checkpoint: start again
            shutil.rmtree(run_dir)
        if resume is not None:
            say(f"trial {trial.id}: continues from {resume.name}")
        ref = task.remote(file, trial_plan, meant, trial, str(run_dir.resolve()), str(resume.resolve()) if resume else None)
        pending[ref] = trial
    say(f"submitted {len(pending)} trials to Ray ({cpus:g} CPUs, {trial_gpus:g} GPUs each)")
    steps = plan.train.steps
    seen: dict[str, int] = {}
    try:
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=PROGRESS_EVERY_S)
            if not ready:  # still running: say how far each trial got (its records' newest step)
                for trial in pending.values():
                    step = latest_step(folder / "trials" / trial.folder)
                    if step is not None and seen.get(trial.id) != step:
                        seen[trial.id] = step
                        say(f"trial {trial.id}: step {step}/{steps}")  # records of update N say N
                continue
            trial = pending.pop(ready[0])
            try:
                result = ray.get(ready[0])
            except (ray.exceptions.OutOfMemoryError, ray.exceptions.WorkerCrashedError) as e:
                raise trial_lost(trial, e, folder / "trials" / trial.folder) from None
            yield trial, result
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)


def trial_lost(trial: Trial, error: Exception, run_dir: Path) -> UserError:
    """The error a sweep stops with when a trial's process was killed (Ray's memory monitor, or the
    kernel's): what killed it, that its checkpoints are kept, and how to make room.

    >>> import ray.exceptions
    >>> e = ray.exceptions.OutOfMemoryError("1 worker(s) were killed ... was 21.94GB used / 23.54GB limit\\nmore")
    >>> print(trial_lost(Trial("lr=1", 0, ["lr=1"]), e, Path("trials/x")))  # doctest: +NORMALIZE_WHITESPACE
    trial lr=1,seed=0 was killed by Ray's memory monitor (1 worker(s) were killed ... was 21.94GB used / 23.54GB limit).
    Its checkpoints in trials/x are kept: the same command continues it from the newest one.
    To make room: stop other work on the machine, lower `train.micro_batch_tokens`, or give each
    trial more of the machine (`--trial-cpus`) so that fewer run side by side.
    """
    import ray.exceptions  # heavy: ray, as in `_run_on_ray` (the only caller)

    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    what = ("Ray's memory monitor" if isinstance(error, ray.exceptions.OutOfMemoryError)
            else "the end of its worker process (the kernel's out-of-memory killer, or a crash)")
    return UserError(f"trial {trial.id} was killed by {what} ({first}).\n"
                     f"Its checkpoints in {run_dir} are kept: the same command continues it from the newest one.\n"
                     "To make room: stop other work on the machine, lower `train.micro_batch_tokens`, or give each\n"
                     "trial more of the machine (`--trial-cpus`) so that fewer run side by side.")


def latest_step(run_dir: Path) -> int | None:
    """The step of the newest record of a running trial (the last line of its `records.jsonl`),
    read from the end of the file; None before its first record."""
    path = run_dir / "records.jsonl"
    if not path.exists():
        return None
    with path.open("rb") as f:
        size = f.seek(0, 2)
        window = 1 << 16
        while True:  # a record holds its token ids: widen the window until it holds a whole one
            f.seek(max(0, size - window))
            lines = f.read().splitlines()
            whole = lines if window >= size else lines[1:]  # the first piece may start mid-line
            for line in reversed(whole):
                try:
                    return int(json.loads(line)["step"])
                except (ValueError, KeyError, TypeError):  # the line being written, or not a record
                    continue
            if window >= size:
                return None
            window *= 4


def _plot(rows: list[dict], folder: Path) -> list[Path]:
    """One PNG per metric of `CURVES`: each arm's mean over its seeds, per step."""
    if not rows:
        return []
    out = []
    for metric in CURVES:
        series: dict[str, dict[int, list[float]]] = {}
        for row in rows:
            for step, value in row["curves"].get(metric, []):
                series.setdefault(row["arm"] or "base", {}).setdefault(step, []).append(value)
        means = {arm: [(s, sum(v) / len(v)) for s, v in sorted(pts.items())] for arm, pts in series.items()}
        path = plot_arms(means, folder / f"{metric.replace('/', '_')}.png", metric)
        if path is not None:
            out.append(path)
    return out
