"""The program the sandbox starts inside its isolation (run as `python -I -c <this source>`).

It is never imported by masdsl itself; `masdsl.envs.sandbox` reads this file's text and hands it
to a fresh interpreter (or to the zygote at the end of this file, which forks one per run),
which reads its job from `.job.json` in the working directory, deletes it, drops root
privileges to the run's own uid (when started as root), and then:

- mode "run": runs the code as `__main__` with the real stdin/stdout/stderr;
- mode "asserts": forks a server that runs the code, then runs each test (an assert statement)
  here, one at a time, each under its own timer, calling the code's functions through the server
  and comparing only plain builtin values it sends back (see "assert tests" below);
- mode "io": for each test, runs the code afresh as `__main__` with the test's input on fd 0
  and fd 1 sent to a file, and reports the output read back.

Results go to their own pipe (fd `job["chan"]`), one line per event, each line starting with a
random nonce the code under test does not know, so text it writes there cannot forge a result.
Tests that never report (the process died or was killed) count as failed on the parent side.
In mode "asserts" the code under test runs in another process that has neither that pipe nor the
tests, so it cannot forge a verdict even if it finds the nonce.
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
    if isinstance(exc, (_CodeError, _CodeDied)):
        return "error", str(exc)
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


# ---------------------------------------------------------------- assert tests: judge and server
#
# The code under test never shares a process with the asserts that judge it. This process (the
# judge) makes itself non-dumpable (no ptrace, no /proc/PID/fd or mem for its uid), forks a
# *server* that closes the results channel and the tests' descriptor, then runs the code; only
# after that does the judge read the tests (from fd 0, a file already unlinked). Each test runs
# here, in a namespace where the code's functions and classes are stand-ins: calling one sends
# the arguments to the server and brings back the result as a plain builtin value (marshal,
# which refuses subclasses and user classes; checked again here), or, for any other object, an
# opaque stand-in that has no truth value and refuses comparison. So the asserts compare real
# ints, strs, lists... with this process's own builtins, and nothing the code does to its own
# process (patched builtins, exits, prints, fake objects) reaches the verdict.

_PLAIN = (type(None), bool, int, float, complex, str, bytes, list, tuple, dict, set, frozenset)
_SHIELDED_MODULES = (
    "math", "cmath", "random", "re", "string", "itertools", "functools", "collections", "heapq",
    "bisect", "fractions", "decimal", "statistics", "typing", "sys", "os", "json", "copy", "operator",
    "hashlib", "numpy", "np",
)
_MAX_MESSAGE = 64 << 20


class _CodeError(Exception):
    """An exception the code under test raised (of a type the judge does not re-create)."""


class _CodeDied(Exception):
    """The server process of the code under test exited or was killed."""


def _undumpable():
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except Exception:  # noqa: BLE001 - best effort; the pid namespace still hides masdsl
        pass


def _send(fd, message):
    import marshal

    data = marshal.dumps(message)
    data = len(data).to_bytes(8, "big") + data
    while data:
        data = data[os.write(fd, data):]


def _recv_exact(fd, n):
    chunks = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            raise _CodeDied("the code under test exited")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _recv(fd):
    import marshal

    size = int.from_bytes(_recv_exact(fd, 8), "big")
    if size > _MAX_MESSAGE:
        raise _CodeError("the code under test sent %d bytes" % size)
    try:
        return marshal.loads(_recv_exact(fd, size))
    except (ValueError, EOFError, TypeError) as exc:
        raise _CodeError("unreadable reply from the code under test (%s)" % exc)


def _plain(value):
    """`value` when it is made only of exact builtin types (no subclasses, no cycles), else raise."""
    stack, seen = [value], set()
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind not in _PLAIN:
            raise _CodeError("a value of type %s" % kind.__name__)
        if kind in (list, tuple, dict, set, frozenset):
            if id(item) in seen:
                raise _CodeError("a value that contains itself")
            seen.add(id(item))
            stack.extend(item.items() if kind is dict else item)
    return value


# ---- the server side (runs the code under test; owns nothing the verdict depends on)


def _encode(value, handles):
    import marshal

    try:  # marshal alone would also take any buffer (numpy, bytearray) as bytes
        return ("v", marshal.dumps(_plain(value)))
    except (_CodeError, ValueError):
        pass
    tolist = getattr(value, "tolist", None)  # numpy scalars and arrays
    if callable(tolist):
        try:
            return ("v", marshal.dumps(_plain(tolist())))
        except Exception:  # noqa: BLE001
            pass
    handles.append(value)
    return ("h", len(handles) - 1, type(value).__name__[:80])


def _serve(code, rfd, wfd):
    import types

    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    handles = []
    try:
        exec(compile(code, "solution.py", "exec"), namespace)
    except BaseException as exc:  # noqa: BLE001
        kind, err = _describe(exc)
        _send(wfd, ("err", kind, err[:500]))
        return
    names = []
    for name, value in list(namespace.items()):
        if name.startswith("__"):
            continue
        if isinstance(value, types.ModuleType):
            names.append((name, "module", str(getattr(value, "__name__", ""))))
        else:
            names.append((name, "value", _encode(value, handles)))
    _send(wfd, ("ok", names))

    def resolve(target):
        if target[0] == "g":
            return namespace[target[1]]
        return handles[target[1]]

    while True:
        request = _recv(rfd)
        try:
            op = request[0]
            target = resolve(request[1])
            if op == "call":
                args = [resolve(a) if a[0] != "v" else _load_arg(a[1]) for a in request[2]]
                kwargs = {k: resolve(a) if a[0] != "v" else _load_arg(a[1]) for k, a in request[3].items()}
                reply = _encode(target(*args, **kwargs), handles)
            elif op == "attr":
                reply = _encode(getattr(target, request[2]), handles)
            elif op == "list":
                reply = _encode(list(target), handles)
            else:
                reply = ("x", "ValueError", "unknown request")
        except BaseException as exc:  # noqa: BLE001 - SystemExit too: it is only an answer here
            try:
                reply = ("x", type(exc).__name__[:80], str(exc)[:500])
            except BaseException:  # noqa: BLE001
                reply = ("x", "Exception", "")
        _send(wfd, reply)


def _load_arg(data):
    import marshal

    return marshal.loads(data)


# ---- the judge side


class _Remote(object):
    """A stand-in for an object of the code under test: callable (remotely), attributes (remotely),
    iterable (materialised remotely); no truth value, no comparison, no arithmetic."""

    __slots__ = ("_link", "_target", "_label")

    def __init__(self, link, target, label):
        object.__setattr__(self, "_link", link)
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_label", label)

    def __call__(self, *args, **kwargs):
        return self._link.request("call", self._target, args, kwargs)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self._link.request("attr", self._target, name)

    def __iter__(self):
        return iter(self._link.request("list", self._target))

    def _refuse(self, *args):
        raise TypeError("a %s returned by the code under test is not a plain value (int, float, str, "
                        "list, tuple, dict, set, bool or None)" % self._label)

    __bool__ = __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __len__ = __contains__ = _refuse
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _refuse
    __mod__ = __rmod__ = __floordiv__ = __rfloordiv__ = __pow__ = __rpow__ = __neg__ = __abs__ = _refuse
    __index__ = __int__ = __float__ = __str__ = __getitem__ = __hash__ = _refuse

    def __repr__(self):
        return "<%s from the code under test>" % self._label


class _Link(object):
    """The judge's end of the server: start it, ask it things, see it die."""

    def __init__(self, code, chan_fd):
        self.code, self.chan_fd, self.pid = code, chan_fd, None

    def start(self):
        to_r, to_w = os.pipe()
        back_r, back_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                for fd in (to_w, back_r, self.chan_fd):
                    os.close(fd)
                devnull = os.open(os.devnull, os.O_RDWR)
                os.dup2(devnull, 0)  # the tests arrive on the judge's fd 0 later: not here
                os.dup2(devnull, 1)
                signal.signal(signal.SIGALRM, signal.SIG_DFL)
                _serve(self.code, to_r, back_w)
            except BaseException:  # noqa: BLE001
                pass
            os._exit(0)
        os.close(to_r)
        os.close(back_w)
        self.pid, self.r, self.w = pid, back_r, to_w

    def loaded(self):
        """("ok", namespace entries) or ("err", kind, message); the first reply of the server."""
        reply = _recv(self.r)
        if not isinstance(reply, tuple) or not reply or reply[0] not in ("ok", "err"):
            raise _CodeError("unreadable reply from the code under test")
        if reply[0] == "err":
            return None, (str(reply[1]) if reply[1] in ("fail", "error", "timeout", "memory") else "error",
                          str(reply[2]))
        return reply[1], None

    def namespace(self, entries):
        import builtins
        import importlib

        namespace = {"__name__": "__main__", "__builtins__": builtins}
        shielded = set(dir(builtins)) | set(_SHIELDED_MODULES)
        for entry in entries:
            if not (isinstance(entry, tuple) and len(entry) == 3 and type(entry[0]) is str):
                continue
            name, kind, value = entry
            if kind == "module" and type(value) is str and value and name not in dir(builtins):
                try:
                    namespace[name] = importlib.import_module(value)  # the judge's own, unpatched copy
                except BaseException:  # noqa: BLE001
                    pass
            elif kind == "value" and name not in shielded:
                try:
                    namespace[name] = self.value(value, ("g", name), "%s (%s)" % (name, value[2]) if
                                                 value[0] == "h" and len(value) == 3 else name)
                except Exception:  # noqa: BLE001 - a malformed entry is simply not offered
                    pass
        return namespace

    def value(self, reply, target, label):
        import marshal

        if not isinstance(reply, tuple) or not reply:
            raise _CodeError("unreadable reply from the code under test")
        if reply[0] == "v" and len(reply) == 2 and type(reply[1]) is bytes:
            try:
                value = marshal.loads(reply[1])
            except (ValueError, EOFError, TypeError):
                raise _CodeError("unreadable value from the code under test")
            return _plain(value)
        if reply[0] == "h" and len(reply) == 3 and type(reply[1]) is int:
            return _Remote(self, target or ("h", reply[1]), label or str(reply[2])[:80])
        raise _CodeError("unreadable reply from the code under test")

    def _arg(self, value):
        import marshal

        if type(value) is _Remote:
            if object.__getattribute__(value, "_link") is not self:
                raise TypeError("a stand-in of another run")
            return object.__getattribute__(value, "_target")
        try:
            return ("v", marshal.dumps(_plain(value)))
        except (ValueError, _CodeError):
            raise TypeError("cannot pass a %s to the code under test" % type(value).__name__)

    def request(self, op, target, *rest):
        if self.pid is None:
            raise _CodeDied("the code under test is not running")
        if op == "call":
            args, kwargs = rest
            message = ("call", target, [self._arg(a) for a in args],
                       {str(k): self._arg(v) for k, v in kwargs.items()})
        else:
            message = (op, target) + rest
        try:
            _send(self.w, message)
        except OSError:
            raise _CodeDied("the code under test exited")
        reply = _recv(self.r)
        if isinstance(reply, tuple) and len(reply) == 3 and reply[0] == "x":
            import builtins

            name, text = str(reply[1]), str(reply[2])
            cls = getattr(builtins, name, None)
            if isinstance(cls, type) and issubclass(cls, Exception) and not issubclass(cls, _TestTimeout):
                raise cls(text)
            raise _CodeError("%s: %s" % (name, text))
        return self.value(reply, None, "")

    def stop(self):
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except OSError:
                pass
            self.pid = None


