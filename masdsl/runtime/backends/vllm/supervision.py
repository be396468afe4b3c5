"""Supervising vLLM's engine processes: no orphans when the owner dies, no hang when they die.

vLLM's engine core and workers are separate processes (started with multiprocessing spawn
while `vllm.LLM` is built).

- `reap_when_parent_dies`: when the process that started them is killed (SIGKILL, the OOM
  killer), they would be left running, holding the model and a share of the CPUs, and a
  `--resume`d run would start a second set beside them. A small watchdog process notices its
  parent is gone (it is re-parented) and SIGKILLs them; `VLLMEngine.close()` stops it first.
- `shared_segments`, `unlink_segments`: vLLM's engine core creates its executor's broadcast
  queue as a POSIX shared-memory segment and leaves it behind when the core is stopped, so the
  owner ended (after Ctrl-C too) with `resource_tracker: There appear to be 1 leaked
  shared_memory objects`. The engine notes the segments its processes map once they are up and
  removes those still there after it closed them.
- `raise_if_engine_dies`: vLLM 0.32's synchronous client notices a dead engine core (its
  monitor thread sets `engine_dead`) but never wakes the caller blocked on its output queue, so
  `generate` would wait forever. The context manager turns that into `StepFailed`.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from multiprocessing import shared_memory
from typing import Any, Iterable, Iterator

from masdsl.errors import StepFailed

SHM_PREFIX = "/dev/shm/psm_"  # where Python's SharedMemory puts its segments (Linux)


def child_pids() -> set[int]:
    """Pids of every live descendant of this process."""
    import psutil  # optional: psutil comes with the train extra, which vLLM engines need anyway

    return {c.pid for c in psutil.Process().children(recursive=True)}


_REAPER = """
import os, signal, sys, time
parent, pids = int(sys.argv[1]), [int(p) for p in sys.argv[2:]]
while os.getppid() == parent:
    time.sleep(1)
for pid in pids:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if not f.read().startswith(b"VLLM"):
                continue  # exited and its pid reused: not ours to kill
        os.kill(pid, signal.SIGKILL)
    except (OSError, ProcessLookupError):
        pass
"""


def reap_when_parent_dies(pids: list[int]) -> subprocess.Popen | None:
    """A watchdog that SIGKILLs vLLM's engine processes `pids` once this process is gone.

    None when there is nothing to watch, or no /proc to check a pid's command line in.
    """
    if not pids or not os.path.isdir("/proc"):  # the reaper checks /proc/PID/cmdline
        return None
    return subprocess.Popen([sys.executable, "-c", _REAPER, str(os.getpid()), *map(str, pids)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def shared_segments(pids: Iterable[int]) -> set[str]:
    """Names of the live POSIX shared-memory segments of Python's `SharedMemory` (`/dev/shm/psm_*`)
    that the processes `pids` map (read from /proc/PID/maps; none where there is no /proc)."""
    names: set[str] = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
                for line in f:
                    path = line.rstrip("\n").split(maxsplit=5)[5:]
                    if path and path[0].startswith(SHM_PREFIX) and not path[0].endswith("(deleted)"):
                        names.add(path[0][len("/dev/shm/"):])
        except OSError:  # exited meanwhile, or no /proc
            continue
    return names


def unlink_segments(names: Iterable[str]) -> None:
    """Remove the segments `names` that still exist (and tell this process's resource tracker,
    which would otherwise warn of them at exit). Call it once their processes are stopped."""
    for name in names:
        try:
            segment = shared_memory.SharedMemory(name=name)
        except OSError:  # already removed by its creator
            continue
        segment.close()
        segment.unlink()


def stop_reaper(reaper: subprocess.Popen | None) -> None:
    """Stop a watchdog of `reap_when_parent_dies` (the engine closed its processes itself)."""
    if reaper is not None:
        reaper.kill()
        reaper.wait()


@contextlib.contextmanager
def raise_if_engine_dies(llm: Any) -> Iterator[None]:
    """Turn a vLLM engine process that dies during the block into `StepFailed`, not a hang.

    With the engine core in a process of its own, a watcher thread checks the client's
    `engine_dead` flag and, once set, puts vLLM's own `EngineDeadError` on the output queue, which
    `generate` then raises. With the core in this process (`runtime.vllm_reproducible`) its
    executor watches its worker processes itself and cancels the step when one dies
    (`RuntimeError('cancelled')`); its `is_failed` flag tells that error from others.
    """
    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    executor = getattr(getattr(core, "engine_core", None), "model_executor", None)
    if executor is not None and hasattr(executor, "is_failed"):  # the core in this process
        try:
            yield
        except Exception as exc:  # noqa: BLE001 - only a dead worker becomes StepFailed
            if not executor.is_failed:
                raise
            raise StepFailed(f"the vLLM engine process died during generate ({type(exc).__name__}: its worker); "
                             "it may have run out of memory", error=repr(exc)) from None
        return
    flagged = getattr(getattr(core, "resources", None), "engine_dead", None)
    if core is None or flagged is None or not hasattr(core, "outputs_queue"):
        yield  # another vLLM layout: nothing to watch
        return
    done = threading.Event()
    watcher = threading.Thread(target=_watch, args=(core, done), name="masdsl-vllm-liveness", daemon=True)
    watcher.start()
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - only a dead engine becomes StepFailed
        if not core.resources.engine_dead:
            raise
        raise StepFailed(f"the vLLM engine process died during generate ({type(exc).__name__}); "
                         "it may have run out of memory", error=repr(exc)) from None
    finally:
        done.set()
        watcher.join()


def _watch(core: Any, done: threading.Event) -> None:
    while not done.wait(0.5):
        if core.resources.engine_dead:
            from vllm.v1.engine.exceptions import EngineDeadError  # heavy: vllm is optional

            core.outputs_queue.put_nowait(EngineDeadError())
            return
