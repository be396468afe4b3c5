"""What a trained reasoner does with the number a program printed: evaluations of the same
weights with and without `train.eval_probe` (docs/concepts.md, "Eval probes"), side by side.

    .venv/bin/python benchmarks/probe_table.py NAME=RECORDS.jsonl... [--json OUT]

Each argument names an evaluation's records (`eval/step_N.jsonl` of a run, or the
`records.jsonl` of a `masdsl eval` run folder) of a math workflow whose reasoner is shown
`A Python program printed: ...` from turn 1 on (`workflows/math_arith.mas`, `math_gsm.mas`).
Per evaluation, over its distinct tasks (Wilson 95 %):

- episode success, and the reasoner right at turn 0 (its prompt is the same under every probe);
- at turn 1, for the episodes that reached it: the reasoner's answer equal to the number its
  prompt showed ("states what it was shown"), right (equivalent to the task's answer, the
  math env's `equivalent`), no parsed answer; and how many prompts showed the right number.

What the prompt showed is read from the prompt itself, so the plain evaluation (the tool's real
output), `wrong_number` (a number the env wrote, never right) and `no_tool_output` (nothing)
are counted the same way.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from masdsl.envs.rewards import equivalent
from masdsl.runtime.records import read_records
from masdsl.stats import wilson

SHOWN = re.compile(r"A Python program printed: (.*?)(?:\n|<\|im_end\|>|$)", re.S)  # math_*.mas's reasoner prompt


def shown_number(prompt_text: str) -> str:
    """What the reasoner's prompt says a program printed ("" when nothing).

    >>> shown_number("Your previous answer: 3\\nA Python program printed: 46<|im_end|>\\n")
    '46'
    >>> shown_number("A Python program printed: <|im_end|>"), shown_number("Solve it.")
    ('', '')
    """
    m = SHOWN.search(prompt_text)
    return m.group(1).strip() if m else ""


def rate(k: int, n: int) -> dict:
    lo, hi = wilson(k, n) if n else (0.0, 0.0)
    return {"k": k, "n": n, "rate": k / n if n else 0.0, "ci": [lo, hi]}


def probe_row(records_path: Path) -> dict:
    """One evaluation's counts (see the module docstring)."""
    success: dict[str, float] = {}
    first, second = [], []
    for r in read_records(records_path):
        if r.episode_success is not None:
            success[r.task_id] = float(r.episode_success)
        if r.role == "reasoner" and r.turn == 0:
            first.append(r)
        elif r.role == "reasoner" and r.turn == 1:
            second.append(r)
    answer = lambda r: str((r.fields or {}).get("answer") or "")
    reference = lambda r: str((r.reference or {}).get("answer", ""))
    shown = [(r, shown_number(r.prompt_text or "")) for r in second]
    return {
        "records": str(records_path),
        "success": rate(sum(1 for v in success.values() if v >= 1.0), len(success)),
        "reasoner_right_turn0": rate(sum(1 for r in first if answer(r) and equivalent(answer(r), reference(r))), len(first)),
        "turn1": len(second),
        "turn1_states_shown": sum(1 for r, s in shown if answer(r) and s and equivalent(answer(r), s)),
        "turn1_right": sum(1 for r in second if answer(r) and equivalent(answer(r), reference(r))),
        "turn1_no_answer": sum(1 for r in second if not answer(r)),
        "turn1_shown_right": sum(1 for r, s in shown if s and equivalent(s, reference(r))),
        "turn1_shown_nothing": sum(1 for _, s in shown if not s),
    }


def _pct(x: dict) -> str:
    return f"{x['k']}/{x['n']} = {100 * x['rate']:.1f} [{100 * x['ci'][0]:.1f}, {100 * x['ci'][1]:.1f}]"


def markdown(rows: dict[str, dict]) -> str:
    lines = ["| evaluation | episode success | reasoner right, turn 0 | reached turn 1 | turn 1: states the number shown "
             "| turn 1: right | turn 1: no answer | turn 1 prompts showing the right number |",
             "|---|--:|--:|--:|--:|--:|--:|--:|"]
    for name, row in rows.items():
        lines.append(f"| {name} | {_pct(row['success'])} | {_pct(row['reasoner_right_turn0'])} | {row['turn1']} | "
                     f"{row['turn1_states_shown']} | {row['turn1_right']} | {row['turn1_no_answer']} | {row['turn1_shown_right']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("evaluations", nargs="+", help="NAME=RECORDS.jsonl")
    ap.add_argument("--json", type=Path, help="write the rows here")
    args = ap.parse_args(argv)
    rows = {}
    for item in args.evaluations:
        name, sep, path = item.partition("=")
        if not sep or not Path(path).is_file():
            print(f"error: `{item}`: expected NAME=RECORDS.jsonl with an existing file", file=sys.stderr)
            return 2
        rows[name] = probe_row(Path(path))
    print(markdown(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
