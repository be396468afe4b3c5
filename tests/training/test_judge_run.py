"""A `judge(...)` reward end to end on the tiny model (issue 32, item 4): `masdsl run` of the
toy workflow whose copier is scored by a frozen judge policy. Every reward is the score read
from the judge's own reply (or the judge's default when the reply holds no number), the judge
calls are one batch per tick, and their tokens, time and unparsed replies are step metrics and
a row of the run's summary."""

from __future__ import annotations

import io
import re
import shutil
from pathlib import Path

import pytest
from rich.console import Console

import masdsl
from masdsl.config import resolve_config
from masdsl.plan.run_plan import resolve_run
from masdsl.runtime.records import read_records
from tests.support.overrides import NO_TRACKING
from tests.support.toy import TOY, TOY_DIR, train_into


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/learner/conftest.py

JUDGE = '''reward judge(critic, """
    Target {{ task.target }}. The copier said {{ digit }} ({{ output }}) after {{ namer.digit }}.
    Score it from 0 to 9:
  """, default=-5, max_tokens=6, temperature=1.0)'''


def judge_workflow(tmp_path: Path):
    """The toy, its copier rewarded by a frozen judge policy that no role uses."""
    shutil.copy(TOY_DIR / "toy_env.py", tmp_path / "toy_env.py")
    text = TOY.read_text()
    text = text.replace('policy shared { model: "smollm2-135m-instruct" }',
                        'policy shared { model: "smollm2-135m-instruct" }\n'
                        'policy critic { model: "smollm2-135m-instruct", frozen: true }')
    text = text.replace("reward same(digit, namer.digit)", JUDGE)
    assert "judge(critic" in text and "policy critic" in text
    return masdsl.loads(text, name="judged", base_dir=tmp_path)


def run(wf, cfg, run_dir, **kw):
    """`train` of the plan into `run_dir`."""
    return train_into(resolve_run(wf, cfg), run_dir, **kw)


def first_number(reply: str) -> float | None:
    """The test's own reading of a reply (the judge's `parse="auto"` on a reply without \\boxed{})."""
    m = re.search(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?", reply)
    return float(m.group()) if m else None


def test_a_judge_scores_the_copier_on_the_tiny_model(tiny_model_dir, tmp_path):
    wf = judge_workflow(tmp_path)
    overrides = [f"policy.shared.model={tiny_model_dir}", f"policy.critic.model={tiny_model_dir}",
                 NO_TRACKING, "runtime.engine=hf", "train.steps=2", "train.samples=4", "train.batch=3",
                 "train.eval_tasks=2", "train.eval_every=0"]
    out = io.StringIO()
    result = run(wf, resolve_config(wf.train, overrides=overrides), run_dir=tmp_path / "run",
                 console=Console(file=out, width=250))
    records = [r for r in read_records(result.run_dir / "records.jsonl") if r.role == "copier"]
    assert len(records) == 2 * 3 * 4  # steps x tasks x K: one judge reply each
    parsed = 0
    for r in records:
        (j,) = r.judge
        assert j["policy"] == "critic" and f"The copier said {r.fields['digit']} ({r.response_text})" in j["prompt"]
        assert 1 <= j["tokens"] <= 6
        want = first_number(j["reply"])
        parsed += want is not None
        assert j["parsed"] == (want is not None)
        assert r.reward_local == (want if want is not None else -5.0), (j["reply"], r.reward_local)
    assert parsed > 0 and parsed < len(records), "the tiny judge should both give numbers and not"  # both paths ran
    for step in result.history:
        assert step["judge/calls"] == 12.0 and step["judge/tokens"] >= 12.0 and step["time/judge_s"] > 0
    assert sum(h["judge/unparsed"] for h in result.history) == len(records) - parsed
    assert sum(h["tokens/generated"] for h in result.history) == sum(len(r.response_ids) for r in
                                                                     read_records(result.run_dir / "records.jsonl"))
    unparsed = len(records) - parsed
    assert re.search(rf"judge replies +│ 24 in training \(\d+ tokens, [\d.]+ s\), 4 in evaluations; unparsed \(scored the "
                     rf"default\): {unparsed} in training", out.getvalue()), out.getvalue()[-3000:]
