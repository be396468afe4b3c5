"""`judge(...)` rewards in a rollout (issue 32, item 4), with the replay engine so that every
judge reply is known: the score read from the reply becomes the reward, a reply without one
scores the judge's `default` and is counted, all judge prompts of a tick are one engine call,
and the judge prompt shows the candidate it scores."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import masdsl
from masdsl.config import resolve_config
from masdsl.errors import UserError
from masdsl.lang.judge import score_of
from masdsl.runtime.inputs import make_env
from masdsl.runtime.backends.replay import ReplayEngine
from masdsl.runtime.executor import rollout
from tests.support.rollout_plans import plan_of
from masdsl.runtime.judge import judge_metrics, parser_of
from masdsl.training.metrics import run_figures
from tests.support.overrides import NO_TRACKING
from tests.support.toy import TOY_DIR

TASKS = [{"id": "t0", "target": "3"}, {"id": "t1", "target": "4"}]

WORKFLOW = '''
workflow judged "a namer, then a copier; both scored by a frozen critic"
import "toy_env.py"
env toy_digits
data train toy_digits("train", 4)
policy shared { model: "smollm2-135m-instruct" }
policy critic { model: "smollm2-135m-instruct", frozen: true }
role namer {
  policy shared
  prompt "target:{{ task.target }}"
  parse digit = digit(output)
  reward judge(critic, """
    Target {{ task.target }}; the namer said "{{ output }}", read as {{ digit }}.
    Score:
  """, default=-1)
}
role copier {
  policy shared
  prompt "copy:{{ namer.digit }}"
  parse digit = digit(output)
  reward 10 * same(digit, namer.digit) + judge(critic, "{{ copier.digit }} after {{ namer.digit }}?", parse="boxed", default=0.5)
}
flow { start -> namer -> copier -> end }
'''


def load(tmp_path: Path, text: str = WORKFLOW):
    shutil.copy(TOY_DIR / "toy_env.py", tmp_path / "toy_env.py")
    return masdsl.loads(text, name="judged", base_dir=tmp_path)


def replay(tmp_path: Path, name: str, rows: dict) -> ReplayEngine:
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps({"task_id": t, "role": r, "turn": turn, "outputs": o}) + "\n"
                            for (t, r, turn), o in rows.items()))
    return ReplayEngine(path)


POLICY_ROWS = {("t0", "namer", 0): ["3", "x"], ("t1", "namer", 0): ["4", "4"],
               ("t0", "copier", 0): ["3", "7"], ("t1", "copier", 0): ["4", "?"]}
JUDGE_ROWS = {("t0", "judge:namer", 0): ["Fine. \\boxed{8} of 10"], ("t1", "judge:namer", 0): ["I would say 2.5, or 3"],
              ("t0", "judge:copier", 0): ["\\boxed{1}"], ("t1", "judge:copier", 0): ["yes, 9 out of 10"]}


def run(tmp_path: Path, mode: str = "train", wf=None):
    wf = wf or load(tmp_path)
    cfg = resolve_config(wf.train, overrides=[NO_TRACKING])
    policy, critic = replay(tmp_path, "policy", POLICY_ROWS), replay(tmp_path, "critic", JUDGE_ROWS)
    ro = rollout(plan_of(wf, cfg, samples=2), make_env(wf, cfg.sandbox), TASKS, {"shared": policy, "critic": critic},
                 mode=mode, step=0)
    return ro, policy, critic


def test_the_judges_reply_is_the_reward_and_an_unparsed_one_scores_the_default(tmp_path):
    ro, policy, critic = run(tmp_path)
    got = sorted(((r.task_id, r.role, r.candidate, r.reward_local) for r in ro.records), key=lambda g: (g[1] != "namer", g))
    assert got == [
        ("t0", "namer", 0, 8.0), ("t0", "namer", 1, 8.0),  # auto: the \boxed{} number
        ("t1", "namer", 0, 2.5), ("t1", "namer", 1, 2.5),  # auto: no \boxed{}, the first number
        ("t0", "copier", 0, 11.0), ("t0", "copier", 1, 1.0),  # boxed: 1, plus 10 when the copy is right
        ("t1", "copier", 0, 10.5), ("t1", "copier", 1, 0.5),  # boxed finds nothing in "yes, 9 out of 10": 0.5
    ]
    assert ro.judge_calls == 8 and ro.judge_unparsed == 2
    assert ro.judge_tokens == sum(len(j["reply"].encode()) for r in ro.records for j in r.judge)  # bytes: no tokenizer
    assert sorted(j["parsed"] for r in ro.records for j in r.judge) == [False] * 2 + [True] * 6
    assert judge_metrics(ro)["judge/unparsed"] == 2.0 and judge_metrics(ro)["judge/calls"] == 8.0
    figures = run_figures(ro)  # what `masdsl eval` reports
    assert figures["judge/unparsed"] == 2.0 and figures["judge/tokens"] == ro.judge_tokens and figures["time/judge_s"] > 0
    assert ro.tokens_generated == sum(len(r.response_ids) for r in ro.records)  # the judges' tokens are apart


def test_one_engine_call_per_tick_for_all_judge_prompts(tmp_path):
    ro, policy, critic = run(tmp_path)
    assert critic.calls == 2  # two ticks (namer, then copier), each: 2 tasks x 2 candidates in one call
    assert policy.calls == 2


def test_the_judge_prompt_shows_the_candidate_it_scores(tmp_path):
    ro, _, _ = run(tmp_path)
    namer = [r for r in ro.records if r.role == "namer" and r.task_id == "t0"]
    assert 'Target 3; the namer said "3", read as 3.' in namer[0].judge[0]["prompt"]
    assert 'Target 3; the namer said "x", read as .' in namer[1].judge[0]["prompt"]  # a failed parse: the empty value
    copier = [r for r in ro.records if r.role == "copier" and r.task_id == "t0"]
    assert "7 after 3?" in copier[1].judge[0]["prompt"]  # its own candidate, the namer's winner


def test_judges_score_evaluations_too(tmp_path):
    ro, _, critic = run(tmp_path, mode="eval")
    assert [r.reward_local for r in ro.records if r.role == "namer"] == [8.0, 2.5]
    assert ro.judge_calls == 4 and critic.calls == 2


def test_a_rollout_without_the_judges_engine_is_refused(tmp_path):
    wf = load(tmp_path)
    cfg = resolve_config(wf.train, overrides=[NO_TRACKING])
    with pytest.raises(UserError, match="no inference engine for policy `critic`"):
        rollout(plan_of(wf, cfg, samples=2), make_env(wf, cfg.sandbox), TASKS,
                {"shared": replay(tmp_path, "p", POLICY_ROWS)},
                mode="train", step=0)


def test_score_of_reads_the_registered_parser():
    boxed = parser_of("boxed", None)
    assert score_of("it is \\boxed{ 4.5 }", "boxed", boxed) == 4.5
    assert score_of("it is \\boxed{four}", "boxed", boxed) is None
    assert score_of("4.5", "boxed", boxed) is None
    assert score_of("first -2 then 7", "number") == -2.0
    assert score_of("\\boxed{none} then \\boxed{6}", "auto") == 6.0
    assert parser_of("auto", None) is None and parser_of("number", None) is None
    with pytest.raises(UserError, match="not registered"):
        parser_of("no_such_parser_32", None)
