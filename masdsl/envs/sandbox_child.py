"""The program the sandbox starts inside its isolation (run as `python -I -c <this source>`).

It is never imported by masdsl itself; `masdsl.envs.sandbox` reads this file's text and hands it
to a fresh interpreter (or to the zygote at the end of this file, which forks one per run),
which reads its job from `.job.json` in the working directory, deletes it, drops root
privileges to the run's own uid (when started as root), and then:

- mode "run": runs the code as `__main__` with the real stdin/stdout/stderr;
- mode "asserts": runs the code once, then each test (an assert statement) in the code's
  namespace, one at a time, each under its own timer;
- mode "io": for each test, runs the code afresh as `__main__` with the test's input on fd 0
  and fd 1 sent to a file, and reports the output read back.

Results go to their own pipe (fd `job["chan"]`), one line per event, each line starting with a
random nonce the code under test does not know, so text it writes there cannot forge a result.
Tests that never report (the process died or was killed) count as failed on the parent side.
"""

import json
import os
import signal
import sys


class _TestTimeout(BaseException):
    """Raised by the per-test timer; a BaseException so `except Exception` cannot swallow it."""


def _on_alarm(signum, frame):
    raise _TestTimeout()


def _describe(exc):
    if isinstance(exc, _TestTimeout):
        return "timeout", "timed out"
    if isinstance(exc, MemoryError):
        return "memory", "MemoryError"
    if isinstance(exc, AssertionError):
        text = str(exc)
        return "fail", "AssertionError" + (": " + text if text else "")
    return "error", "%s: %s" % (type(exc).__name__, exc)


def _main():
    with open(".job.json", encoding="utf-8") as fh:
        job = json.load(fh)
    os.unlink(".job.json")
    nonce = job.pop("nonce")
    uid = job.get("uid")
    if uid is not None and os.getuid() == 0:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    mode = job["mode"]
    code = job["code"]
    if mode == "run":
        _run_main(code)
        return
    chan = os.fdopen(job["chan"], "w", encoding="utf-8", buffering=1)

    def report(**event):
        chan.write(nonce + " " + json.dumps(event) + "\n")
        chan.flush()

    signal.signal(signal.SIGALRM, _on_alarm)
    if mode == "asserts":
        _run_asserts(code, job, report)
    else:
        _run_io(code, job, report)


def _run_main(code):
    sys.argv = ["main.py"]
    namespace = {"__name__": "__main__", "__builtins__": __builtins__, "__file__": "main.py"}
    try:
        exec(compile(code, "main.py", "exec"), namespace)
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - print it without this harness's frames
        import traceback

        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != "main.py":
            tb = tb.tb_next
        traceback.print_exception(type(exc), exc, tb)
        sys.exit(1)


def _timed(seconds, fn):
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _run_asserts(code, job, report):
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    report(begin=-1)
    try:
        compiled = compile(code, "solution.py", "exec")
        _timed(job["timeout"], lambda: exec(compiled, namespace))
    except BaseException as exc:  # noqa: BLE001 - any failure of the code fails every test
        kind, err = _describe(exc)
        report(loaded=False, kind=kind, err=err[:500])
        return
    report(loaded=True)
    for index in range(job["start"], len(job["tests"])):
        report(begin=index)
        try:
            compiled = compile(job["tests"][index], "test_%d.py" % index, "exec")
            _timed(job["timeout"], lambda: exec(compiled, namespace))
            report(i=index, kind="pass", err="")
        except BaseException as exc:  # noqa: BLE001
            kind, err = _describe(exc)
            report(i=index, kind=kind, err=err[:500])


def _move_to(fd, target):
    if fd != target:
        os.dup2(fd, target)
        os.close(fd)


def _run_io(code, job, report):
    report(begin=-1)
    try:
        compiled = compile(code, "main.py", "exec")
    except BaseException as exc:  # noqa: BLE001
        kind, err = _describe(exc)
        report(loaded=False, kind=kind, err=err[:500])
        return
    report(loaded=True)
    cap = job["out_cap"]
    for index in range(job["start"], len(job["tests"])):
        report(begin=index)
        with open("in.txt", "w", encoding="utf-8") as fh:
            fh.write(job["tests"][index])
        _move_to(os.open("in.txt", os.O_RDONLY), 0)  # the code may have closed 0 or 1 (`open(0)`)
        _move_to(os.open("out.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 1)
        sys.stdin = open(0, "r", encoding="utf-8", closefd=False)
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
        namespace = {"__name__": "__main__", "__builtins__": __builtins__}
        kind, err = "ran", ""
        try:
            _timed(job["timeout"], lambda: exec(compiled, namespace))
        except SystemExit:
            pass
        except BaseException as exc:  # noqa: BLE001
            kind, err = _describe(exc)
        try:
            sys.stdout.flush()
        except BaseException as exc:  # noqa: BLE001 - e.g. the file-size limit
            kind, err = "error", "output: %s" % exc
        with open("out.txt", encoding="utf-8", errors="replace") as fh:
            out = fh.read(cap)
        report(i=index, kind=kind, err=err[:500], out=out)


# ---------------------------------------------------------------- the zygote
#
# Started once per isolation mode as `python -I -c <this source> zygote FD` inside the isolation,
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
        import resource

        for name, value in request["rlimits"].items():
            resource.setrlimit(getattr(resource, name), (value[0], value[1]))
        _main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, (int, type(None))):
            sys.stderr.write(str(exc.code) + "\n")
    except BaseException:  # noqa: BLE001 - anything else: a traceback on stderr, status 1
        import traceback

        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001
            pass
    os._exit(code & 0xFF)


def _zygote(fd):
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
        for key, _ in sel.select():
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
                    for pid, (rid, uid) in children.items():
                        if rid == request["id"]:
                            try:
                                os.killpg(pid, signal.SIGKILL)
                            except OSError:
                                pass
                            if uid is not None:
                                helpers.add(_kill_uid(uid))
            else:
                os.read(wake_r, 4096)
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


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "zygote":
        _zygote(int(sys.argv[2]))
    else:
        _main()
