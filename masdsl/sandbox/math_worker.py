"""The program `masdsl.sandbox.math_equal` starts (as `python -I <this file>`): math-verify out of
the masdsl process. Never imported by masdsl.

It reads one JSON request per line on stdin, `[answer, reference]`, and writes one JSON line
per request: `true`, `false`. It sets its own memory and core limits first, and runs
math-verify in its main thread, so math-verify's own SIGALRM timeouts work; the parent also
kills it when a request runs past its wall-clock limit (a C-level big-integer power, say
`9^{9^{9^{9}}}`, ignores signals), and starts a new one.
"""

import json
import logging
import re
import resource
import sys

INNER_TIMEOUT_S = 2  # math-verify's own (signal) timeouts, per parse and per verify
SAFE_SYMPY = re.compile(r"[0-9a-zA-Z\s+\-*/^().,]*")
SAFE_WORDS = {"sqrt", "pi", "exp", "log", "ln", "sin", "cos", "tan", "oo", "E", "I"}


def _limits():
    for name, value in (("RLIMIT_AS", 4 << 30), ("RLIMIT_CORE", 0)):
        try:
            resource.setrlimit(getattr(resource, name), (value, value))
        except (ValueError, OSError):
            pass


def _as_boxed(text):
    return text if "\\boxed" in text else "\\boxed{" + text + "}"


def _math_verify_equal(answer, reference):
    from math_verify import parse, verify  # heavy: imported once, in main(), before "ready"

    gold = parse(_as_boxed(reference), parsing_timeout=INNER_TIMEOUT_S)
    pred = parse(_as_boxed(answer), parsing_timeout=INNER_TIMEOUT_S)
    if not gold or not pred:
        return False
    return bool(verify(gold, pred, timeout_seconds=INNER_TIMEOUT_S))


def _sympy_equal(answer, reference):
    """The fallback when math-verify errors: sympy's simplify of the difference, only for
    plain arithmetic text (sympy's parser evaluates Python: no names beyond single letters and a
    few functions, no underscores, no quotes)."""
    if answer.strip() == reference.strip():
        return True
    for text in (answer, reference):
        if len(text) > 200 or not SAFE_SYMPY.fullmatch(text):
            return False
        if any(len(w) > 1 and w not in SAFE_WORDS for w in re.findall(r"[A-Za-z]+", text)):
            return False
    # heavy: sympy loads only when math-verify fails on an input (math-verify imports it anyway)
    import sympy
    from sympy.parsing.sympy_parser import parse_expr

    try:
        return sympy.simplify(parse_expr(answer) - parse_expr(reference)) == 0
    except Exception:  # noqa: BLE001 - an unparsable answer is simply not equal
        return False


def equal(answer, reference):
    try:
        return _math_verify_equal(answer, reference)
    except Exception:  # noqa: BLE001 - math-verify failed on this input: fall back to sympy
        return _sympy_equal(answer, reference)


def main():
    _limits()
    logging.disable(logging.CRITICAL)
    import math_verify  # noqa: F401 - heavy, optional: pay the import before saying ready

    out = sys.stdout
    out.write("ready\n")
    out.flush()
    for line in sys.stdin:
        try:
            answer, reference = json.loads(line)
            result = equal(str(answer), str(reference))
        except BaseException:  # noqa: BLE001 - a timeout, a MemoryError, a bad request: not equal
            result = False
        out.write("true\n" if result else "false\n")
        out.flush()


if __name__ == "__main__":
    main()
