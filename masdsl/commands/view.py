"""`masdsl view RUN_DIR [--out FILE.html] [--step S] [--serve [--port P]]`: the AT-GRPO groups
of a run as one self-contained HTML page (`masdsl.training.viewpage`).

For each step, each (task, role, turn) group with its K candidates side by side: the prompt,
each reply, its parsed fields, reward and its terms, advantage, whether it was selected, cut at
its token budget or failed to parse; filters for role, turn, non-flat groups and failures.
RUN_DIR is a run folder, `runs/<workflow>` (its newest run) or a `masdsl eval` run's folder;
the run folders are read as `masdsl trace` reads them (`masdsl.commands.trace`). Without
`--serve` the page is written (default `RUN_DIR/view.html`); with it, it is served on
127.0.0.1 only and rebuilt on each load, so a reload shows the steps of a run still going.
"""

from __future__ import annotations

import argparse
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable
from urllib.parse import urlsplit

from masdsl.commands.trace import check_step, selected_records
from masdsl.errors import UserError
from masdsl.runtime.rundir import RunDir, open_run
from masdsl.training.viewpage import MAX_BYTES, PAGE, run_page

DEFAULT_PORT = 8765


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", help="a run folder (runs/<workflow>/<timestamp>), runs/<workflow>, or an eval run's folder")
    p.add_argument("--out", metavar="FILE.html", help="where to write the page (default: RUN_DIR/view.html)")
    p.add_argument("--step", type=int, metavar="S", help="only this training step's rollout (-1: the evaluations)")
    p.add_argument("--max-mb", type=float, default=MAX_BYTES / 1e6, metavar="MB",
                   help=f"leave out the oldest steps past this size (0: no limit; default {MAX_BYTES / 1e6:g})")
    p.add_argument("--serve", action="store_true", help="serve the page on 127.0.0.1 instead of writing it")
    p.add_argument("--port", type=int, metavar="P",
                   help=f"with --serve: the port (default {DEFAULT_PORT}; 0: any free port)")


def page_builder(run: RunDir, step: int | None, max_mb: float) -> Callable[[], str]:
    """Builds the page anew from the run folder each time it is called."""
    def build() -> str:
        pairs = None if step is None else selected_records(run, step)
        return run_page(run, pairs, max_bytes=int(max_mb * 1e6))

    return build


def make_server(build: Callable[[], str], port: int) -> ThreadingHTTPServer:
    """An HTTP server on 127.0.0.1:`port` answering `/` with `build()` (a bad port: UserError)."""
    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if urlsplit(self.path).path not in ("/", f"/{PAGE}"):
                self.send_error(404, "masdsl view serves one page: /")
                return
            try:
                body, status = build().encode("utf-8"), 200
            except (UserError, OSError) as exc:  # the run folder went away between two loads
                body, status = f"masdsl view: {exc}".encode("utf-8"), 500
            self.send_response(status)
            self.send_header("Content-Type", "text/html; charset=utf-8" if status == 200 else "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet: one line per load is noise
            pass

    try:
        return ThreadingHTTPServer(("127.0.0.1", port), Page)
    except OSError as exc:
        raise UserError(f"cannot serve on 127.0.0.1:{port}: {exc.strerror or exc}; pick another with --port "
                        "(0: any free port)") from None


def main(args: argparse.Namespace) -> int:
    if not os.path.exists(args.run_dir):
        raise UserError(f"{args.run_dir}: no such run folder")
    if args.port is not None and not args.serve:
        raise UserError("--port goes with --serve")
    if args.out and args.serve:
        raise UserError("--out writes the page, --serve serves it: give one of them")
    if args.max_mb < 0:
        raise UserError(f"--max-mb must be 0 (no limit) or more; got {args.max_mb:g}")
    run = open_run(args.run_dir)
    if args.step is not None:
        check_step(run, args.step)
    build = page_builder(run, args.step, args.max_mb)
    if not args.serve:
        out = Path(args.out) if args.out else run.path / PAGE
        try:
            out.write_text(build(), encoding="utf-8")
        except OSError as exc:
            raise UserError(f"cannot write {out}: {exc.strerror or exc}") from None
        print(f"wrote {out}  (open it in a browser: file://{out.resolve()})")
        return 0
    server = make_server(build, DEFAULT_PORT if args.port is None else args.port)
    host, port = server.server_address[:2]
    print(f"serving the groups of {run.path} on http://{host}:{port}/  (Ctrl-C to stop)", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0
