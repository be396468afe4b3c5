"""The isolation a run gets: the best mode this machine allows, chosen once per process, and the
zygote that forks runs where each run has its own uid.

- `bwrap`: bubblewrap with new pid, network, ipc and uts namespaces on an empty root that holds
  only what a program needs (`visible.py`: the interpreter, its standard library, the shared
  libraries they load, the packages the workflow declares), a private `/tmp`, and only the
  working directory writable. Reads are *sealed*: no dataset, project source, run folder or home
  exists in there. When masdsl runs as root, the code runs under a uid of its own (so the process
  limit counts only its processes: root ignores RLIMIT_NPROC).
- `unshare`: util-linux `unshare` with new pid and network namespaces. Reads are NOT confined.
- `none`: limits and the uid switch only (the network is reachable, reads are NOT confined).

A fallback that cannot seal reads says so on stderr once per process and mode (`runner`).
`runner(limits)` is what a run uses: the mode for `limits.isolation` and `limits.packages` and,
where runs get uids of their own and `MASDSL_SANDBOX_ZYGOTE` is not 0, this process's zygote
(started, probed and restarted here). `isolation_summary(limits)` says in one line what is active.

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
from dataclasses import replace
from pathlib import Path
from typing import Any

from masdsl.errors import UserError
from masdsl.sandbox import zygote as zygotes
from masdsl.sandbox.limits import Isolation, Limits
from masdsl.sandbox.process import CHILD_SOURCE, Mode, command, run_job, scrubbed_env
from masdsl.sandbox.visible import PACKAGES_DIR, View, interpreter_view, linked_packages

_PROBE = {"mode": "run", "code": "print('ok')"}

# Per-process caches of what this machine allows; they hold no configuration.
_MODES: dict[tuple[str, tuple[str, ...]], Mode] = {}  # (isolation, packages) -> the mode
_MODE_LOCK = threading.Lock()
ZYGOTES: dict[tuple[int, str, tuple[str, ...]], Any] = {}  # (pid, mode, packages) -> Zygote, or None
_WARNED: set[tuple[int, str]] = set()  # (pid, mode) that said reads are not confined
_ZYGOTE_LOCK = threading.RLock()
_ZYGOTES_CLOSER: list[Any] = []


def _needed_paths() -> list[str]:
    """Directories the interpreter needs outside bubblewrap: its prefix, its base prefix, and the
    binary's folder."""
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


def _reachable() -> bool:
    """Whether a uid of its own could start this interpreter without bubblewrap (unshare, none):
    no folder on the way is closed to other users (a pyenv under a 0700 `/root` is)."""
    return all(_blocked_by(path) is None for path in _needed_paths())


