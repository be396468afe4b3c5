"""The masdsl side of the sandbox zygote: one long-lived isolated process that forks a child per run.

Starting a bubblewrap sandbox and a Python interpreter costs tens of milliseconds per run; the
zygote pays that once. It runs inside the same isolation (`bwrap ... python -I -S -c <child> zygote
FD`), and for each run receives, over a SOCK_SEQPACKET socket, the run's working directory (made
here, inside a root directory bound into the sandbox), its uid, its rlimits and its stdin/stdout/
stderr/results descriptors. The forked child sets the limits, drops to the uid and runs the job exactly
as a freshly started child would (see `child.py`). Every run still has its own uid (so
its own process count), working directory, session and limits; a kill request or the child's
exit kills its process group and every process of its uid.

If the zygote cannot start or dies, `masdsl.sandbox.process` starts one process per run instead;
`masdsl.sandbox.isolation` starts, probes and restarts this process's zygotes.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
from typing import Callable


class ZygoteError(RuntimeError):
    """The zygote is gone (it died or never started)."""


class Zygote:
    def __init__(self, command: Callable[[str], list[str]], env: dict[str, str], source: str) -> None:
        """`command(root)`: the command starting a bootstrap that runs `source` read from stdin,
        in a sandbox whose writable root is `root`."""
        self.root = tempfile.mkdtemp(prefix="masdsl-sbx-root-")
        os.chmod(self.root, 0o711)  # run dirs inside are reachable by their uid, not listable
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock = ours
        self.proc = subprocess.Popen(
            [*command(self.root), "zygote", str(theirs.fileno())], pass_fds=[theirs.fileno()],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            cwd=self.root, env=env, start_new_session=True,
        )
        theirs.close()
        self.proc.stdin.write(source.encode("utf-8"))  # the program, read by the bootstrap
        self.proc.stdin.close()
        self.lock = threading.Lock()
        self.waiting: dict[int, tuple[threading.Event, list[int]]] = {}
        self.next_id = 0
        self.alive = True
        self.reader = threading.Thread(target=self._read, name="masdsl-sandbox-zygote", daemon=True)
        self.reader.start()

    def _read(self) -> None:
        try:
            while True:
                data = self.sock.recv(1 << 16)
                if not data:
                    break
                message = json.loads(data)
                with self.lock:
                    entry = self.waiting.get(message["id"])
                if entry is not None:
                    entry[1].append(int(message["status"]))
                    entry[0].set()
        except OSError:
            pass
        with self.lock:
            self.alive = False
            for event, status in self.waiting.values():
                event.set()  # no status: the zygote died

    def workdir(self, uid: int | None) -> str:
        path = tempfile.mkdtemp(prefix="run-", dir=self.root)
        if uid is not None:
            os.chown(path, uid, uid)
        return path

    def start(self, workdir: str, uid: int | None, rlimits: dict[str, tuple[int, int]],
              fds: tuple[int, int, int, int]) -> "ZygoteRun":
        with self.lock:
            if not self.alive:
                raise ZygoteError("the sandbox zygote is not running")
            self.next_id += 1
            run_id = self.next_id
            entry = (threading.Event(), [])
            self.waiting[run_id] = entry
        request = {"op": "run", "id": run_id, "workdir": workdir, "uid": uid, "rlimits": rlimits}
        try:
            socket.send_fds(self.sock, [json.dumps(request).encode()], list(fds))
        except OSError as exc:
            with self.lock:
                self.waiting.pop(run_id, None)
            raise ZygoteError(f"the sandbox zygote is not running ({exc})") from exc
        return ZygoteRun(self, run_id, entry)

    def kill(self, run_id: int) -> None:
        try:
            self.sock.send(json.dumps({"op": "kill", "id": run_id}).encode())
        except OSError:
            pass

    def close(self) -> None:
        try:
            self.sock.close()
        finally:
            try:
                os.killpg(self.proc.pid, 9)
            except (ProcessLookupError, PermissionError):
                pass
            self.proc.wait()
            shutil.rmtree(self.root, ignore_errors=True)


class ZygoteRun:
    """A running child, with the small part of `subprocess.Popen`'s interface `_collect` uses."""

    def __init__(self, zygote: Zygote, run_id: int, entry: tuple[threading.Event, list[int]]) -> None:
        self.zygote, self.run_id = zygote, run_id
        self.event, self.status = entry

    @property
    def lost(self) -> bool:
        """The zygote died before reporting how this run ended."""
        return self.event.is_set() and not self.status

    def poll(self) -> int | None:
        if not self.event.is_set():
            return None
        return self.status[0] if self.status else -9

    def kill(self) -> None:
        if not self.event.is_set():
            self.zygote.kill(self.run_id)

    def wait(self, timeout: float = 10.0) -> int:
        if not self.event.wait(timeout):
            self.zygote.kill(self.run_id)
            self.event.wait(timeout)
        with self.zygote.lock:
            self.zygote.waiting.pop(self.run_id, None)
        return self.status[0] if self.status else -9


def make(command: Callable[[str], list[str]], env: dict[str, str], source: str) -> Zygote | None:
    """A started zygote, or None when it cannot start here."""
    try:
        return Zygote(command, env, source)
    except (OSError, subprocess.SubprocessError):
        return None


__all__ = ["Zygote", "ZygoteError", "ZygoteRun", "make"]
