"""One sandboxed run: the process that runs a job, under its limits, a watchdog and an output cap.

`run_job` runs the child program (`child.py` and its parts) once on a job, in the isolation
`mode` it is given (`isolation.py` chooses it): forked by a `zygote` (`zygote.py`) when it is
given one, else in a sandbox started for the run. It knows nothing of tests or caches
(`run.py`) and chooses nothing: the caller passes the mode, the zygote and the limits.
"""

from __future__ import annotations

import json
import os
import queue
import resource
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from masdsl.sandbox.limits import Limits
from masdsl.sandbox.zygote import Zygote, ZygoteError

# The child program: its parts joined, `child.py` last (its final lines start the program).
CHILD_PARTS = ("child_server.py", "child_judge.py", "child_zygote.py", "child.py")
CHILD_SOURCE = "\n\n".join(Path(__file__).with_name(name).read_text(encoding="utf-8") for name in CHILD_PARTS)


@dataclass(frozen=True)
class Mode:
    """An isolation in use: how the interpreter is started (`isolation.choose_mode`)."""

    name: str  # bwrap | unshare | none
    switch_uid: bool  # run as a uid of its own (only possible as root)
    prefix: tuple[str, ...] = ()  # the command before the interpreter, minus the workdir binds
    python: str = sys.executable  # the interpreter, as the sandbox sees it
    sys_path: tuple[str, ...] = ()  # folders added to the program's `sys.path` (declared packages)
    packages: tuple[str, ...] = ()  # the declared third-party packages it can import
    sealed: bool = False  # reads are confined to what `visible.View` binds (bwrap only)


_UID_LOCK = threading.Lock()
# The watchdog's allowance on top of `timeout_s`: the process's start-up before the first
# result line, then between result lines. A program run whole (`run_python`, which reports
# nothing until it exits) thus gets up to `timeout_s + START_UP_GRACE_S` of wall clock.
START_UP_GRACE_S = 1.0
_UID_SLOTS: dict[int, queue.Queue[int]] = {}  # per process id: its block of 64 uids


def _uid_slots() -> queue.Queue[int]:
    """This process's free uids: a block of 64 derived from the pid, so two masdsl processes
    (or a forked worker) never share a uid, and so never share a process count."""
    pid = os.getpid()
    with _UID_LOCK:
        if pid not in _UID_SLOTS:
            slots: queue.Queue[int] = queue.Queue()
            for slot in range(64):
                slots.put(1_000_000 + (pid % 4_000_000) * 64 + slot)
            _UID_SLOTS[pid] = slots
        return _UID_SLOTS[pid]


def _user_tasks() -> int:
    """Tasks (threads) of this uid, which a non-root RLIMIT_NPROC counts."""
    uid, count = os.getuid(), 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    count += len(os.listdir(f"/proc/{entry.name}/task"))
            except OSError:
                continue
    return count


def _rlimits(limits: Limits, cpu_s: int, nproc: int) -> dict[str, tuple[int, int]]:
    mem = limits.memory_mb * 1024 * 1024
    fsize = limits.max_file_mb * 1024 * 1024
    return {
        "RLIMIT_CPU": (cpu_s, cpu_s + 1),
        "RLIMIT_AS": (mem, mem),
        "RLIMIT_NPROC": (nproc, nproc),
        "RLIMIT_FSIZE": (fsize, fsize),
        "RLIMIT_NOFILE": (limits.max_open_files, limits.max_open_files),
        "RLIMIT_CORE": (0, 0),
    }


def _preexec(rlimits: dict[str, tuple[int, int]]):
    values = [(getattr(resource, name), value) for name, value in rlimits.items()]

    def apply() -> None:
        for which, value in values:
            resource.setrlimit(which, value)

    return apply


