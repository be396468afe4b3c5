"""How a sandboxed run happens: the isolation in use, the limits, and the process that runs.

`masdsl.envs.sandbox` is the public face (limits, results, tests, cache, pool); this module
chooses the isolation once per process (`mode`), and runs one job (`run_job`): forked by the
zygote (`sandbox_zygote.py`) when there is one, else in a sandbox started for the run, under a
watchdog and an output cap. The program that runs inside is `sandbox_child.py`.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import resource
import secrets
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from masdsl.envs.sandbox import Limits

Isolation = Literal["auto", "bwrap", "unshare", "none"]


# ---------------------------------------------------------------- isolation choice


@dataclass(frozen=True)
class _Mode:
    name: str  # bwrap | unshare | none
    switch_uid: bool  # run as a uid of its own (only possible as root)
    prefix: tuple[str, ...] = ()  # the command before the interpreter, minus the workdir binds
    hidden: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (tmpfs dir, paths bound back)


_MODES: dict[str, _Mode] = {}
_MODE_LOCK = threading.Lock()
_CHILD_SOURCE = (Path(__file__).with_name("sandbox_child.py")).read_text(encoding="utf-8")
_UID_LOCK = threading.Lock()
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


def _needed_paths() -> list[str]:
    """Directories the interpreter needs: its prefix, its base prefix, and the binary's folder."""
    paths = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix)}
    paths.add(os.path.dirname(os.path.realpath(sys.executable)))
    return sorted(p for p in paths if not any(p != q and Path(p).is_relative_to(q) for q in paths))


def _blocked_by(path: str) -> str | None:
    """The highest ancestor of `path` that other users cannot enter, if any."""
    parts = Path(path).parts
    for depth in range(2, len(parts) + 1):
        ancestor = str(Path(*parts[:depth]))
        try:
            mode = os.stat(ancestor).st_mode
        except OSError:
            return None
        if not mode & stat.S_IXOTH:
            return ancestor
    return None


def _hidden_dirs() -> tuple[tuple[str, tuple[str, ...]], ...]:
    hidden: dict[str, list[str]] = {}
    for path in _needed_paths():
        blocker = _blocked_by(path)
        if blocker is not None:
            hidden.setdefault(blocker, []).append(path)
    return tuple((k, tuple(v)) for k, v in sorted(hidden.items()))


def _bwrap_mode(as_root: bool, own_uid: bool) -> _Mode:
    """bubblewrap. As root with `own_uid`: root sets up the namespaces itself (CAP_SYS_ADMIN) and
    the code runs as a uid of its own. Otherwise in a user namespace: as the caller's uid, or, for
    a root without CAP_SYS_ADMIN (a default container), as a root whose capabilities are dropped
    (then the process limit is not enforced: the kernel exempts root from it)."""
    prefix = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    # A virtualenv under /tmp (a CI checkout there) would vanish under the private /tmp.
    for path in _needed_paths():
        if Path(path).is_relative_to("/tmp"):
            for parent in reversed(Path(path).relative_to("/tmp").parents[:-1]):
                prefix += ["--perms", "0755", "--dir", str(Path("/tmp", parent))]
            prefix += ["--ro-bind", path, path]
    hidden = _hidden_dirs() if as_root else ()
    if as_root and not own_uid:  # the code reads files as root here: hide the usual secrets
        prefix += [arg for f in ("/etc/shadow", "/etc/gshadow") if os.path.exists(f) for arg in ("--ro-bind", "/dev/null", f)]
    for blocker, paths in hidden:
        prefix += ["--perms", "0755", "--tmpfs", blocker]
        for path in paths:  # parents bwrap would create as 0700, so the uid could not enter
            parents = Path(path).relative_to(blocker).parents
            for parent in sorted(str(Path(blocker, p)) for p in parents if str(p) != "."):
                prefix += ["--perms", "0755", "--dir", parent]
            prefix += ["--ro-bind", path, path]
    if as_root and own_uid:
        prefix += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    else:
        prefix += ["--unshare-all"] + (["--cap-drop", "ALL"] if as_root else [])
    prefix += ["--die-with-parent", "--new-session"]
    return _Mode("bwrap", as_root and own_uid, tuple(prefix), hidden)


