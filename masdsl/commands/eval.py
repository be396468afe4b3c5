"""`masdsl eval FILE [overrides] [--config Y] [--tasks N]`: roll out the eval split, report metrics.

Loads and checks the workflow, resolves the configuration (defaults < `train { }` < `--config`
< overrides), builds the env and one engine per distinct model, runs the eval split in
evaluation mode (one candidate per step at `train.eval_temperature`) with a progress bar,
writes the run folder (records, graph, config, summary) and prints a table: success rate,
mean reward by role and turn, episodes, tokens generated, tokens/s, wall time.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from masdsl.errors import UserError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="the .mas workflow")
    _options(p)
    # REMAINDER so options may follow the overrides (`FILE a=1 --tasks 2 b=2`); split in main
    p.add_argument("overrides", nargs=argparse.REMAINDER, help="dotted config overrides, e.g. train.eval_temperature=0.7")


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="YAML", help="a YAML config file layered under the overrides")
    p.add_argument("--tasks", type=int, metavar="N", default=None,
                   help="evaluate the first N eval tasks (default: train.eval_tasks; 0: all)")


def split_options(args: argparse.Namespace) -> argparse.Namespace:
    """Move options written among the overrides into `args`; anything else dash-led is an error.

    >>> ns = argparse.Namespace(config=None, tasks=None, overrides=["a=1", "--tasks", "2", "b=2"])
    >>> split_options(ns).tasks, ns.overrides
    (2, ['a=1', 'b=2'])
    """
    from masdsl.commands import split_options as split

    return split(args, "masdsl eval", _options, ("config", "tasks"))


def _isolation_summary(cfg: Any) -> str | None:
    try:
        from masdsl.envs.sandbox import isolation_summary
    except ImportError:
        return None
    from masdsl.runtime.session import sandbox_limits

    return isolation_summary(sandbox_limits(cfg))


def _start_tracking(workflow: Any, cfg: Any, run_dir: Any) -> Any:
    try:
        from masdsl.tracking import start_run
    except ImportError:
        return None
    return start_run(workflow, cfg, kind="eval", run_dir=run_dir)


def table(workflow: Any, m: dict[str, float], run_dir: Any) -> Any:
    """The rich table of an eval run's metrics."""
    from rich.table import Table

    t = Table(title=f"masdsl eval · {workflow.name}", caption=f"records: {run_dir}  ·  transcripts: masdsl trace {run_dir}")
    t.add_column("metric")
    t.add_column("value", justify="right")
    t.add_row("success rate", f"{m['success/eval']:.3f}")
    for key, value in m.items():
        if key.startswith("reward/"):
            _, role, turn = key.split("/")
            t.add_row(f"mean reward · {role} · turn {turn.removeprefix('turn')}", f"{value:.4f}")
    t.add_row("episodes", f"{int(m['episodes'])}")
    t.add_row("  truncated by max_turns", f"{int(m['truncated_episodes'])}")
    t.add_row("tokens generated", f"{int(m['tokens_generated'])}")
    t.add_row("tokens/s", f"{m['tokens_per_s']:.1f}")
    t.add_row("wall time", f"{m['wall_s']:.1f} s (generate {m['gen_s']:.1f} s, env {m['env_s']:.1f} s)")
    if m["truncated_prompts"]:
        t.add_row("truncated prompts", f"{int(m['truncated_prompts'])}")
    if m["expression_errors"]:
        t.add_row("expression errors (scored 0)", f"{int(m['expression_errors'])}")
    return t


def main(args: argparse.Namespace) -> int:
    import masdsl
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from masdsl.config import resolve_config
    from masdsl.runtime.executor import metrics, rollout
    from masdsl.runtime.rundir import RunDir
    from masdsl.runtime.session import build_engines, close_engines, load_split, make_env

    err, out = Console(stderr=True), Console()
    split_options(args)
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # vLLM logs its start-up to stdout
    workflow = masdsl.load(args.file)
    cfg = resolve_config(workflow.train, args.config, args.overrides)
    if "eval" not in workflow.data:
        raise UserError(f"{args.file}: the workflow has no `data eval ...` line to evaluate on")
    tasks = load_split(workflow.data["eval"])
    n = cfg.train.eval_tasks if args.tasks is None else args.tasks
    if n < 0:
        raise UserError("--tasks must be 0 (all) or more")
    tasks = tasks[:n] if n else tasks
    env = make_env(workflow, cfg)
    summary = _isolation_summary(cfg)
    if summary:
        err.print(summary if summary.startswith("sandbox") else f"sandbox: {summary}", highlight=False, markup=False)
    with err.status("loading models ..."):
        engines = build_engines(workflow, cfg)
    tracker = None
    try:
        run_dir = RunDir.create(workflow, cfg)
        tracker = _start_tracking(workflow, cfg, run_dir.path)
        columns = (TextColumn("eval"), BarColumn(), MofNCompleteColumn(), TextColumn("episodes"), TimeElapsedColumn())
        with Progress(*columns, console=err, transient=False) as bar:
            job = bar.add_task("eval", total=len(tasks))
            ro = rollout(workflow, env, tasks, engines, mode="eval", samples=1, step=-1, seed=cfg.train.seed,
                         cfg=cfg, on_records=run_dir.write_records, progress=lambda k: bar.advance(job, k),
                         keep_records=False)
    except BaseException as exc:
        if tracker is not None:  # never leave the MLflow run marked RUNNING
            tracker.finish("KILLED" if isinstance(exc, KeyboardInterrupt) else "FAILED")
        raise
    finally:
        close_engines(engines)
    m = metrics(ro, "eval")
    run_dir.write_summary({"metrics": m, "errors": ro.errors, "workflow": workflow.name, "tasks": len(tasks)})
    if tracker is not None:
        tracker.log_metrics(m, step=0)
        tracker.log_artifact(run_dir.records_path, "records")
        tracker.finish()
    for message, count in ro.errors.items():
        err.print(f"warning: {message} ({count}x, scored 0)", highlight=False, markup=False)
    out.print(table(workflow, m, run_dir.path))
    return 0


if __name__ == "__main__":  # pragma: no cover
    from masdsl.cli import main as cli_main

    sys.exit(cli_main(["eval", *sys.argv[1:]]))
