"""Ctrl-C that no library on the way can swallow.

A SIGINT raises `KeyboardInterrupt` wherever the main thread is. Inside a library call that
catches broad errors and retries, it can be lost: MLflow's sqlite store retries a metrics write
that an interrupt broke, and the run went on training as if no key had been pressed (seen in
`make test` under load). So while `interruptible()` is active, the handler also records the
interrupt, and `check()` raises it again at the trainer's safe points (each step and evaluation),
where the trainer's own `except KeyboardInterrupt` closes the engines and marks the run KILLED.
The handler is installed even where SIGINT was ignored when the process started (a shell does that
for `cmd &`, pytest-xdist for its workers, and Python then keeps it ignored): `kill -INT` stops a
background run the same way, with the resume command.
A Ctrl-C that lands in a finalizer (a weakref callback, a `__del__`) cannot propagate: Python
prints "Exception ignored ... KeyboardInterrupt" with a traceback and goes on. The interrupt is
recorded all the same and `check()` raises it, so that report is noise that reads like a crash:
while the block runs, such reports of `KeyboardInterrupt` are dropped (all others still print).

>>> with interruptible():
...     check()            # nothing pressed: returns
>>> _PENDING.set()
>>> try:
...     check()
... except KeyboardInterrupt:
...     print("raised again")
raised again
>>> _PENDING.clear()
"""

from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager
from typing import Any, Iterator

_PENDING = threading.Event()


_DEFERRING = [0]  # how many `deferred()` blocks the main thread is in (the handler runs there)


def _on_sigint(signum: int, frame: Any) -> None:
    _PENDING.set()
    if not _DEFERRING[0]:
        raise KeyboardInterrupt


@contextmanager
def interruptible() -> Iterator[None]:
    """Record every Ctrl-C while the block runs (only the main thread can install a handler)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _PENDING.clear()
    previous = signal.signal(signal.SIGINT, _on_sigint)
    previous_hook = sys.unraisablehook

    def quiet_interrupts(unraisable: sys.UnraisableHookArgs) -> None:
        if not isinstance(unraisable.exc_value, KeyboardInterrupt):
            previous_hook(unraisable)

    sys.unraisablehook = quiet_interrupts
    try:
        yield
    finally:
        sys.unraisablehook = previous_hook
        signal.signal(signal.SIGINT, previous)


@contextmanager
def deferred() -> Iterator[None]:
    """Hold a Ctrl-C that lands in the block until the block ends, then raise it: for calls that
    must not be cut in the middle (inside `interruptible()`; elsewhere Python's own handler raises
    at once). Made for the tracking calls: under load a run interrupted during one found MLflow's
    SQLite store locked when it marked itself KILLED, most likely by the write the interrupt cut.

    >>> import os
    >>> with interruptible():
    ...     try:
    ...         with deferred():
    ...             os.kill(os.getpid(), signal.SIGINT)
    ...             print("the block ran to its end")
    ...     except KeyboardInterrupt:
    ...         print("raised after it")
    the block ran to its end
    raised after it
    >>> _PENDING.clear()
    """
    before = _PENDING.is_set()  # an interrupt recorded before the block is not this block's to raise
    _DEFERRING[0] += 1
    try:
        yield
    finally:
        _DEFERRING[0] -= 1
    if not _DEFERRING[0] and not before:
        check()


def check() -> None:
    """Raise `KeyboardInterrupt` if a Ctrl-C came and something on the way swallowed it."""
    if _PENDING.is_set():
        raise KeyboardInterrupt