def _candidate_modes(isolation: Isolation) -> list[_Mode]:
    """The modes to try for `isolation`, best first (the first that runs a probe is used)."""
    as_root = os.geteuid() == 0
    reachable = as_root and not _hidden_dirs()
    unshare = ("unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "--net", "--ipc", "--uts")
    userns = unshare[:1] + ("--map-root-user",) + unshare[1:]
    has_bwrap, has_unshare = shutil.which("bwrap"), shutil.which("unshare")
    modes = {
        "bwrap": ([_bwrap_mode(True, True), _bwrap_mode(True, False)] if as_root else [_bwrap_mode(False, False)])
        if has_bwrap else [],
        "unshare": ([_Mode("unshare", reachable, unshare)] if as_root else []) + [_Mode("unshare", False, userns)]
        if has_unshare else [],
        "none": [_Mode("none", reachable)],
    }
    if isolation == "auto":
        return modes["bwrap"] + modes["unshare"] + modes["none"]
    return modes[isolation]


def choose_mode(isolation: Isolation) -> _Mode:
    """The isolation in use for `isolation`, probed once (a tiny program must run and see no net)."""
    with _MODE_LOCK:
        if isolation in _MODES:
            return _MODES[isolation]
        from masdsl.envs.sandbox import Limits

        for candidate in _candidate_modes(isolation):
            _MODES[isolation] = candidate
            probe = run_job({"mode": "run", "code": "print('ok')"}, "", Limits(), candidate)
            if probe["rc"] == 0 and probe["stdout"] == b"ok\n":
                return candidate
            del _MODES[isolation]
        from masdsl.errors import UserError

        raise UserError(f"the sandbox cannot run Python with isolation {isolation!r} on this machine")


# ---------------------------------------------------------------- one process


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


def _scrubbed_env(workdir: str) -> dict[str, str]:
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


def _command(mode: _Mode, workdir: str, bootstrap: bool = False) -> list[str]:
    interpreter = [sys.executable, "-I", "-c", _BOOTSTRAP if bootstrap else _CHILD_SOURCE]
    if mode.name == "bwrap":
        return [*mode.prefix, "--bind", workdir, workdir, "--chdir", workdir, *interpreter]
    return [*mode.prefix, *interpreter]


ZYGOTES: dict[tuple[int, str], Any] = {}  # (pid, mode) -> Zygote, or None where it cannot start
_ZYGOTE_LOCK = threading.RLock()


def zygote_enabled() -> bool:
    """Runs fork from one long-lived sandboxed process unless MASDSL_SANDBOX_ZYGOTE=0."""
    return os.environ.get("MASDSL_SANDBOX_ZYGOTE", "1") != "0"


def zygote_for(mode: _Mode):
    """This process's zygote for `mode` (restarted if it died), or None."""
    from masdsl.envs import sandbox_zygote

    key = (os.getpid(), mode.name)
    with _ZYGOTE_LOCK:
        current = ZYGOTES.get(key, False)
        if current is None:
            return None
        if current is False or not current.alive:
            if current:
                current.close()
            made = sandbox_zygote.make(lambda root: _command(mode, root, bootstrap=True), _scrubbed_env("/tmp"),
                                       _CHILD_SOURCE)
            ZYGOTES[key] = made
            if made is not None and not ZYGOTES_CLOSER:
                ZYGOTES_CLOSER.append(atexit.register(_close_zygotes))
            if made is not None:  # it must run a program before it is trusted with runs
                from masdsl.envs.sandbox import Limits

                probe = run_job({"mode": "run", "code": "print('ok')"}, "", Limits(isolation=mode.name))
                if probe["rc"] != 0 or probe["stdout"] != b"ok\n":
                    made.close()
                    ZYGOTES[key] = made = None
            return made
        return current


ZYGOTES_CLOSER: list[Any] = []


def _close_zygotes() -> None:
    for key, zygote in list(ZYGOTES.items()):
        if zygote and key[0] == os.getpid():
            zygote.close()
        ZYGOTES.pop(key, None)


def run_job(job: dict[str, Any], stdin: str, limits: Limits, mode: _Mode | None = None,
             n_tests: int = 0) -> dict[str, Any]:
    """Run the child program once on `job`; returns raw stdout/stderr and what happened.

    Forked by the zygote when there is one; in a sandbox started for this run when there is
    none, or when the zygote died during the run (the run is then repeated once)."""
    probe = mode is not None
    mode = mode or choose_mode(limits.isolation)
    # a zygote serves only modes where each run has its own uid: sharing one, a run could kill
    # the others (and the zygote); elsewhere every run gets a sandbox of its own
    zygote = None if probe or not mode.switch_uid or not zygote_enabled() else zygote_for(mode)
    slots = _uid_slots()
    uid = slots.get() if mode.switch_uid else None
    try:
        nonce = secrets.token_hex(16)
        job = {**job, "nonce": nonce, "uid": uid, "timeout": limits.timeout_s}
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
    limits: Any
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


def _run_in_process(mode: _Mode, workdir: str, rlimits: dict, run: _Run) -> dict[str, Any]:
    chan_r, chan_w = os.pipe()
    try:
        run.write_job(workdir, chan_w)
        with open(os.path.join(workdir, ".stdin"), "rb") as stdin_fh:
            proc = subprocess.Popen(
                _command(mode, workdir), stdin=stdin_fh, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                pass_fds=(chan_w,), cwd=workdir, env=_scrubbed_env(workdir), start_new_session=True,
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


def _run_in_zygote(zygote, workdir: str, uid: int | None, rlimits: dict, run: _Run) -> dict[str, Any] | None:
    """The run, forked by the zygote; None when the zygote is gone (the caller starts a process)."""
    from masdsl.envs.sandbox_zygote import ZygoteError

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
    deadline = start + limits.timeout_s + 1.0  # the first deadline includes start-up
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
                        deadline = time.monotonic() + limits.timeout_s + 1.0
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
