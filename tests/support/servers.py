"""`masdsl serve-env` in a process of its own, as a user starts it: on a free port (`--port 0`,
the port read from the line it prints), waited for until it answers, killed at the end."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from typing import Iterator

READY_S = 60.0  # a cold start imports openenv-core (FastAPI, pydantic): a few seconds on a busy machine


@contextmanager
def serve_env(*args: str, health: str = "/health") -> Iterator[str]:
    """`masdsl serve-env ARGS --port 0` running; yields its URL once GET `health` answers 200
    (`/v1/info` for the /v1 protocol)."""
    # its log goes to a file: a pipe nobody reads would stall the server once full
    log = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen([sys.executable, "-m", "masdsl", "serve-env", *args, "--port", "0"],
                            stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        line = proc.stdout.readline()
        if " on http://" not in line:
            proc.kill()
            proc.wait()
            log.seek(0)
            raise AssertionError(f"serve-env did not start: {line}{log.read()}")
        url = line.split(" on ")[1].split()[0]
        deadline = time.monotonic() + READY_S
        while True:
            try:
                with urllib.request.urlopen(url + health, timeout=2) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    raise AssertionError(f"serve-env at {url} never answered: {log.read()}")
                time.sleep(0.1)
        yield url
    finally:
        proc.kill()
        proc.wait()
        log.close()
