"""The isolation a run gets: the best mode this machine allows, chosen once per process, and the
zygote that forks runs where each run has its own uid.

- `bwrap`: bubblewrap with new pid, network, ipc and uts namespaces, a read-only `/`, a private
  `/tmp`, and only the working directory writable. When masdsl runs as root, the code runs under
  a uid of its own (so the process limit counts only its processes: root ignores RLIMIT_NPROC),
  and directories it could not enter as that uid (e.g. `/root` holding the interpreter) are
  replaced by empty tmpfs with just the interpreter bound back in, which also hides their files.
- `unshare`: util-linux `unshare` with new pid and network namespaces.
- `none`: limits and the uid switch only (reported loudly: the network is reachable).

`runner(limits)` is what a run uses: the mode for `limits.isolation` and, where runs get uids
of their own and `MASDSL_SANDBOX_ZYGOTE` is not 0, this process's zygote (started, probed and
restarted here). `isolation_summary(limits)` says in one line what is active.

>>> "limits: wall" in isolation_summary(Limits(timeout_s=2))
True
"""

from __future__ import annotations

import atexit
import os
import shutil
import stat
import sys
import threading
from pathlib import Path
from typing import Any

from masdsl.errors import UserError
from masdsl.sandbox import zygote as zygotes
from masdsl.sandbox.limits import Isolation, Limits
from masdsl.sandbox.process import CHILD_SOURCE, Mode, command, run_job, scrubbed_env

_PROBE = {"mode": "run", "code": "print('ok')"}

# Per-process caches of what this machine allows; they hold no configuration.
_MODES: dict[str, Mode] = {}
_MODE_LOCK = threading.Lock()
ZYGOTES: dict[tuple[int, str], Any] = {}  # (pid, mode) -> Zygote, or None where it cannot start
_ZYGOTE_LOCK = threading.RLock()
_ZYGOTES_CLOSER: list[Any] = []


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


def _bwrap_mode(as_root: bool, own_uid: bool) -> Mode:
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
    return Mode("bwrap", as_root and own_uid, tuple(prefix), hidden)


def _candidate_modes(isolation: Isolation) -> list[Mode]:
    """The modes to try for `isolation`, best first (the first that runs a probe is used)."""
    as_root = os.geteuid() == 0
    reachable = as_root and not _hidden_dirs()
    unshare = ("unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "--net", "--ipc", "--uts")
    userns = unshare[:1] + ("--map-root-user",) + unshare[1:]
    has_bwrap, has_unshare = shutil.which("bwrap"), shutil.which("unshare")
    modes = {
        "bwrap": ([_bwrap_mode(True, True), _bwrap_mode(True, False)] if as_root else [_bwrap_mode(False, False)])
        if has_bwrap else [],
        "unshare": ([Mode("unshare", reachable, unshare)] if as_root else []) + [Mode("unshare", False, userns)]
        if has_unshare else [],
        "none": [Mode("none", reachable)],
    }
    if isolation == "auto":
        return modes["bwrap"] + modes["unshare"] + modes["none"]
    return modes[isolation]


def choose_mode(isolation: Isolation) -> Mode:
    """The isolation in use for `isolation`, probed once (a tiny program must run and see no net)."""
    with _MODE_LOCK:
        if isolation in _MODES:
            return _MODES[isolation]
        for candidate in _candidate_modes(isolation):
            probe = run_job(_PROBE, "", Limits(), candidate)
            if probe["rc"] == 0 and probe["stdout"] == b"ok\n":
                _MODES[isolation] = candidate
                return candidate
        raise UserError(f"the sandbox cannot run Python with isolation {isolation!r} on this machine")


# ---------------------------------------------------------------- the zygote


def zygote_enabled() -> bool:
    """Runs fork from one long-lived sandboxed process unless MASDSL_SANDBOX_ZYGOTE=0."""
    return os.environ.get("MASDSL_SANDBOX_ZYGOTE", "1") != "0"


def zygote_for(mode: Mode) -> zygotes.Zygote | None:
    """This process's zygote for `mode` (restarted if it died), or None."""
    key = (os.getpid(), mode.name)
    with _ZYGOTE_LOCK:
        current = ZYGOTES.get(key, False)
        if current is None:
            return None
        if current is not False and current.alive:
            return current
        if current:
            current.close()
        made = zygotes.make(lambda root: command(mode, root, bootstrap=True), scrubbed_env("/tmp"), CHILD_SOURCE)
        ZYGOTES[key] = made
        if made is not None and not _ZYGOTES_CLOSER:
            _ZYGOTES_CLOSER.append(atexit.register(_close_zygotes))
        if made is not None:  # it must run a program before it is trusted with runs
            probe = run_job(_PROBE, "", Limits(isolation=mode.name), mode, made)
            if probe["rc"] != 0 or probe["stdout"] != b"ok\n":
                made.close()
                ZYGOTES[key] = made = None
        return made


def _close_zygotes() -> None:
    for key, zygote in list(ZYGOTES.items()):
        if zygote and key[0] == os.getpid():
            zygote.close()
        ZYGOTES.pop(key, None)


def runner(limits: Limits) -> tuple[Mode, zygotes.Zygote | None]:
    """The mode a run under `limits` uses, and the zygote that forks it (None: a process per run).

    A zygote serves only modes where each run has its own uid: sharing one, a run could kill the
    others (and the zygote); elsewhere every run gets a sandbox of its own."""
    mode = choose_mode(limits.isolation)
    return mode, zygote_for(mode) if mode.switch_uid and zygote_enabled() else None


def isolation_summary(limits: Limits | None = None) -> str:
    """One line saying exactly what isolation and limits are active for runs under `limits`
    (None: the default `Limits()`)."""
    limits = limits if limits is not None else Limits()
    mode = choose_mode(limits.isolation)
    if mode.name == "bwrap":
        parts = ["bubblewrap: new pid/net/ipc/uts namespaces, read-only /, private /tmp, only the workdir writable"]
        if mode.hidden:
            parts.append("hidden: " + ", ".join(h for h, _ in mode.hidden))
    elif mode.name == "unshare":
        parts = ["unshare: new pid/net namespaces; the file system is NOT read-only"]
    else:
        parts = ["no namespaces: the network is NOT isolated and the file system is NOT read-only"]
    if mode.switch_uid and zygote_enabled() and zygote_for(mode) is not None:
        parts.append("each run forked by one long-lived sandboxed zygote (MASDSL_SANDBOX_ZYGOTE=0: a new sandbox per run)")
    if mode.switch_uid:
        parts.append("each run as its own uid")
    elif os.geteuid() == 0:
        parts.append("runs as root (no CAP_SYS_ADMIN to switch uid): the process limit is NOT enforced and "
                     "files root owns are readable outside hidden folders")
    parts.append(
        f"limits: wall {limits.timeout_s:g}s per run/test, cpu, address space {limits.memory_mb} MB, "
        f"{limits.max_procs} processes, files {limits.max_file_mb} MB, output {limits.max_output_kb} KB, "
        f"{limits.max_open_files} open files; scrubbed env; fresh workdir"
    )
    return "sandbox: " + "; ".join(parts)


__all__ = ["ZYGOTES", "choose_mode", "isolation_summary", "runner", "zygote_enabled", "zygote_for"]
