"""Part of the sandbox's child program (see `child.py`): the wire between judge and server, and
the *server*, the process that runs the code under test for assert tests (`child_judge.py` is
the judge that talks to it).
"""

import marshal
import os
import types

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
        import ctypes  # lazy: only assert tests need it, and the child starts per run

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except Exception:  # noqa: BLE001 - best effort; the pid namespace still hides masdsl
        pass


def _send(fd, message):
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
    return marshal.loads(data)
