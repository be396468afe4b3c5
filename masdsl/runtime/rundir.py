"""The run folder: `runs/<workflow>/<timestamp>/` with the records and what produced them.

    records.jsonl   one StepRecord per line, appended as episodes finish (never held whole)
    graph.mmd       the compiled flow as mermaid text
    config.yaml     the plan's record: the resolved configuration (`RunPlan.record`)
    workflow.mas    the source text of the workflow
    files/, files.json  the source and every local file it reads, copied, with their sha256
                    (`masdsl.runtime.run_files`: export and eval load the workflow from them)
    summary.json    the metrics of the run (written at its end: `write_summary`)
    eval/step_N.jsonl  a training run's evaluations after N steps (`write_evaluation`)

`RunDir` is the one writer of these files: records, evaluations and the summary go in through it.

>>> import tempfile
>>> from masdsl.runtime.records import StepRecord
>>> rd = RunDir(Path(tempfile.mkdtemp()))
>>> rd.write_records([StepRecord(0, 0, "t", "a", 0, "a", 0, True, "p", [1], [2], [0.0], 1.0, 0.0, 1.0, "stop", True)])
>>> [r.task_id for r in rd.records()]
['t']
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Iterable, Iterator

from masdsl.errors import UserError
from masdsl.lang.graph import to_mermaid
from masdsl.lang.workflow import Workflow
from masdsl.plan.run_plan import RunPlan
from masdsl.runtime import run_files
from masdsl.runtime.records import StepRecord, read_records, write_records

RECORDS = "records.jsonl"
GRAPH = "graph.mmd"
CONFIG = "config.yaml"
SOURCE = "workflow.mas"
SUMMARY = "summary.json"
EVAL_DIR = "eval"


def mermaid(workflow: Workflow) -> str:
    """The flow as mermaid text (`masdsl.lang.graph.to_mermaid`)."""
    return to_mermaid(workflow)


class RunDir:
    """One run's folder; `write_records` doubles as the executor's `on_records` callback."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.n_records = 0

    @classmethod
    def open(cls, plan: RunPlan, path: str | Path | None = None) -> "RunDir":
        """The one writer of a run folder's record of what ran: a fresh
        `runtime.runs_dir/<workflow>/<UTC timestamp>` folder, or `path` (a resumed run, a sweep
        trial, `masdsl.train(run_dir=...)`), holding the plan's `config.yaml` (on resume: the
        configuration the run continues with) and, where it has none yet, the graph, the source
        and the files the workflow reads. Records go in with `write_records`; checkpoints under
        `checkpoints/` (`masdsl.training.session.TrainSession.save_checkpoint`)."""
        workflow = plan.workflow
        if path is None:
            base = Path(plan.runtime.runs_dir) / workflow.name
            stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
            path, i = base / stamp, 1
            while path.exists():
                i += 1
                path = base / f"{stamp}-{i}"
        rd = cls(Path(path))
        (rd.path / CONFIG).write_text(plan.record().yaml, encoding="utf-8")
        if not (rd.path / SOURCE).is_file():  # a resumed run keeps the source it started from
            (rd.path / GRAPH).write_text(mermaid(workflow), encoding="utf-8")
            (rd.path / SOURCE).write_text(workflow.source or "", encoding="utf-8")
            run_files.keep(rd.path, workflow)  # the folder works alone: export after the originals moved
        return rd

    @property
    def records_path(self) -> Path:
        return self.path / RECORDS

    def write_records(self, records: Iterable[StepRecord]) -> None:
        self.n_records += write_records(self.records_path, records)

    __call__ = write_records

    def truncate_records(self, step: int) -> None:
        """Drop records of steps > `step` (written after the checkpoint a run resumes from: the
        checkpoint of step N covers the rollouts of updates 1..N, labelled 1..N).

        Streams line by line into a temporary file that replaces the old one (a kill here never
        loses the records the checkpoint covers; memory stays flat however long the run was).
        A line that does not parse is the torn last write of a killed run: it is dropped.
        """
        path = self.records_path
        if not path.is_file():
            return
        tmp = path.with_name(f".{path.name}.tmp")
        with open(path, encoding="utf-8") as src, open(tmp, "w", encoding="utf-8") as dst:
            for line in src:
                try:
                    keep = json.loads(line)["step"] <= step
                except (ValueError, KeyError, TypeError):  # blank or torn
                    continue
                if keep:
                    dst.write(line if line.endswith("\n") else line + "\n")
            dst.flush()
            os.fsync(dst.fileno())
        os.replace(tmp, path)

    def write_evaluation(self, step: int, records: Iterable[StepRecord]) -> Path:
        """A training run's evaluation after `step` updates: `eval/step_N.jsonl`."""
        folder = self.path / EVAL_DIR
        folder.mkdir(parents=True, exist_ok=True)
        out = folder / f"step_{step:06d}.jsonl"
        write_records(out, records)
        return out

    def records(self) -> Iterator[StepRecord]:
        return read_records(self.records_path) if self.records_path.exists() else iter(())

    def evaluations(self) -> Iterator[tuple[StepRecord, str]]:
        """A training run's evaluations (`eval/step_N.jsonl`, by step), each record labelled
        `eval at step N` (`masdsl trace --step -1`, `masdsl view`)."""
        for path in eval_files(self.path):
            for r in read_records(path):
                yield r, f"eval at step {r.step}"

    def first_and_last_evaluation(self) -> tuple[Iterator[StepRecord], Iterator[StepRecord]] | None:
        """The records of a training run's first and last evaluation (before training and after
        its last step), each read as it is consumed; None when it has fewer than two."""
        files = eval_files(self.path)
        return (read_records(files[0]), read_records(files[-1])) if len(files) >= 2 else None

    def write_summary(self, summary: dict[str, Any]) -> Path:
        out = self.path / SUMMARY
        out.write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")
        return out


def eval_files(run_dir: str | Path) -> list[Path]:
    """The evaluation records of a training run: `eval/step_N.jsonl`, by step."""
    return sorted((Path(run_dir) / EVAL_DIR).glob("step_*.jsonl"))


def open_run(path: str | Path) -> RunDir:
    """An existing run folder (a UserError if it holds no records)."""
    p = Path(path)
    if (p / RECORDS).is_file():
        return RunDir(p)
    if p.is_dir():  # runs/<workflow>: take the newest run inside
        runs = sorted((c for c in p.iterdir() if (c / RECORDS).is_file()), key=lambda c: c.name)
        if runs:
            return RunDir(runs[-1])
    raise UserError(f"`{p}` is not a run folder (no {RECORDS} in it)")
