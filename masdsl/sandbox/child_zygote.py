"""Part of the sandbox's child program (see `child.py`): the zygote, one long-lived process in
the isolation that forks a child per run (`zygote.py` is its masdsl side).
"""

import json
import os
import resource
import signal
import sys

# Started once per isolation mode as `python -I -S -c <this source> zygote FD` inside the isolation,
# with FD a SOCK_SEQPACKET socket to masdsl. Each "run" request carries a working directory, a
# uid, rlimits and four file descriptors (stdin, stdout, stderr, results); the zygote forks, and the child
# takes those fds, starts a session, enters the directory, sets the limits and runs `_main()`,
# which drops to the uid: no interpreter start-up per run. The zygote reports each child's exit
# status, and on exit or a "kill" request kills the child's group and every process of its uid.


def _kill_uid(uid):
    """Kill every process of `uid` from a helper running as that uid (kill(-1) spares the caller)."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        os._exit(0)
    return pid


def _spawn(request, fds, close):
    pid = os.fork()
    if pid != 0:
        return pid
    try:
        for thing in close:  # the zygote's own channels: the code must not reach them
            thing.close() if hasattr(thing, "close") else os.close(thing)
        for target, fd in enumerate(fds):  # stdin, stdout, stderr, the results channel
            if fd != target:
                os.dup2(fd, target)
        for fd in fds:
            if fd > 3:
                os.close(fd)
        for signum in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):
            signal.signal(signum, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        os.setsid()
        os.chdir(request["workdir"])
        for name, value in request["rlimits"].items():
            resource.setrlimit(getattr(resource, name), (value[0], value[1]))
        _main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, (int, type(None))):
            sys.stderr.write(str(exc.code) + "\n")
    except BaseException:  # noqa: BLE001 - anything else: a traceback on stderr, status 1
        import traceback  # lazy: only a failed run needs it

        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001
            pass
    os._exit(code & 0xFF)


def _zygote(fd):
    # lazy: only the zygote needs these, and a child started per run should not pay for them
    import selectors
    import socket

    sock = socket.socket(fileno=fd)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ)
    sel.register(wake_r, selectors.EVENT_READ)
    children = {}  # pid -> (request id, uid)
    helpers = set()

    def send(**message):
        sock.send(json.dumps(message).encode())

    while True:
        # a kill helper runs as the run's uid and is collected only when the zygote wakes; CI saw a
        # process of that uid outlive its run by 10 s under load, so while helpers are out the zygote
        # also polls for them rather than rely on their SIGCHLD alone
        for key, _ in sel.select(0.05 if helpers else None):
            if key.fileobj is sock:
                try:
                    data, fds, _flags, _addr = socket.recv_fds(sock, 1 << 16, 4)
                except ConnectionError:
                    data = b""
                if not data:  # masdsl went away: leave with everything we started
                    for pid, (_, uid) in children.items():
                        os.killpg(pid, signal.SIGKILL)
                    os._exit(0)
                request = json.loads(data)
                if request["op"] == "run":
                    pid = _spawn(request, fds, (sel, sock, wake_r, wake_w))
                    for fd_ in fds:
                        os.close(fd_)
                    children[pid] = (request["id"], request.get("uid"))
                elif request["op"] == "kill":
                    _kill_run(children, helpers, request["id"])
            else:
                os.read(wake_r, 4096)
        _reap(children, helpers, send)


def _kill_run(children, helpers, run_id):
    """Kill the process group and the uid of the run with id `run_id`."""
    for pid, (rid, uid) in children.items():
        if rid == run_id:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
            if uid is not None:
                helpers.add(_kill_uid(uid))


def _reap(children, helpers, send):
    """Collect every exited child: report a run's status, kill what it left behind."""
    while True:
        try:  # peek first: while the child is a zombie its group id cannot be reused
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            break
        if info is None:
            break
        if info.si_pid in children:
            try:  # background processes it left in its session
                os.killpg(info.si_pid, signal.SIGKILL)
            except OSError:
                pass
        pid, status = os.waitpid(info.si_pid, 0)
        if pid in helpers:
            helpers.discard(pid)
        elif pid in children:
            rid, uid = children.pop(pid)
            if uid is not None:  # background processes it left behind
                helpers.add(_kill_uid(uid))
            send(id=rid, status=os.waitstatus_to_exitcode(status))