def scrubbed_env(workdir: str) -> dict[str, str]:
    """The whole environment of a sandboxed process: nothing inherited, so no secrets."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


def _kill_uid(uid: int) -> None:
    """Kill every process of `uid` (for modes without a pid namespace to tear down)."""
    try:
        subprocess.run(["kill", "-KILL", "-1"], user=uid, group=uid, extra_groups=[], timeout=5,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        pass


_BOOTSTRAP = "import sys; exec(compile(sys.stdin.read(), '<masdsl-sandbox>', 'exec'))"


def command(mode: Mode, workdir: str, bootstrap: bool = False) -> list[str]:
    """The command running the child program in `mode` with `workdir` writable; `bootstrap`: a
    program that reads the child program from stdin instead (how the zygote starts).

    The program travels on the command line (or stdin), never as a file of the project: and `-I -S`
    keep every `site-packages`, `.pth` file and editable-install hook off `sys.path`."""
    interpreter = [mode.python, "-I", "-S", "-c", _BOOTSTRAP if bootstrap else CHILD_SOURCE]
    if mode.name == "bwrap":
        parents = [str(p) for p in reversed(Path(workdir).parents) if str(p) not in ("/", "/tmp")
                   and not Path(p).is_relative_to("/tmp")]  # a TMPDIR elsewhere: folders its uid can enter
        made = [arg for p in parents for arg in ("--perms", "0755", "--dir", p)]
        return [*mode.prefix, *made, "--bind", workdir, workdir, "--chdir", workdir, *interpreter]
    return [*mode.prefix, *interpreter]


def run_job(job: dict[str, Any], stdin: str, limits: Limits, mode: Mode, zygote: Zygote | None = None,
            n_tests: int = 0) -> dict[str, Any]:
    """Run the child program once on `job` in `mode`; returns raw stdout/stderr and what happened.

    Forked by `zygote` when one is given (only for modes where each run has its own uid: sharing
    one, a run could kill the others and the zygote); in a sandbox started for this run when
    none is, or when the zygote died during the run (the run is then repeated once)."""
    slots = _uid_slots()
    uid = slots.get() if mode.switch_uid else None
    try:
        nonce = secrets.token_hex(16)
        job = {**job, "nonce": nonce, "uid": uid, "timeout": limits.timeout_s, "path": list(mode.sys_path)}
        cpu_s = int(limits.timeout_s * (n_tests + 1)) + 1
        nproc = limits.max_procs if uid is not None else _user_tasks() + limits.max_procs
        rlimits = _rlimits(limits, cpu_s, nproc)
        # results travel on their own pipe, bounded by the number of tests, apart from the
        # program's stdout/stderr (which the output cap bounds)
        chan_cap = (n_tests + 2) * (limits.max_output_kb * 1024 + 4096)
        run = _Run(job, limits, nonce.encode(), chan_cap)
        out = None
        if zygote is not None:
            out = _in_workdir(zygote.workdir(uid), stdin, uid, lambda wd: _run_in_zygote(zygote, wd, uid, rlimits, run))
        if out is None:
            out = _in_workdir(tempfile.mkdtemp(prefix="masdsl-sbx-"), stdin, uid,
                              lambda wd: _run_in_process(mode, wd, rlimits, run))
            if mode.name == "bwrap" and 128 < out["rc"] < 128 + 65:  # bwrap: 128 + signal number
                out["rc"] = 128 - out["rc"]
            if uid is not None and mode.name == "none":
                _kill_uid(uid)
        if out["rc"] == -signal.SIGXCPU:  # the CPU-time limit: a timeout too
            out["timed_out"] = True
        return out
    finally:
        if uid is not None:
            slots.put(uid)


@dataclass
class _Run:
    """What one run needs besides its working directory and uid."""

    job: dict[str, Any]
    limits: Limits
    nonce: bytes
    chan_cap: int

    def write_job(self, workdir: str, chan_fd: int) -> None:
        """The job file the child reads (and deletes) first; `chan_fd`: its results channel."""
        Path(workdir, ".job.json").write_text(json.dumps({**self.job, "chan": chan_fd}), encoding="utf-8")


def _in_workdir(workdir: str, stdin: str, uid: int | None, run: Any) -> Any:
    """`run(workdir)` with stdin written into a fresh `workdir`, removed afterwards."""
    try:
        Path(workdir, ".stdin").write_text(stdin, encoding="utf-8")
        if uid is not None:
            os.chown(workdir, uid, uid)
        os.chmod(workdir, 0o700)
        return run(workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


class _Popen:
    """A started process seen through the interface `_collect` needs (poll, kill, wait)."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc

    def poll(self) -> int | None:
        return self.proc.poll()

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def wait(self) -> int:
        return self.proc.wait()


