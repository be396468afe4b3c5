"""Parts of the `masdsl view` page (`viewpage.py`) that say how a step went: each candidate's
judge replies and scores, a task's reference answer, and one summary line per step.

The summary line counts from the step's records (episodes, success, rewards, non-flat groups,
replies cut or failed, judge replies without a score); where the run's newest checkpoint holds
the step's metrics (`checkpoints/step_N/state.json`, its `history`), it adds the progress line's
figures: the phase times, entropy and the rest (`masdsl.training.display.step_line`). Every piece
of model text goes through `esc` (the page's rule: viewpage.py).

>>> j = {"policy": "critic", "line": 12, "reply": "1 + 6 = 7", "parsed": False, "score": -5.0, "restated": "1 + 6 = 7"}
>>> html = judge_html(j, esc=lambda s: str(s))
>>> "no score" in html and "restated" in html and "-5" in html
True
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from masdsl.runtime.records import StepRecord
from masdsl.training.display import step_line
from masdsl.training.loglines import log_step_line

Esc = Callable[[Any], str]
CSS = """
.judge{margin:.3rem 0;padding:.3rem .4rem;border:1px dashed #b7c0cc;border-radius:4px;background:#fbfcfe}
.judge pre{white-space:pre-wrap;word-break:break-word;margin:.2rem 0 0;font:12px/1.35 ui-monospace,monospace}
.jhead{font-size:12px}.jscore{font-weight:600;font-variant-numeric:tabular-nums}
.tag.nojs{background:#fed7d7;color:#822727}.tag.rest{background:#fefcbf;color:#744210}
.ref{margin:.2rem 0 .3rem;font-size:13px}.ref code{background:#edf7ed;border-radius:3px;padding:0 .25rem;
 white-space:pre-wrap;word-break:break-word}.summary{color:#1d2430;font-size:13px;margin:-.2rem 0 .5rem}
"""


def judge_html(j: Mapping[str, Any], esc: Esc) -> str:
    """One judge reply to a candidate: the judge, its score, `no score` (the default was taken)
    or `restated` (the score came from, or passed over, an equation the judge restated)."""
    line = f" · line {esc(j['line'])}" if j.get("line") else ""
    tags = ("" if j.get("parsed") else '<span class="tag nojs">no score: default</span>') \
        + (f'<span class="tag rest" title="{esc(j["restated"])}">restated</span>' if j.get("restated") else "")
    note = f'<div class="jhead">restated equation: <code>{esc(j["restated"])}</code></div>' if j.get("restated") else ""
    return (f'<div class="judge" data-parsed="{int(bool(j.get("parsed")))}"><div class="jhead">judge '
            f'<b>{esc(j.get("policy", "?"))}</b>{line} · score <span class="jscore">{float(j.get("score", 0.0)):g}'
            f"</span>{tags}</div>{note}<pre>{esc(j.get('reply', ''))}</pre></div>")


def reference_html(reference: Mapping[str, Any], esc: Esc) -> str:
    """The task's reference answer (`StepRecord.reference`); nothing when the run has none."""
    if not reference:
        return ""
    parts = " ".join(f"{esc(k)} <code>{esc(v if isinstance(v, str) else json.dumps(v, ensure_ascii=False))}</code>"
                     for k, v in reference.items())
    return f'<div class="ref"><b>reference</b> {parts}</div>'


def success_text(value: float | None) -> str:
    """An episode's success for a header: `success 1`, or `success ?` before it ended."""
    return "success ?" if value is None else f"success {value:g}"


def records_summary(records: Sequence[StepRecord], nonflat: int, groups: int, evaluation: bool) -> str:
    """The step's figures from its records.

    >>> from masdsl.runtime.records import StepRecord
    >>> r = StepRecord(1, 0, "t", "a", 0, "a", 0, True, "p", [1], [2], [], 1.0, 0.0, 1.0, "length", False,
    ...                episode_success=1.0, judge=[{"parsed": False, "score": 0.0}])
    >>> records_summary([r], 1, 2, False)
    'episodes 1 · success 1.00 · mean reward 1.000 · non-flat groups 1 of 2 · cut 1 of 1 · parse failed 1 of 1 · judge replies 1, 1 without a score'
    """
    episodes: dict[tuple[int, str], float | None] = {}
    for r in records:
        episodes.setdefault((r.episode, r.task_id), r.episode_success)
    done = [v for v in episodes.values() if v is not None]
    parts = [f"episodes {len(episodes)}"]
    if done:
        parts.append(f"success {sum(done) / len(done):.2f}")
    if records:
        parts.append(f"mean reward {sum(r.reward for r in records) / len(records):.3f}")
    if not evaluation:
        parts.append(f"non-flat groups {nonflat} of {groups}")
    n = len(records)
    parts.append(f"cut {sum(r.finish_reason == 'length' for r in records)} of {n}")
    parts.append(f"parse failed {sum(not r.parse_ok for r in records)} of {n}")
    replies = [j for r in records for j in r.judge]
    if replies:
        unparsed, restated = sum(not j.get("parsed") for j in replies), sum(bool(j.get("restated")) for j in replies)
        parts.append(f"judge replies {len(replies)}, {unparsed} without a score"
                     + (f", {restated} restated an equation" if restated else ""))
    return " · ".join(parts)


def run_history(run_dir: Path) -> dict[int, dict[str, float]]:
    """step -> its metrics, from the newest checkpoint's `state.json` (read as JSON: loading a
    checkpoint would import torch); {} when there is none or it cannot be read."""
    states = sorted(Path(run_dir).glob("checkpoints/step_*/state.json"))
    if not states:
        return {}
    try:
        history = json.loads(states[-1].read_text(encoding="utf-8")).get("history") or []
    except (OSError, ValueError, AttributeError):
        return {}
    return {int(h.get("step", i + 1)): h for i, h in enumerate(history) if isinstance(h, dict)}


def metrics_summary(metrics: Mapping[str, float]) -> str:
    """A step's line as the terminal showed it, less its `step N/M` head (phase times, sampling
    speed, success, entropy, non-flat share, cut and parse-fail rates), for a step whose metrics
    the run folder holds.

    >>> metrics_summary({"time/rollout_s": 5.0, "success/train": 0.5, "groups/nonflat_frac": 0.25})
    'rollout 5.0 s  success 0.50  non-flat 25 %'
    """
    return log_step_line(step_line(0, 0, metrics), metrics, None).partition("  ")[2]
