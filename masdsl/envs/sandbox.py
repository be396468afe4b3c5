"""The only place generated code runs: a separate, limited, isolated process per run.

Every run gets a fresh empty working directory (removed afterwards), a scrubbed environment
(no inherited variables, so no secrets), resource limits set with `setrlimit` before `exec`
(CPU time, address space, processes, file size, open files), a wall-clock watchdog that kills
the whole process group, and an output cap (at most `max_output_kb` is read, then the run is
killed). On top of that, the best isolation the machine allows is chosen once per process:

- `bwrap`: bubblewrap with new pid, network, ipc and uts namespaces, a read-only `/`, a private
  `/tmp`, and only the working directory writable. When masdsl runs as root, the code runs under
  a uid of its own (so the process limit counts only its processes: root ignores RLIMIT_NPROC),
  and directories it could not enter as that uid (e.g. `/root` holding the interpreter) are
  replaced by empty tmpfs with just the interpreter bound back in, which also hides their files.
- `unshare`: util-linux `unshare` with new pid and network namespaces.
- `none`: limits and the uid switch only (reported loudly: the network is reachable).

`isolation_summary()` says which is active; the runtime prints it once per run.

Starting bubblewrap and an interpreter per run costs more than the run itself, so by default one
long-lived *zygote* (see `sandbox_zygote.py`) is started inside the isolation and forks a child
per run; the child gets its own working directory, uid, session and limits before any code runs,
and a kill takes its process group and every process of its uid. `MASDSL_SANDBOX_ZYGOTE=0` starts
a fresh sandboxed interpreter per run instead (limits then set with `setrlimit` in `preexec_fn`).

Tests run many per process (see `sandbox_child.py`): assert tests in the namespace of the code,
stdin/stdout tests each with a fresh `__main__`; each test has its own timer, and a test that
kills its process is marked failed and the rest resume in a new process.

>>> r = run_python("print(sum(range(10)))")
>>> (r.ok, r.stdout)
(True, '45\\n')
>>> report = run_tests("def f(x):\\n    return x + 1", ["assert f(1) == 2", "assert f(1) == 3"])
>>> (report.passed, report.pass_rate)
([True, False], 0.5)
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
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Literal, Sequence

Isolation = Literal["auto", "bwrap", "unshare", "none"]


@dataclass(frozen=True)
class Limits:
    """Resource limits of one sandboxed run.

    `timeout_s` is the wall-clock limit of a `run_python` call and of *each* test in
    `run_tests`; CPU time is limited to the same budget (rounded up, plus one second).
    """

    timeout_s: float = 5.0
    memory_mb: int = 1024  # address space (RLIMIT_AS) of every process
    max_procs: int = 16  # processes/threads the code may have at once (RLIMIT_NPROC)
    max_file_mb: int = 16  # largest file it may write (RLIMIT_FSIZE)
    max_output_kb: int = 256  # stdout + stderr read before the run is killed
    max_open_files: int = 64  # RLIMIT_NOFILE
    isolation: Isolation = "auto"

    def __post_init__(self) -> None:
        from masdsl.errors import UserError

        if self.timeout_s <= 0 or self.memory_mb < 64 or self.max_procs < 1:
            raise UserError(f"sandbox limits out of range: {self}")
        if self.isolation not in ("auto", "bwrap", "unshare", "none"):
            raise UserError(f"unknown sandbox isolation {self.isolation!r}: use auto, bwrap, unshare or none")


DEFAULT_LIMITS = Limits()


def limits_from_config(cfg: Any) -> Limits:
    """`Limits` from a config's `sandbox` block (a dataclass, a mapping or an OmegaConf node).

    >>> limits_from_config({"timeout_s": 2, "max_procs": 8}).max_procs
    8
    """
    if cfg is None:
        return DEFAULT_LIMITS
    if isinstance(cfg, Limits):
        return cfg
    get = cfg.get if hasattr(cfg, "get") else (lambda k, d=None: getattr(cfg, k, d))
    names = ("timeout_s", "memory_mb", "max_procs", "max_file_mb", "max_output_kb", "max_open_files", "isolation")
    values = {k: get(k, None) for k in names}
    return Limits(**{k: (type(getattr(DEFAULT_LIMITS, k))(v) if k != "isolation" else str(v))
                     for k, v in values.items() if v is not None})


def set_default_limits(limits: Limits) -> None:
    """Make `limits` the default of every later run that is not given its own (the runtime
    calls this once with the run's `sandbox` config, so `pass_rate` etc. obey it)."""
    global DEFAULT_LIMITS
    DEFAULT_LIMITS = limits


@dataclass(frozen=True)
class SandboxResult:
    """The outcome of `run_python`. `ok`: exit status 0, within every limit."""

    stdout: str
    stderr: str
    returncode: int
    timed_out: bool
    memory_error: bool
    wall_s: float
    output_truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not (self.timed_out or self.memory_error or self.output_truncated)


@dataclass(frozen=True)
class TestResult:
    """One test: `status` is pass, fail (wrong answer/assert), error, timeout, memory or crash."""

    __test__ = False  # not a pytest test class

    passed: bool
    status: str
    error: str = ""
    output: str | None = None  # what the program printed (stdin/stdout tests)


@dataclass(frozen=True)
class TestReport:
    """All tests of one `run_tests` call, in order; `setup_error` when the code itself failed."""

    __test__ = False

    results: list[TestResult]
    setup_error: str = ""
    stderr_tail: str = ""
    wall_s: float = 0.0

    @property
    def passed(self) -> list[bool]:
        return [r.passed for r in self.results]

    @property
    def pass_rate(self) -> float:
        return sum(self.passed) / len(self.results) if self.results else 0.0

    @property
    def timed_out(self) -> bool:
        return any(r.status == "timeout" for r in self.results)

    @property
    def memory_error(self) -> bool:
        return any(r.status == "memory" for r in self.results)


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


def _bwrap_mode(as_root: bool) -> _Mode:
    prefix = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    hidden = _hidden_dirs() if as_root else ()
    for blocker, paths in hidden:
        prefix += ["--perms", "0755", "--tmpfs", blocker]
        for path in paths:  # parents bwrap would create as 0700, so the uid could not enter
            parents = Path(path).relative_to(blocker).parents
            for parent in sorted(str(Path(blocker, p)) for p in parents if str(p) != "."):
                prefix += ["--perms", "0755", "--dir", parent]
            prefix += ["--ro-bind", path, path]
    if as_root:  # real root sets up namespaces itself; the code then runs as its own uid
        prefix += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    else:
        prefix += ["--unshare-all"]
    prefix += ["--die-with-parent", "--new-session"]
    return _Mode("bwrap", as_root, tuple(prefix), hidden)


def _candidate_modes(isolation: Isolation) -> list[_Mode]:
    as_root = os.geteuid() == 0
    reachable = as_root and not _hidden_dirs()
    unshare = ("unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "--net", "--ipc", "--uts")
    if not as_root:
        unshare = unshare[:1] + ("--map-root-user",) + unshare[1:]
    modes = {
        "bwrap": [_bwrap_mode(as_root)] if shutil.which("bwrap") else [],
        "unshare": [_Mode("unshare", reachable, unshare)] if shutil.which("unshare") else [],
        "none": [_Mode("none", reachable)],
    }
    if isolation == "auto":
        return modes["bwrap"] + modes["unshare"] + modes["none"]
    return modes[isolation]


def _mode(isolation: Isolation) -> _Mode:
    """The isolation in use for `isolation`, probed once (a tiny program must run and see no net)."""
    with _MODE_LOCK:
        if isolation in _MODES:
            return _MODES[isolation]
        for candidate in _candidate_modes(isolation):
            _MODES[isolation] = candidate
            probe = _run_job({"mode": "run", "code": "print('ok')"}, "", Limits(), candidate)
            if probe["rc"] == 0 and probe["stdout"] == b"ok\n":
                return candidate
            del _MODES[isolation]
        from masdsl.errors import UserError

        raise UserError(f"the sandbox cannot run Python with isolation {isolation!r} on this machine")


def isolation_summary(limits: Limits | None = None) -> str:
    """One line saying exactly what isolation and limits are active.

    >>> "limits: wall" in isolation_summary()
    True
    """
    limits = limits or DEFAULT_LIMITS
    mode = _mode(limits.isolation)
    if mode.name == "bwrap":
        parts = ["bubblewrap: new pid/net/ipc/uts namespaces, read-only /, private /tmp, only the workdir writable"]
        if mode.hidden:
            parts.append("hidden: " + ", ".join(h for h, _ in mode.hidden))
    elif mode.name == "unshare":
        parts = ["unshare: new pid/net namespaces; the file system is NOT read-only"]
    else:
        parts = ["no namespaces: the network is NOT isolated and the file system is NOT read-only"]
    if zygote_enabled() and _zygote(mode) is not None:
        parts.append("each run forked by one long-lived sandboxed zygote (MASDSL_SANDBOX_ZYGOTE=0: a new sandbox per run)")
    if mode.switch_uid:
        parts.append("each run as its own uid")
    elif os.geteuid() == 0:
        parts.append("runs as root: the process limit is NOT enforced")
    parts.append(
        f"limits: wall {limits.timeout_s:g}s per run/test, cpu, address space {limits.memory_mb} MB, "
        f"{limits.max_procs} processes, files {limits.max_file_mb} MB, output {limits.max_output_kb} KB, "
        f"{limits.max_open_files} open files; scrubbed env; fresh workdir"
    )
    return "sandbox: " + "; ".join(parts)


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


_ZYGOTES: dict[tuple[int, str], Any] = {}  # (pid, mode) -> Zygote, or None where it cannot start
_ZYGOTE_LOCK = threading.RLock()


def zygote_enabled() -> bool:
    """Runs fork from one long-lived sandboxed process unless MASDSL_SANDBOX_ZYGOTE=0."""
    return os.environ.get("MASDSL_SANDBOX_ZYGOTE", "1") != "0"


def _zygote(mode: _Mode):
    """This process's zygote for `mode` (restarted if it died), or None."""
    from masdsl.envs import sandbox_zygote

    key = (os.getpid(), mode.name)
    with _ZYGOTE_LOCK:
        current = _ZYGOTES.get(key, False)
        if current is None:
            return None
        if current is False or not current.alive:
            if current:
                current.close()
            made = sandbox_zygote.make(lambda root: _command(mode, root, bootstrap=True), _scrubbed_env("/tmp"),
                                       _CHILD_SOURCE)
            _ZYGOTES[key] = made
            if made is not None and not _ZYGOTES_CLOSER:
                _ZYGOTES_CLOSER.append(atexit.register(_close_zygotes))
            if made is not None:  # it must run a program before it is trusted with runs
                probe = _run_job({"mode": "run", "code": "print('ok')"}, "", Limits(isolation=mode.name))
                if probe["rc"] != 0 or probe["stdout"] != b"ok\n":
                    made.close()
                    _ZYGOTES[key] = made = None
            return made
        return current


_ZYGOTES_CLOSER: list[Any] = []


def _close_zygotes() -> None:
    for key, zygote in list(_ZYGOTES.items()):
        if zygote and key[0] == os.getpid():
            zygote.close()
        _ZYGOTES.pop(key, None)


def _run_job(job: dict[str, Any], stdin: str, limits: Limits, mode: _Mode | None = None,
             n_tests: int = 0) -> dict[str, Any]:
    """Run the child program once on `job`; returns raw stdout/stderr and what happened.

    Forked by the zygote when there is one; in a sandbox started for this run when there is
    none, or when the zygote died during the run (the run is then repeated once)."""
    probe = mode is not None
    mode = mode or _mode(limits.isolation)
    zygote = None if probe or not zygote_enabled() else _zygote(mode)
    slots = _uid_slots()
    uid = slots.get() if mode.switch_uid else None
    try:
        nonce = secrets.token_hex(16)
        job = {**job, "nonce": nonce, "uid": uid, "timeout": limits.timeout_s}
        cpu_s = int(limits.timeout_s * (n_tests + 1)) + 1
        nproc = limits.max_procs if uid is not None else _user_tasks() + limits.max_procs
        rlimits = _rlimits(limits, cpu_s, nproc)
        out = None
        if zygote is not None:
            out = _in_workdir(zygote.workdir(uid), job, stdin, uid,
                              lambda wd: _run_in_zygote(zygote, wd, uid, rlimits, limits, nonce))
        if out is None:
            out = _in_workdir(tempfile.mkdtemp(prefix="masdsl-sbx-"), job, stdin, uid,
                              lambda wd: _run_in_process(mode, wd, rlimits, limits, nonce))
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


def _in_workdir(workdir: str, job: dict[str, Any], stdin: str, uid: int | None, run: Any) -> Any:
    """`run(workdir)` with the job and stdin written into a fresh `workdir`, removed afterwards."""
    try:
        Path(workdir, ".job.json").write_text(json.dumps(job), encoding="utf-8")
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


def _run_in_process(mode: _Mode, workdir: str, rlimits: dict, limits: Limits, nonce: str) -> dict[str, Any]:
    with open(os.path.join(workdir, ".stdin"), "rb") as stdin_fh:
        proc = subprocess.Popen(
            _command(mode, workdir), stdin=stdin_fh, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            cwd=workdir, env=_scrubbed_env(workdir), start_new_session=True, preexec_fn=_preexec(rlimits),
        )
    try:
        return _collect(_Popen(proc), proc.stdout.fileno(), proc.stderr.fileno(), limits, nonce.encode())
    finally:
        proc.stdout.close()
        proc.stderr.close()


def _run_in_zygote(zygote, workdir: str, uid: int | None, rlimits: dict, limits: Limits,
                   nonce: str) -> dict[str, Any] | None:
    """The run, forked by the zygote; None when the zygote is gone (the caller starts a process)."""
    from masdsl.envs.sandbox_zygote import ZygoteError

    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    stdin_fd = os.open(os.path.join(workdir, ".stdin"), os.O_RDONLY)
    try:
        try:
            run = zygote.start(workdir, uid, rlimits, (stdin_fd, out_w, err_w))
        except ZygoteError:
            return None
        finally:
            for fd in (stdin_fd, out_w, err_w):
                os.close(fd)
        out = _collect(run, out_r, err_r, limits, nonce.encode())
        return None if run.lost else out
    finally:
        os.close(out_r)
        os.close(err_r)


def _collect(handle: Any, out_fd: int, err_fd: int, limits: Limits, nonce: bytes) -> dict[str, Any]:
    """Read stdout/stderr under the output cap and a watchdog that any progress line resets."""
    start = time.monotonic()
    deadline = start + limits.timeout_s + 1.0  # the first deadline includes interpreter start-up
    cap = limits.max_output_kb * 1024
    chunks: dict[int, list[bytes]] = {1: [], 2: []}
    total, timed_out, truncated, pending = 0, False, False, b""
    events: list[dict] = []
    sel = selectors.DefaultSelector()
    for fd, key in ((out_fd, 1), (err_fd, 2)):
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ, key)
    exited_at = None
    while sel.get_map():
        now = time.monotonic()
        if now > deadline:
            timed_out = True
            break
        if exited_at is None and handle.poll() is not None:
            exited_at = now
        if exited_at is not None and now - exited_at > 0.5:  # a leftover child holds the pipe
            break
        for key, _ in sel.select(timeout=min(0.05, max(0.0, deadline - now))):
            data = os.read(key.fd, 65536)
            if not data:
                sel.unregister(key.fd)
                continue
            total += len(data)
            chunks[key.data].append(data)
            if key.data == 1 and nonce:
                pending += data
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.startswith(nonce + b" "):
                        events.append(json.loads(line[len(nonce) + 1:]))
                        deadline = time.monotonic() + limits.timeout_s + 1.0
            if total > cap:
                truncated = True
                break
        if truncated:
            break
    sel.close()
    handle.kill()
    rc = handle.wait()
    stdout = b"".join(chunks[1])
    stderr = b"".join(chunks[2])
    return {"rc": rc, "stdout": stdout[:cap], "stderr": stderr, "timed_out": timed_out,
            "truncated": truncated, "events": events, "wall_s": time.monotonic() - start}


def _is_memory_error(stderr: str) -> bool:
    return "MemoryError" in stderr or "Cannot allocate memory" in stderr


# ---------------------------------------------------------------- public API


class _LRU:
    """A small thread-safe LRU of finished runs (timeouts are not cached: load-dependent)."""

    def __init__(self, size: int = 4096) -> None:
        self.size, self.data, self.lock = size, OrderedDict(), threading.Lock()
        self.hits = self.misses = 0

    def get(self, key):
        with self.lock:
            if key in self.data:
                self.hits += 1
                self.data.move_to_end(key)
                return self.data[key]
            self.misses += 1
            return None

    def put(self, key, value) -> None:
        with self.lock:
            self.data[key] = value
            while len(self.data) > self.size:
                self.data.popitem(last=False)

    def clear(self) -> None:
        with self.lock:
            self.data.clear()
            self.hits = self.misses = 0


CACHE = _LRU()


def run_python(code: str, stdin: str = "", *, limits: Limits | None = None) -> SandboxResult:
    """Run `code` as a program (`__main__`) in the sandbox with `stdin`; never raises for bad code.

    >>> run_python("import sys; print(sys.stdin.read().upper(), end='')", "hi").stdout
    'HI'
    >>> run_python("while True: pass", limits=Limits(timeout_s=0.5)).timed_out
    True
    """
    limits = limits or DEFAULT_LIMITS
    key = ("run", code, stdin, limits)
    cached = CACHE.get(key)
    if cached is not None:
        return cached
    raw = _run_job({"mode": "run", "code": code}, stdin, limits)
    stderr = raw["stderr"].decode("utf-8", "replace")
    result = SandboxResult(
        stdout=raw["stdout"].decode("utf-8", "replace"), stderr=_tail(stderr), returncode=raw["rc"],
        timed_out=raw["timed_out"], memory_error=_is_memory_error(stderr), wall_s=raw["wall_s"],
        output_truncated=raw["truncated"],
    )
    if not result.timed_out:
        CACHE.put(key, result)
    return result


def _tail(text: str, n: int = 2000) -> str:
    return text if len(text) <= n else "..." + text[-n:]


def normalize_output(text: str) -> list[str]:
    """Whitespace-normalised program output: the list of whitespace-separated tokens.

    >>> normalize_output("1 2\\n3  \\n\\n") == normalize_output("1  2 3")
    True
    """
    return text.split()


def _io_pair(test: Any) -> tuple[str, str] | None:
    if isinstance(test, dict) and "input" in test and "output" in test:
        return str(test["input"]), str(test["output"])
    if isinstance(test, (list, tuple)) and len(test) == 2:
        return str(test[0]), str(test[1])
    return None


def _test_kind(tests: Sequence[Any]) -> str:
    if all(isinstance(t, str) for t in tests):
        return "asserts"
    if all(_io_pair(t) is not None for t in tests):
        return "io"
    from masdsl.errors import UserError

    raise UserError("tests must be a list of assert strings or a list of {input, output} pairs")


def run_tests(code: str, tests: Sequence[Any], *, limits: Limits | None = None) -> TestReport:
    """Run `tests` against `code`: assert strings in the code's namespace, or stdin/stdout pairs.

    Each test passes or fails on its own (an assert error, a wrong output, a timeout, a crash).

    >>> r = run_tests("print(int(input()) * 2)", [{"input": "2", "output": "4"}, {"input": "3", "output": "7"}])
    >>> [t.status for t in r.results]
    ['pass', 'fail']
    >>> run_tests("def f(:", ["assert f() == 1"]).setup_error
    'SyntaxError: invalid syntax (solution.py, line 1)'
    """
    limits = limits or DEFAULT_LIMITS
    tests = list(tests)
    if not tests:
        return TestReport([])
    kind = _test_kind(tests)
    payload = tests if kind == "asserts" else [_io_pair(t)[0] for t in tests]
    expected = None if kind == "asserts" else [_io_pair(t)[1] for t in tests]
    key = ("tests", code, kind, tuple(map(str, payload)), tuple(expected or ()), limits)
    cached = CACHE.get(key)
    if cached is not None:
        return cached
    report = _run_tests_uncached(code, kind, payload, expected, limits)
    if not report.timed_out:
        CACHE.put(key, report)
    return report


def _run_tests_uncached(code, kind, payload, expected, limits) -> TestReport:
    results: dict[int, TestResult] = {}
    start, stderr_tail, setup_error, setup_kind, t0 = 0, "", "", "", time.monotonic()
    job = {"mode": kind, "code": code, "tests": payload, "out_cap": limits.max_output_kb * 1024}
    while start < len(payload):
        raw = _run_job({**job, "start": start}, "", limits, n_tests=len(payload) - start)
        stderr = raw["stderr"].decode("utf-8", "replace")
        stderr_tail = _tail(stderr) or stderr_tail
        current, loaded = None, False
        for event in raw["events"]:
            if "begin" in event:
                current = event["begin"]
            elif "loaded" in event:
                loaded = event["loaded"]
                if not loaded:
                    setup_error, setup_kind = event["err"], event["kind"]
            elif "i" in event:
                results[event["i"]] = _judge(event, expected)
        if not loaded:  # the code did not even load: every test fails the same way
            if not setup_error:
                setup_kind, setup_error = _death(raw, stderr)
            status = setup_kind if setup_kind in ("timeout", "memory") else "error"
            return TestReport([TestResult(False, status, setup_error)] * len(payload), setup_error,
                              stderr_tail, time.monotonic() - t0)
        if current is None or current in results:  # finished normally
            break
        results[current] = TestResult(False, *_death(raw, stderr))
        start = current + 1
    ordered = [results.get(i, TestResult(False, "crash", "no result")) for i in range(len(payload))]
    return TestReport(ordered, setup_error, stderr_tail, time.monotonic() - t0)


def _death(raw: dict[str, Any], stderr: str) -> tuple[str, str]:
    """Status and message for a process that died or was killed in the middle of a test."""
    if raw["timed_out"]:
        return "timeout", "timed out"
    if raw["truncated"]:
        return "error", "output limit exceeded"
    if _is_memory_error(stderr):
        return "memory", "MemoryError"
    return "crash", f"the process died (exit status {raw['rc']})"


def _judge(event: dict[str, Any], expected: list[str] | None) -> TestResult:
    kind, err = event["kind"], event.get("err", "")
    if expected is None:
        return TestResult(kind == "pass", kind, err)
    out = event.get("out", "")
    if kind != "ran":
        return TestResult(False, kind, err, out)
    if normalize_output(out) == normalize_output(expected[event["i"]]):
        return TestResult(True, "pass", "", out)
    return TestResult(False, "fail", "wrong output", out)


# ---------------------------------------------------------------- the worker pool

_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def pool_size() -> int:
    """Sandboxed processes run at once by the pool (MASDSL_SANDBOX_WORKERS, else the CPU count)."""
    return max(1, int(os.environ.get("MASDSL_SANDBOX_WORKERS", "0")) or (os.cpu_count() or 1))


def _pool() -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=pool_size(), thread_name_prefix="masdsl-sandbox")
        return _POOL


def run_tests_many(jobs: Iterable[tuple[str, Sequence[Any]]], *, limits: Limits | None = None) -> list[TestReport]:
    """`run_tests` over many (code, tests) pairs on the worker pool, results in input order.

    >>> [r.pass_rate for r in run_tests_many([("x = 1", ["assert x == 1"]), ("x = 2", ["assert x == 1"])])]
    [1.0, 0.0]
    """
    return list(_pool().map(lambda job: run_tests(job[0], job[1], limits=limits), list(jobs)))


def run_python_many(jobs: Iterable[tuple[str, str]], *, limits: Limits | None = None) -> list[SandboxResult]:
    """`run_python` over many (code, stdin) pairs on the worker pool, results in input order."""
    return list(_pool().map(lambda job: run_python(job[0], job[1], limits=limits), list(jobs)))


__all__ = [
    "CACHE", "DEFAULT_LIMITS", "Limits", "SandboxResult", "TestReport", "TestResult", "isolation_summary",
    "limits_from_config", "normalize_output", "pool_size", "set_default_limits", "run_python", "run_python_many", "run_tests", "run_tests_many",
]