def _bwrap_mode(as_root: bool, own_uid: bool, view: View | None = None) -> Mode:
    """bubblewrap on an empty root that holds only `view` (the interpreter and its standard
    library: `visible.py`). As root with `own_uid`: root sets up the namespaces itself
    (CAP_SYS_ADMIN) and the code runs as a uid of its own. Otherwise in a user namespace: as the
    caller's uid, or, for a root without CAP_SYS_ADMIN (a default container), as a root whose
    capabilities are dropped (then the process limit is not enforced: the kernel exempts root)."""
    view = view if view is not None else interpreter_view()
    # the private /tmp first: an interpreter that lives under /tmp is bound back into it
    prefix = ["bwrap", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", *view.args()]
    if as_root and own_uid:
        prefix += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    else:
        prefix += ["--unshare-all"] + (["--cap-drop", "ALL"] if as_root else [])
    prefix += ["--die-with-parent", "--new-session"]
    sys_path = (PACKAGES_DIR,) if view.packages else ()
    return Mode("bwrap", as_root and own_uid, tuple(prefix), view.interpreter, sys_path, view.packages, sealed=True)


def _candidate_modes(isolation: Isolation) -> list[Mode]:
    """The modes to try for `isolation`, best first (the first that runs a probe is used)."""
    as_root = os.geteuid() == 0
    reachable = as_root and _reachable()
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


def choose_mode(isolation: Isolation, packages: tuple[str, ...] = ()) -> Mode:
    """The isolation in use for `isolation`, probed once (a tiny program must run and see no
    net), with the declared `packages` importable (a `UserError` names one not installed)."""
    with _MODE_LOCK:
        key = (isolation, packages)
        if key in _MODES:
            return _MODES[key]
        if packages:
            base = _MODES.get((isolation, ())) or _probed(isolation)
            _MODES[(isolation, ())] = base
            if base.sealed:  # the same bubblewrap, plus the packages' binds
                mode = _bwrap_mode(os.geteuid() == 0, base.switch_uid, interpreter_view().with_packages(packages))
            else:
                mode = replace(base, sys_path=(linked_packages(packages),), packages=packages)
        else:
            mode = _probed(isolation)
        _MODES[key] = mode
        return mode


def _probed(isolation: Isolation) -> Mode:
    for candidate in _candidate_modes(isolation):
        probe = run_job(_PROBE, "", Limits(), candidate)
        if probe["rc"] == 0 and probe["stdout"] == b"ok\n":
            return candidate
    raise UserError(f"the sandbox cannot run Python with isolation {isolation!r} on this machine")


# ---------------------------------------------------------------- the zygote


def zygote_enabled() -> bool:
    """Runs fork from one long-lived sandboxed process unless MASDSL_SANDBOX_ZYGOTE=0."""
    return os.environ.get("MASDSL_SANDBOX_ZYGOTE", "1") != "0"


def zygote_for(mode: Mode) -> zygotes.Zygote | None:
    """This process's zygote for `mode` (restarted if it died), or None."""
    key = (os.getpid(), mode.name, mode.packages)
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
    others (and the zygote); elsewhere every run gets a sandbox of its own. A mode that cannot
    seal reads says so once per process (`unsealed_warning`), the first time a run uses it."""
    mode = choose_mode(limits.isolation, limits.packages)
    if not mode.sealed and (os.getpid(), mode.name) not in _WARNED:
        _WARNED.add((os.getpid(), mode.name))
        print(unsealed_warning(mode), file=sys.stderr, flush=True)
    return mode, zygote_for(mode) if mode.switch_uid and zygote_enabled() else None


def unsealed_warning(mode: Mode) -> str:
    """The one line a run prints when its isolation lets generated code read the machine's files."""
    return (f"masdsl sandbox WARNING: isolation `{mode.name}` does NOT confine reads: generated code can read "
            "every file this user can (datasets and their answers, the project, run folders, the home "
            "folder); install bubblewrap (`bwrap`) to seal them")


def visible_paths(limits: Limits | None = None) -> list[str]:
    """What a program run under `limits` can read: the bound paths (sealed bwrap), or a line
    saying that it can read everything (the fallbacks)."""
    limits = limits if limits is not None else Limits()
    mode = choose_mode(limits.isolation, limits.packages)
    if not mode.sealed:
        return [f"every file this user can read (isolation `{mode.name}` does NOT confine reads)"]
    return interpreter_view().with_packages(mode.packages).lines()


def isolation_summary(limits: Limits | None = None) -> str:
    """One line saying exactly what isolation and limits are active for runs under `limits`
    (None: the default `Limits()`)."""
    limits = limits if limits is not None else Limits()
    mode = choose_mode(limits.isolation, limits.packages)
    if mode.name == "bwrap":
        declared = f", and the declared packages {', '.join(mode.packages)}" if mode.packages else ""
        parts = ["bubblewrap: new pid/net/ipc/uts namespaces; reads sealed: the code sees only the interpreter "
                 f"and its standard library{declared} (`masdsl env` lists the paths); private /tmp, only the "
                 "workdir writable"]
    elif mode.name == "unshare":
        parts = ["unshare: new pid/net namespaces; reads are NOT confined and the file system is NOT read-only"]
    else:
        parts = ["no namespaces: the network is NOT isolated, reads are NOT confined and the file system is "
                 "NOT read-only"]
    if mode.switch_uid and zygote_enabled() and zygote_for(mode) is not None:
        parts.append("each run forked by one long-lived sandboxed zygote (MASDSL_SANDBOX_ZYGOTE=0: a new sandbox per run)")
    if mode.switch_uid:
        parts.append("each run as its own uid")
    elif os.geteuid() == 0:
        parts.append("runs as root (no CAP_SYS_ADMIN to switch uid): the process limit is NOT enforced")
    parts.append(
        f"limits: wall {limits.timeout_s:g}s per run/test, cpu, address space {limits.memory_mb} MB, "
        f"{limits.max_procs} processes, files {limits.max_file_mb} MB, output {limits.max_output_kb} KB, "
        f"{limits.max_open_files} open files; scrubbed env; fresh workdir"
    )
    return "sandbox: " + "; ".join(parts)


__all__ = ["ZYGOTES", "choose_mode", "isolation_summary", "runner", "unsealed_warning", "visible_paths",
           "zygote_enabled", "zygote_for"]
