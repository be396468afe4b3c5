"""What a tester's asserts are made of, before and after training: per evaluation, its turn-0
asserts per reply, the share of replies whose every assert calls the function exactly as an
example of the prompt does (copied from the docstring), and the problems where its `catches = 1`
was gained with how many asserts before and after; per training step, how many distinct replies
its groups of K held (`same_reply/<role>` counts the groups of one).

    .venv/bin/python benchmarks/tester_asserts.py RUN [--role tester] [--json OUT]

RUN is a training run's folder (`eval/step_*.jsonl`, `records.jsonl`). A call "copied from the
prompt" is the text left of `==` / `is` in `assert f(x) == y`, spaces removed, found in the
prompt with its spaces removed: a heuristic that misses examples the docstring writes another
way (`f(x) ➞ y` is found, `for x in ...: assert` is not).
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from pathlib import Path

from masdsl.runtime.rundir import eval_files

_CALL = re.compile(r"^assert\s+(?:not\s+)?(\w+\(.*?\))\s*(?:==|is\b|$)")


def calls(reply: str) -> list[str | None]:
    """The function call of each assert line (None where the line has another shape).

    >>> calls("```python\\nassert f(1, 2) == 3\\nassert g(x) is None\\nassert 1 < f(0)\\n```")
    ['f(1,2)', 'g(x)', None]
    """
    out: list[str | None] = []
    for line in reply.splitlines():
        line = line.strip()
        if line.startswith("assert"):
            m = _CALL.match(line)
            out.append(m.group(1).replace(" ", "") if m else None)
    return out


def copied(reply: str, prompt: str) -> bool:
    """Every assert of `reply` calls the function as the prompt's own text does (and there is one).

    >>> copied("assert f(2) == 4", ">>> f(2)\\n4"), copied("assert f(3) == 6", ">>> f(2)\\n4")
    (True, False)
    """
    found = calls(reply)
    flat = prompt.replace(" ", "")
    return bool(found) and all(c is not None and c in flat for c in found)


def evaluation(path: Path, role: str) -> dict[str, dict]:
    out = {}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if r["role"] == role and r["turn"] == 0 and r.get("selected", True):
            out[r["task_id"]] = {"asserts": len(calls(r["response_text"])), "copied": copied(r["response_text"], r["prompt_text"]),
                                 "catches_all": (r.get("metrics") or {}).get("catches") == 1}
    return out


def distinct_per_step(records: Path, role: str) -> dict[int, float]:
    groups: dict[tuple, set] = defaultdict(set)
    for line in records.read_text().splitlines():
        r = json.loads(line)
        if r["role"] == role:
            groups[(r["step"], r["task_id"], r["turn"])].add(tuple(r["response_ids"]))
    steps: dict[int, list[int]] = defaultdict(list)
    for (step, _, _), replies in groups.items():
        steps[step].append(len(replies))
    return {s: sum(v) / len(v) for s, v in sorted(steps.items())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run")
    ap.add_argument("--role", default="tester")
    ap.add_argument("--json")
    args = ap.parse_args()
    run = Path(args.run)
    files = eval_files(run)
    before, after = evaluation(files[0], args.role), evaluation(files[-1], args.role)
    row: dict = {"run": str(run)}
    for name, ev in (("before", before), ("after", after)):
        n = len(ev)
        row[name] = {"replies": n, "asserts_per_reply": sum(e["asserts"] for e in ev.values()) / n,
                     "all_copied": sum(e["copied"] for e in ev.values()), "catches_all": sum(e["catches_all"] for e in ev.values())}
        print(f"{name}: {n} replies, {row[name]['asserts_per_reply']:.2f} asserts each, every assert copied from "
              f"the prompt in {row[name]['all_copied']}, catches = 1 in {row[name]['catches_all']}")
    gained = {t: (before[t]["asserts"], after[t]["asserts"]) for t in before
              if t in after and after[t]["catches_all"] and not before[t]["catches_all"]}
    row["catches_gained"] = gained
    print("catches = 1 gained (asserts before -> after):", ", ".join(f"{t} {b} -> {a}" for t, (b, a) in gained.items()) or "none")
    if (run / "records.jsonl").exists():
        row["distinct_replies_per_group"] = distinct_per_step(run / "records.jsonl", args.role)
        print("distinct replies per group of K, by step:",
              ", ".join(f"{v:.2f}" for v in row["distinct_replies_per_group"].values()))
    if args.json:
        Path(args.json).write_text(json.dumps(row, indent=1) + "\n")


if __name__ == "__main__":
    main()
