"""What tracking costs a training step: `Tracker.log_metrics` latency with the server up, during
an outage, and the time to flush the buffer once the server returns; also the default SQLite store.

    .venv/bin/python benchmarks/tracking.py [--steps 40] [--append docs/performance.md]

Each step logs 30 metrics named like the trainer's (reward/<role>/turn<t>/mean|std, loss/<policy>,
...). The server is a real `mlflow server` on 127.0.0.1 (SQLite store in a temporary folder).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "tracking"))

from conftest import MlflowServer, small_workflow  # noqa: E402  (the tests' server helper)

from masdsl.config import resolve_config  # noqa: E402
from masdsl.tracking import start_run  # noqa: E402


def metrics(step: int) -> dict[str, float]:
    m = {}
    for role in ("coder", "tester"):
        for turn in range(3):
            m[f"reward/{role}/turn{turn}/mean"] = 0.1 * step + turn
            m[f"reward/{role}/turn{turn}/std"] = 0.05
    for policy in ("writer", "checker"):
        for name in ("loss", "clip_frac", "kl", "grad_norm"):
            m[f"{name}/{policy}"] = 1.0 / (step + 1)
    m |= {"success/train": step / 100, "groups/count": 16.0, "groups/zero_variance_frac": 0.2,
          "tokens/generated": 4096.0, "throughput/tokens_per_s": 80.0, "time/rollout_s": 30.0,
          "time/update_s": 40.0, "memory/peak_rss_gb": 6.5, "success/eval": 0.3, "reward/eval": 0.4}
    return m


def timed_steps(tracker, steps: range) -> list[float]:
    out = []
    for s in steps:
        t0 = time.perf_counter()
        tracker.log_metrics(metrics(s), step=s)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def ms(values: list[float]) -> str:
    return f"median {statistics.median(values):.1f} ms, max {max(values):.1f} ms"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--append", type=Path, help="append the results under `## tracking`")
    args = ap.parse_args()
    if args.append:
        args.append = args.append.resolve()  # the default-store part changes directory
    n = args.steps
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        server = MlflowServer(tmp / "server")
        server.root.mkdir()
        t0 = time.perf_counter()
        server.start()
        lines.append(f"- `mlflow server` up (health answers) after {time.perf_counter() - t0:.1f} s")
        try:
            cfg = resolve_config(overrides=[f"tracking.uri={server.uri}"])
            t0 = time.perf_counter()
            tracker = start_run(small_workflow("bench"), cfg, kind="run", run_dir=tmp / "run")
            lines.append(f"- `start_run` (experiment, parent + 2 child runs, params, tags, source, graph, config): "
                         f"{time.perf_counter() - t0:.2f} s")
            up = timed_steps(tracker, range(n))
            lines.append(f"- `log_metrics`, 30 metrics, server up: {ms(up)} ({n} steps)")
            server.stop()
            down = timed_steps(tracker, range(n, 2 * n))
            lines.append(f"- `log_metrics` during an outage (server stopped): {ms(down)} ({n} steps; "
                         f"the first call finds the outage)")
            server.start()
            t0 = time.perf_counter()
            assert tracker.outbox.pump(force=True)
            lines.append(f"- flushing the {n} buffered steps after the server returned: "
                         f"{time.perf_counter() - t0:.2f} s")
            t0 = time.perf_counter()
            tracker.finish()
            lines.append(f"- `finish()` (progress plot, end 3 runs): {time.perf_counter() - t0:.2f} s")
        finally:
            server.stop()
        os.chdir(tmp)
        os.environ.pop("MLFLOW_TRACKING_URI", None)
        t0 = time.perf_counter()
        local = start_run(small_workflow("bench_local"), resolve_config(), kind="run", run_dir=tmp / "local")
        lines.append(f"- default store (`sqlite:///mlflow.db`, created on first use): `start_run` "
                     f"{time.perf_counter() - t0:.2f} s")
        lines.append(f"- `log_metrics` on the default store: {ms(timed_steps(local, range(n)))}")
        local.finish()
        os.chdir(ROOT)
    load = os.getloadavg()[0]
    head = (f"Command: `.venv/bin/python benchmarks/tracking.py --steps {n}` "
            f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs shared, "
            f"load average {load:.1f} at the end, Python {platform.python_version()}).")
    text = head + "\n\n" + "\n".join(lines) + "\n"
    print(text)
    if args.append:
        old = args.append.read_text() if args.append.exists() else "# Performance\n"
        args.append.write_text(old.rstrip("\n") + "\n\n## tracking\n\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
