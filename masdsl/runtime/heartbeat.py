"""Lines a log file can bear while something slow runs: one when it begins, one every
`HEARTBEAT_S` (30 s) while it lasts, one when it is done. Under `nohup`, in a cluster job or
in any redirect to a file, these are all a person sees of a start-up that takes minutes
(vLLM on CPU: 1-5 min before the first rollout).

`starting(what)` is what the runtime says while an inference engine starts:

    masdsl: engine vllm for /models/x: starting (vllm 0.32.0 (cpu))
    masdsl: engine vllm for /models/x: still starting (30 s)
    masdsl: engine vllm for /models/x: ready in 52.1 s

`Heartbeat(say, message)` is the thread behind it; the training progress in a log file
(`masdsl.training.display.Progress`) uses it too: it calls `say(message())` whenever `every`
seconds passed without a line (`spoke()` restarts that clock).

`say` prints `masdsl: ...` on stderr, flushed, unless `masdsl -q` made it quiet (`set_quiet`,
called by `masdsl.commands.output.configure`).

>>> lines = []
>>> with starting("engine demo", "cpu", say=lines.append):
...     pass
>>> lines[0], lines[1].startswith("engine demo: ready in ")
('engine demo: starting (cpu)', True)
"""

from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator

HEARTBEAT_S = 30.0  # at most this long without a line while something slow runs
_QUIET = {"on": False}


def set_quiet(on: bool) -> None:
    """`masdsl -q`: `say` prints nothing (warnings go through `warn`)."""
    _QUIET["on"] = bool(on)


def say(message: str) -> None:
    """`masdsl: <message>` on stderr, flushed at once (a log file shows it while the run goes on)."""
    if not _QUIET["on"]:
        print(f"masdsl: {message}", file=sys.stderr, flush=True)


def warn(message: str) -> None:
    """Like `say`, but also under `-q` (something went other than asked)."""
    print(f"masdsl: {message}", file=sys.stderr, flush=True)


class Heartbeat:
    """A daemon thread that calls `say(message())` after every `every` seconds without a line.

    `spoke()` tells it a line was just written by someone else (the clock restarts); a `message()`
    of "" or None says nothing this time. Used as a context manager: the thread runs inside.
    """

    def __init__(self, say: Callable[[str], None], message: Callable[[], str | None],
                 every: float = HEARTBEAT_S) -> None:
        self.say, self.message, self.every = say, message, float(every)
        self._last = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="masdsl-heartbeat", daemon=True)

    def spoke(self) -> None:
        self._last = time.monotonic()

    def __enter__(self) -> "Heartbeat":
        self.spoke()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        tick = min(1.0, self.every / 4)  # how late a heartbeat may come, at most
        while not self._stop.wait(tick):
            if time.monotonic() - self._last < self.every:
                continue
            text = self.message()
            self.spoke()
            if text:
                self.say(text)


@contextmanager
def starting(what: str, detail: str = "", *, say: Callable[[str], None] = say,
             every: float = HEARTBEAT_S) -> Iterator[None]:
    """`<what>: starting` now, `<what>: still starting (N s)` every `every` seconds while the
    block runs, `<what>: ready in T s` when it ends (nothing more when it raises: the error says it)."""
    t0 = time.monotonic()
    say(f"{what}: starting" + (f" ({detail})" if detail else ""))
    with Heartbeat(say, lambda: f"{what}: still starting ({time.monotonic() - t0:.0f} s)", every):
        yield
    say(f"{what}: ready in {time.monotonic() - t0:.1f} s")
