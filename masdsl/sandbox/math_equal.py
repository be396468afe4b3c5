"""Math answers are compared out of process, under a wall-clock limit.

math-verify's own timeouts use SIGALRM, which works only in a process's main thread, and does
not interrupt C code at all (sympy evaluating `9^{9^{9^{9}}}` computes a 370-million-digit
integer). Rewards run in threads (the runtime's reward pool, Ray tasks), so a pathological
answer could hang a whole training step. Here every comparison is sent to a long-lived worker
process (`math_worker.py`, math-verify in its main thread, memory-limited); one that
does not answer within `MASDSL_MATH_TIMEOUT` seconds (default 4) is killed, the comparison
counts as "not equal", and the next comparison starts a fresh worker. Up to
`MASDSL_MATH_WORKERS` (default 2) workers serve threads at once. Results are cached (LRU).

The worker runs model text through math-verify and sympy parsers, not arbitrary code, so it is
not put in the code sandbox (starting math-verify there per run would cost a second or more);
sympy's `parse_expr`, which evaluates Python, gets only plain arithmetic text there.

>>> equal("\\\\frac{1}{2}", "0.5"), equal("3", "4")
(True, False)
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import OrderedDict
from pathlib import Path

WORKER = Path(__file__).with_name("math_worker.py")
STARTUP_TIMEOUT_S = 120.0


def timeout_s() -> float:
    """The wall-clock limit of one comparison (MASDSL_MATH_TIMEOUT, default 4 seconds)."""
    return float(os.environ.get("MASDSL_MATH_TIMEOUT", "4"))


def workers() -> int:
    return max(1, int(os.environ.get("MASDSL_MATH_WORKERS", "2")))


class _Worker:
    def __init__(self) -> None:
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
               "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        self.dir = tempfile.mkdtemp(prefix="masdsl-math-")
        self.proc = subprocess.Popen(
            [sys.executable, "-I", str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, cwd=self.dir, env=env, start_new_session=True,
        )
        self.buffer = b""
        self.ready = False

    def _line(self, deadline: float) -> bytes | None:
        fd = self.proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self.buffer:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(timeout=left):
                    return None
                data = os.read(fd, 4096)
                if not data:
                    return None
                self.buffer += data
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line

    def ask(self, answer: str, reference: str, limit: float) -> bool | None:
        """True/False, or None when the worker died or ran past `limit` (then it is dead)."""
        try:
            if not self.ready:
                if self._line(time.monotonic() + STARTUP_TIMEOUT_S) != b"ready":
                    self.close()
                    return None
                self.ready = True
            self.proc.stdin.write((json.dumps([answer, reference]) + "\n").encode())
            self.proc.stdin.flush()
        except OSError:
            self.close()
            return None
        line = self._line(time.monotonic() + limit)
        if line not in (b"true", b"false"):
            self.close()
            return None
        return line == b"true"

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        try:
            os.rmdir(self.dir)
        except OSError:
            pass


_LOCK = threading.Lock()
_POOLS: dict[int, queue.Queue] = {}  # per process id (a forked worker starts its own)
_CACHE: OrderedDict = OrderedDict()
_CACHE_SIZE = 8192
_ALL: list[_Worker] = []


def _pool() -> queue.Queue:
    pid = os.getpid()
    with _LOCK:
        if pid not in _POOLS:
            slots: queue.Queue = queue.Queue()
            for _ in range(workers()):
                slots.put(None)  # a slot; the worker starts on first use
            _POOLS[pid] = slots
            if len(_POOLS) == 1:
                atexit.register(_close_all)
        return _POOLS[pid]


def _close_all() -> None:
    for worker in list(_ALL):
        if worker.alive:
            worker.close()


def equal(answer: str, reference: str) -> bool:
    """Whether math-verify finds `answer` equal to `reference`; False when it errs or runs past
    the time limit (then its worker is killed and replaced)."""
    key = (answer, reference)
    with _LOCK:
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key]
    slots = _pool()
    worker = slots.get()
    result = None
    try:
        if worker is None or not worker.alive:
            worker = _Worker()
            with _LOCK:
                _ALL.append(worker)
        result = worker.ask(answer, reference, timeout_s())
        if result is None:  # killed: the slot gets a fresh worker next time
            with _LOCK:
                if worker in _ALL:
                    _ALL.remove(worker)
            worker = None
    finally:
        slots.put(worker)
    if result is not None:  # a timeout may depend on the load: not cached
        with _LOCK:
            _CACHE[key] = result
            while len(_CACHE) > _CACHE_SIZE:
                _CACHE.popitem(last=False)
    return bool(result)


__all__ = ["equal", "timeout_s", "workers"]
