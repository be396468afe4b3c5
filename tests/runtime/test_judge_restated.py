"""A judge that restates an equation (issue 43, item 4): with the old default parse, a judge
replying "1 + 6 = 7" scored 1 (the first number) and nobody saw it. `parse="auto"` now reads a
boxed score, else a labelled one (`Score: 9`), else the first number outside a restated
equation, else nothing (the default, counted); `parse="number"` still takes the first number and
the record says it came from the equation. Each such reply is marked in its record
(`restated`), counted in `judge/restated`, and each record of an episode keeps the task's
reference answer. The rollouts run on the replay engine, so every reply is known
(`tests.support.judged`)."""

from __future__ import annotations

import pytest

from masdsl.lang.judge import restated, score_of
from masdsl.runtime.judge import judge_metrics
from masdsl.runtime.reference import reference_fields
from tests.support.judged import judge_rollout

REPLIES = {("t0", "judge:namer", 0): ["1 + 6 = 7"], ("t1", "judge:namer", 0): ["3 + 4 = 7. Score: 9"]}


@pytest.mark.parametrize("reply, parse, score, equation", [
    ("1 + 6 = 7", "auto", None, "1 + 6 = 7"),  # the old default read 1
    ("1 + 6 = 7", "number", 1.0, "1 + 6 = 7"),
    ("1 + 6 = 7. Score: 9", "auto", 9.0, None),
    ("I checked 2*3=6, so 8", "auto", 8.0, "2*3=6"),
    ("Score: 7/10", "auto", 7.0, None),
    ("The copier said 3 + 4 = 7, right. **Score**: 8", "auto", 8.0, None),
    ("8/10", "auto", 8.0, None),  # a score out of ten is no equation
    ("7-8, I think", "auto", 7.0, None),  # nor is a range
    ("\\boxed{4} because 2 + 2 = 4", "auto", 4.0, None),
    ("score = 6 (2 x 3 = 6)", "number", 6.0, None),  # its first number is outside the equation
])
def test_a_restated_equation_is_not_a_score(reply, parse, score, equation):
    assert score_of(reply, parse) == score
    assert restated(reply, score, parse) == equation


def namer(ro, task):
    return [(r.reward_local, r.judge[0]) for r in ro.records if r.task_id == task]


def test_the_rollout_marks_counts_and_scores_restated_replies(tmp_path):
    ro, _ = judge_rollout(tmp_path, REPLIES)
    for reward, j in namer(ro, "t0"):
        assert reward == -1.0 and not j["parsed"] and j["restated"] == "1 + 6 = 7" and j["parse"] == "auto"
    for reward, j in namer(ro, "t1"):
        assert reward == 9.0 and j["parsed"] and "restated" not in j  # the labelled score decided
    m = judge_metrics(ro)
    assert m["judge/restated"] == 2.0 and m["judge/unparsed"] == 2.0 and m["judge/score"] == 9.0


def test_parse_number_reads_the_operand_and_says_so(tmp_path):
    ro, _ = judge_rollout(tmp_path, REPLIES, parse="number")
    assert [(reward, j["restated"]) for reward, j in namer(ro, "t0") + namer(ro, "t1")] == \
        [(1.0, "1 + 6 = 7")] * 2 + [(3.0, "3 + 4 = 7")] * 2  # `number` ignores the label: the operand again
    assert judge_metrics(ro)["judge/restated"] == 4.0
    evaluation, _ = judge_rollout(tmp_path, REPLIES, parse="number", mode="eval")
    assert judge_metrics(evaluation, "/eval")["judge/restated/eval"] == 2.0  # one reply per task


def test_each_record_keeps_the_tasks_reference_answer(tmp_path):
    ro, wf = judge_rollout(tmp_path, REPLIES)
    assert reference_fields(wf) == ("target",)  # what its `success` line reads
    assert {(r.task_id, r.reference["target"]) for r in ro.records} == {("t0", "3"), ("t1", "4")}
    assert {(r.task_id, r.episode_success) for r in ro.records} == {("t0", 1.0), ("t1", 1.0)}
