"""The program the sandbox starts inside its isolation (run as `python -I -S -c <source>`).

It is never imported by masdsl itself; `masdsl.sandbox.process` joins the text of its parts
(`CHILD_PARTS`: `child_server.py`, `child_judge.py`, `child_zygote.py`, then this file, whose
last lines start the program) and hands it to a fresh interpreter (or to the zygote of
`child_zygote.py`, which forks one per run). Each part is also a valid module on its own; the
parts use one another's names only inside functions, once the whole program is defined.

The program reads its job from `.job.json` in the working directory, deletes it, drops root
privileges to the run's own uid (when started as root), and then:

- mode "run": runs the code as `__main__` with the real stdin/stdout/stderr;
- mode "asserts": forks a server that runs the code, then runs each test (an assert statement)
  here, one at a time, each under its own timer, calling the code's functions through the server
  and comparing only plain builtin values it sends back (see `child_judge.py`);
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
    _site_stand_ins(job.get("path") or ())
    uid = job.get("uid")
    if uid is not None and os.getuid() == 0:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    mode = job["mode"]
    code = job["code"]
    if mode == "run":
        _run_main(code, job.get("modules") or {})
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


def _quit(code=None):
    raise SystemExit(code)


def _site_stand_ins(path):
    """What `site` would have given the program (it runs with `-S`): `exit()` and `quit()`, and the
    folder of its declared packages on `sys.path` (the only third-party code it can import)."""
    import builtins  # here: the parts of the child program keep their imports where they are used

    for name in ("exit", "quit"):
        if not hasattr(builtins, name):
            setattr(builtins, name, _quit)
    for folder in path:
        if folder not in sys.path:
            sys.path.append(folder)


def _install_modules(modules):
    """Make each `{name: source}` importable as `import name` (helpers an env offers its tool
    programs; `-I` keeps the working folder off `sys.path`, so they cannot be plain files)."""
    import types  # lazy: most runs offer no modules

    for name, source in modules.items():
        module = types.ModuleType(name)
        module.__file__ = name + ".py"
        exec(compile(source, module.__file__, "exec"), module.__dict__)
        sys.modules[name] = module


def _run_main(code, modules):
    sys.argv = ["main.py"]
    _install_modules(modules)
    namespace = {"__name__": "__main__", "__builtins__": __builtins__, "__file__": "main.py"}
    try:
        exec(compile(code, "main.py", "exec"), namespace)
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - print it without this harness's frames
        import traceback  # lazy: only a failed program needs it, and the child starts per run

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


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "zygote":
        _zygote(int(sys.argv[2]))
    else:
        _main()
