"""The mutation fuzzer: valid `.mas` files (the bundled workflows and tests/lang/valid.mas) with
tokens deleted, duplicated, swapped, replaced, inserted or cut short, and the CPU-time limit
each fuzzed input must parse within.

>>> "".join(tokens('role a { prompt "x y" }')) == 'role a { prompt "x y" }'
True
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
SEEDS = [p.read_text() for p in sorted((ROOT / "workflows").glob("*.mas"))] + [(ROOT / "tests" / "lang" / "valid.mas").read_text()]
TOKEN = re.compile(r'"""[\s\S]*?"""|"(?:[^"\\\n]|\\.)*"|#[^\n]*|[A-Za-z_]\w*|\d+(?:\.\d+)?(?:e-?\d+)?|->|==|!=|<=|>=|\s+|.')
VOCAB = ["{", "}", "(", ")", "[", "]", "->", "=>", "&", ",", ":", ";", "=", ".", "when", "flow", "role", "max_turns",
         "start", "end", "coder", "tester", "task", "env", "not", "and", "or", '"', '"""', "-", "0", "1e9", "#", "\n",
         "{{", "}}", "{%", "%}", "|", "|v.", " is ", "==", "policy", "prompt", "file", "parse", "reward", "team", "alpha", "train", "sample", "x",
         " " * 40, "\n" * 40, "¿", "\\"]  # a long blank run then a character no token starts with: the old lexer took minutes
# CPU seconds an input may take (the first one also loads lark). The blow-ups this guards against
# took minutes; a loaded 2-core machine stretched a normal 1 s input past 2 s, so the bar is 10.
MAX_SECONDS = 10.0


def within_time(fn, *args):
    """`fn(*args)`, failing when it takes more than `MAX_SECONDS` of CPU time."""
    t0 = time.process_time()
    out = fn(*args)
    took = time.process_time() - t0
    assert took < MAX_SECONDS, f"{took:.1f} s of CPU on {args[0]!r:.300}"
    return out


def tokens(text: str) -> list[str]:
    return TOKEN.findall(text)


@st.composite
def mutated(draw) -> str:
    toks = tokens(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["delete", "duplicate", "swap", "replace", "insert", "truncate"]))
        i = draw(st.integers(0, len(toks) - 1))
        if op == "delete":
            del toks[i]
        elif op == "duplicate":
            toks.insert(i, toks[i])
        elif op == "swap":
            j = draw(st.integers(0, len(toks) - 1))
            toks[i], toks[j] = toks[j], toks[i]
        elif op == "replace":
            toks[i] = draw(st.sampled_from(VOCAB))
        elif op == "insert":
            toks.insert(i, draw(st.sampled_from(VOCAB)))
        else:
            text = "".join(toks)
            return text[: draw(st.integers(0, len(text)))]
        if not toks:
            return ""
    return "".join(toks)