def _read_tests():
    """The tests, from fd 0 (the run's stdin file, unlinked before the server was forked)."""
    chunks = []
    while True:
        chunk = os.read(0, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
    return json.loads(b"".join(chunks).decode("utf-8"))


def _run_asserts(code, job, report):
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    _undumpable()
    for name in (".stdin",):
        try:
            os.unlink(name)
        except OSError:
            pass
    report(begin=-1)
    link = _Link(code, job["chan"])
    link.start()
    try:
        entries, failure = _timed(job["timeout"], link.loaded)
    except BaseException as exc:  # noqa: BLE001 - it died, hung or answered nonsense while loading
        entries, failure = None, _describe(exc)
    if failure is not None:
        link.stop()
        report(loaded=False, kind=failure[0], err=failure[1][:500])
        return
    namespace = link.namespace(entries)
    report(loaded=True)
    tests = _read_tests()
    for index in range(job["start"], len(tests)):
        report(begin=index)
        try:
            compiled = compile(tests[index], "test_%d.py" % index, "exec")
            _timed(job["timeout"], lambda: exec(compiled, namespace))
            report(i=index, kind="pass", err="")
        except BaseException as exc:  # noqa: BLE001
            kind, err = _describe(exc)
            report(i=index, kind=kind, err=err[:500])
            if isinstance(exc, (_TestTimeout, _CodeDied)) and index + 1 < len(tests):
                # the server is stuck or gone: the rest run in a fresh process, whose server
                # is forked before it reads the tests
                link.stop()
                report(resume=index + 1)
                return
    link.stop()


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
