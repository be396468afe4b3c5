"""Part of the sandbox's child program (see `child.py`): the *judge* of assert tests, which runs
each test against stand-ins for the code's names and asks the server (`child_server.py`) for
plain values; nothing the code does in its own process reaches the verdict (docs/sandbox.md).
"""

import builtins
import importlib
import json
import marshal
import os
import signal


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
