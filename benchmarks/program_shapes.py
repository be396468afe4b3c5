"""The shape of a tool role's turn-0 programs per evaluation, read from a trial's committed answers.

    .venv/bin/python benchmarks/program_shapes.py benchmarks/results/answers_math_gsm_at_bf16_seed0.jsonl [--role tool]

`benchmarks/skill_table.py --answers FILE` writes one line per evaluated task with every reply's
parsed fields; a tool role's `code` field is its program. Per evaluation (`eval`, e.g.
`step_000000` before training): how many turn-0 programs, their mean lines of code (blank lines
and comment lines not counted) and characters, and how many are one line (for math: a single
`print(...)`). Whether a program is right is `skill_table.py`'s question, not this one's.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path


def code_lines(code: str) -> int:
    """Lines that hold code: not blank, not only a comment.

    >>> code_lines("# total\\nx = 3\\n\\nprint(x)  # done\\n")
    2
    """
    return sum(1 for line in code.splitlines() if line.strip() and not line.strip().startswith("#"))


def shapes(rows: list[dict], role: str) -> dict[str, dict[str, float]]:
    """Per evaluation: programs, mean code lines, mean characters, one-line programs.

    >>> rows = [{"eval": "a", "replies": [{"role": "tool", "turn": 0, "fields": {"code": "x = 1\\nprint(x)"}}]},
    ...         {"eval": "a", "replies": [{"role": "tool", "turn": 0, "fields": {"code": "print(2)"}},
    ...                                   {"role": "tool", "turn": 1, "fields": {"code": "print(3)"}}]}]
    >>> shapes(rows, "tool")["a"]
    {'programs': 2, 'mean_lines': 1.5, 'mean_chars': 11.0, 'one_line': 1}
    """
    by_eval: dict[str, list[str]] = defaultdict(list)
    for row in rows:
        for reply in row["replies"]:
            code = (reply.get("fields") or {}).get("code")
            if reply["role"] == role and reply["turn"] == 0 and isinstance(code, str):
                by_eval[row["eval"]].append(code)
    out = {}
    for name, programs in sorted(by_eval.items()):
        lines = [code_lines(c) for c in programs]
        out[name] = {"programs": len(programs), "mean_lines": round(sum(lines) / len(lines), 2),
                     "mean_chars": round(sum(len(c) for c in programs) / len(programs), 1),
                     "one_line": sum(1 for n in lines if n == 1)}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("answers", type=Path, nargs="+")
    ap.add_argument("--role", default="tool")
    args = ap.parse_args()
    print("| answers | evaluation | programs | mean code lines | mean characters | one line |\n|---|---|--:|--:|--:|--:|")
    for path in args.answers:
        try:
            rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        except (OSError, ValueError) as exc:
            print(f"error: {path}: {exc}", file=sys.stderr)
            return 2
        for name, s in shapes(rows, args.role).items():
            print(f"| {path.name} | {name} | {s['programs']} | {s['mean_lines']} | {s['mean_chars']} | {s['one_line']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