def _run_in_process(mode: Mode, workdir: str, rlimits: dict, run: _Run) -> dict[str, Any]:
    chan_r, chan_w = os.pipe()
    try:
        run.write_job(workdir, chan_w)
        with open(os.path.join(workdir, ".stdin"), "rb") as stdin_fh:
            proc = subprocess.Popen(
                command(mode, workdir), stdin=stdin_fh, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                pass_fds=(chan_w,), cwd=workdir, env=scrubbed_env(workdir), start_new_session=True,
                preexec_fn=_preexec(rlimits),
            )
        os.close(chan_w)
        chan_w = -1
        try:
            return _collect(_Popen(proc), proc.stdout.fileno(), proc.stderr.fileno(), chan_r, run)
        finally:
            proc.stdout.close()
            proc.stderr.close()
    finally:
        os.close(chan_r)
        if chan_w >= 0:
            os.close(chan_w)


def _run_in_zygote(zygote: Zygote, workdir: str, uid: int | None, rlimits: dict, run: _Run) -> dict[str, Any] | None:
    """The run, forked by the zygote; None when the zygote is gone (the caller starts a process)."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    chan_r, chan_w = os.pipe()
    run.write_job(workdir, 3)  # the zygote's child puts the channel on fd 3
    stdin_fd = os.open(os.path.join(workdir, ".stdin"), os.O_RDONLY)
    try:
        try:
            child = zygote.start(workdir, uid, rlimits, (stdin_fd, out_w, err_w, chan_w))
        except ZygoteError:
            return None
        finally:
            for fd in (stdin_fd, out_w, err_w, chan_w):
                os.close(fd)
        out = _collect(child, out_r, err_r, chan_r, run)
        return None if child.lost else out
    finally:
        for fd in (out_r, err_r, chan_r):
            os.close(fd)


def _collect(handle: Any, out_fd: int, err_fd: int, chan_fd: int, run: _Run) -> dict[str, Any]:
    """Read stdout/stderr under the output cap, and the results channel, under a watchdog that
    every result line resets."""
    limits, nonce = run.limits, run.nonce
    start = time.monotonic()
    deadline = start + limits.timeout_s + START_UP_GRACE_S
    cap = limits.max_output_kb * 1024
    chunks: dict[int, list[bytes]] = {1: [], 2: []}
    total, chan_total, timed_out, truncated, pending = 0, 0, False, False, b""
    events: list[dict] = []
    sel = selectors.DefaultSelector()
    for fd, key in ((out_fd, 1), (err_fd, 2), (chan_fd, 3)):
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ, key)
    exited_at = None
    while sel.get_map() and not truncated:
        now = time.monotonic()
        if now > deadline:
            timed_out = True
            break
        if exited_at is None and handle.poll() is not None:
            exited_at = now
        if exited_at is not None and now - exited_at > 0.5:  # a leftover child holds a pipe
            break
        for key, _ in sel.select(timeout=min(0.05, max(0.0, deadline - now))):
            data = os.read(key.fd, 65536)
            if not data:
                sel.unregister(key.fd)
            elif key.data == 3:
                chan_total += len(data)
                pending += data
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.startswith(nonce + b" "):
                        events.append(json.loads(line[len(nonce) + 1:]))
                        deadline = time.monotonic() + limits.timeout_s + START_UP_GRACE_S
                truncated = chan_total > run.chan_cap
            else:
                total += len(data)
                chunks[key.data].append(data)
                truncated = total > cap
            if truncated:
                break
    sel.close()
    handle.kill()
    rc = handle.wait()
    stdout = b"".join(chunks[1])
    stderr = b"".join(chunks[2])
    return {"rc": rc, "stdout": stdout[:cap], "stderr": stderr, "timed_out": timed_out,
            "truncated": truncated, "events": events, "wall_s": time.monotonic() - start}


def is_memory_error(stderr: str) -> bool:
    return "MemoryError" in stderr or "Cannot allocate memory" in stderr


__all__ = ["CHILD_PARTS", "CHILD_SOURCE", "Mode", "command", "is_memory_error", "run_job", "scrubbed_env"]
