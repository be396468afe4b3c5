"""The program the sandbox starts inside its isolation (run as `python -I -c <this source>`).

It is never imported by masdsl itself; `masdsl.envs.sandbox` reads this file's text and hands it
to a fresh interpreter, which reads its job from `.job.json` in the working directory, deletes
it, drops root privileges to the run's own uid (when started as root), and then:

- mode "run": runs the code as `__main__` with the real stdin/stdout/stderr;
- mode "asserts": runs the code once, then each test (an assert statement) in the code's
  namespace, one at a time, each under its own timer;
- mode "io": for each test, runs the code afresh as `__main__` with the test's input on fd 0
  and fd 1 sent to a file, and reports the output read back.

Results go to a private copy of the original stdout, one line per event, each line starting
with a random nonce the code under test does not know, so printed text cannot forge a result.
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
    chan = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)

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


if __name__ == "__main__":
    _main()
