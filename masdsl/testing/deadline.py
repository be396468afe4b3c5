"""`seconds_in_child(fn, *args, limit=10)`: the CPU seconds `fn(*args)` takes, run in a forked
child that is killed after `limit` seconds of wall time.

For tests of "no text makes this slow": a regex that backtracks runs inside C code, which
answers no signal, so neither pytest-timeout nor an alarm stops it in the test's own process;
in a child, a regression fails the test at `limit` instead of hanging the run. CPU time, not
wall time: on a machine shared with other jobs a fast call can wait seconds for a core.

>>> seconds_in_child(sum, [1, 2]) < 1.0
True
>>> seconds_in_child(time.sleep, 5, limit=0.2)
inf
"""

from __future__ import annotations

import gc
import math
import os
import signal
import time


def seconds_in_child(fn, *args, limit: float = 10.0) -> float:
    """CPU seconds `fn(*args)` took in a forked child, `math.inf` when it ran past `limit` wall
    seconds (it is killed). An exception in the child fails here as an AssertionError naming it.
    Where there is no `os.fork`, the call runs here and is timed."""
    if not hasattr(os, "fork"):
        t0 = time.process_time()
        fn(*args)
        return time.process_time() - t0
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: time the call, write the seconds (or the error) to the pipe
        os.close(r)
        gc.freeze()  # the parent's objects: no collection here walks (and so copies) them
        try:
            t0 = time.process_time()
            fn(*args)
            msg = repr(time.process_time() - t0)
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            msg = "!" + repr(exc)[:2000]
        os.write(w, msg.encode())
        os._exit(0)
    os.close(w)
    deadline = time.monotonic() + limit
    try:
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return math.inf
            time.sleep(0.002)
        msg = os.read(r, 4096).decode()
    finally:
        os.close(r)
    assert msg and not msg.startswith("!"), f"{getattr(fn, '__name__', fn)} raised {msg[1:] or 'nothing (it died)'}"
    return float(msg)
