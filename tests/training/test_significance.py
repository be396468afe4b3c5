"""The run summary's test of whether training changed anything (masdsl/training/significance.py):
per task, eval success and each role's turn-0 metrics, before vs after, with Wilson's interval
over the tasks and McNemar's exact test, read from a run folder's `eval/step_N.jsonl`."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from masdsl.runtime.records import StepRecord
from masdsl.runtime.rundir import RunDir
from masdsl.stats import wilson
from masdsl.training.display import print_summary
from masdsl.training.significance import compare, mcnemar_text, run_significance, significance, task_outcomes
from masdsl.training.trainer import TrainResult


def episode(task: str, success: float, right: dict[int, float], episode: int = 0, step: int = 0) -> list[StepRecord]:
    """One eval episode: the tool's turns (`right`: turn -> its metric), every record carrying the
    episode's success as the executor leaves them."""
    return [StepRecord(step, episode, task, "tool", turn, "tool", 0, True, "p", [1], [2], [0.0], 0.0, 0.0, 0.0,
                       "stop", True, episode_success=success, metrics={"right": value})
            for turn, value in sorted(right.items())]


def evaluation(solved: set[int], right: set[int], tasks: int = 10, step: int = 0) -> list[StepRecord]:
    return [r for i in range(tasks)
            for r in episode(f"t{i}", float(i in solved), {0: float(i in right), 1: 1.0}, step=step)]


def test_one_lost_six_gained_is_p_one_eighth():
    # by hand: P(X <= 1), X ~ Binomial(7, 1/2), is (1 + 7) / 128; two-sided: 0.125
    sig = significance(task_outcomes(evaluation({0}, {0, 1})), task_outcomes(evaluation({1, 2, 3, 4, 5, 6}, set(range(10)))))
    assert sig is not None
    s = sig["success"]
    assert s["tasks"] == 10 and s["mcnemar"] == {"b": 1, "c": 6, "p": 0.125}
    assert (s["before"]["rate"], s["after"]["rate"]) == (0.1, 0.6)
    assert s["before"]["ci"] == list(wilson(1, 10)) and s["after"]["ci"] == list(wilson(6, 10))
    # the tool's `right` at turn 0 only (its turn 1 is always right): 2 -> 10 of 10, none lost
    tool = sig["skills"]["tool/right"]
    assert tool["mcnemar"] == {"b": 0, "c": 8, "p": 2 / 2 ** 8}
    assert (tool["before"]["rate"], tool["after"]["rate"]) == (0.2, 1.0)


def test_several_episodes_per_task_are_one_task():
    # two episodes of one task: its value is their mean, n stays the number of tasks, and it
    # counts as solved for McNemar only when both were
    recs = [*episode("a", 1.0, {0: 1.0}, 0), *episode("a", 0.0, {0: 1.0}, 1), *episode("b", 1.0, {0: 0.0}, 0),
            *episode("b", 1.0, {0: 0.0}, 1)]
    out = task_outcomes(recs)
    assert out == {"success": {"a": 0.5, "b": 1.0}, "skills": {"tool/right": {"a": 1.0, "b": 0.0}}}
    c = compare(out["success"], {"a": 1.0, "b": 1.0})
    assert c is not None and c["tasks"] == 2 and c["before"]["ci"] == list(wilson(1.5, 2))
    assert c["mcnemar"] == {"b": 0, "c": 1, "p": 1.0}


def test_a_share_metric_says_which_tasks_mcnemar_counts():
    # a share per task (coder_tester's `catches`: the fraction of asserts that tell the reference
    # from the mutant): the rates are means, McNemar pairs the tasks at 1, and the text says so
    before = {"a": 0.5, "b": 1.0, "c": 0.0, "d": 0.75}
    after = {"a": 1.0, "b": 1.0, "c": 0.5, "d": 1.0}
    c = compare(before, after)
    assert c is not None and c["solved"] == [1, 3] and c["mcnemar"]["c"] == 2
    assert mcnemar_text(c).startswith("McNemar on the tasks at 1 (1 -> 3 of 4): 0 lost, 2 gained")
    # 0/1 values: the rate is the share of tasks at 1, nothing to add
    binary = compare({"a": 0.0, "b": 1.0}, {"a": 1.0, "b": 1.0})
    assert binary is not None and "solved" not in binary and mcnemar_text(binary).startswith("McNemar 0 lost, 1 gained")


def test_different_tasks_or_no_tasks_are_not_compared():
    assert compare({"a": 1.0}, {"b": 1.0}) is None and compare({}, {}) is None
    assert significance(task_outcomes(evaluation({0}, set(), tasks=4)), task_outcomes(evaluation({0}, set(), tasks=5))) is None


def test_a_skill_is_compared_where_the_role_took_its_first_turn_in_both():
    before = task_outcomes([*episode("a", 1.0, {0: 0.0}), *episode("b", 0.0, {1: 0.0})])  # b: its first turn never came
    after = task_outcomes([*episode("a", 1.0, {0: 1.0}), *episode("b", 1.0, {0: 1.0})])
    sig = significance(before, after)
    assert sig is not None and sig["skills"]["tool/right"]["tasks"] == 1


def _folder(tmp_path: Path, *evaluations: list[StepRecord]) -> RunDir:
    rd = RunDir(tmp_path / "run")
    for step, records in enumerate(evaluations):
        rd.write_evaluation(step, records)
    return rd


def _summary(run_dir: RunDir, significance_: dict | None) -> str:
    # the evaluations' own metrics (`eval_metrics`): the tool's `right` over its two turns and per turn
    before = {"success/eval": 0.1, "skill/eval/tool/right": 0.6, "skill/eval/tool/right/turn0": 0.2,
              "skill/eval/tool/right/turn1": 1.0}
    after = {"success/eval": 0.6, "skill/eval/tool/right": 1.0, "skill/eval/tool/right/turn0": 1.0,
             "skill/eval/tool/right/turn1": 1.0}
    result = TrainResult("toy", run_dir.path, 1, before, after, [], significance=significance_)
    out = io.StringIO()
    print_summary(Console(file=out, width=300), result)
    return out.getvalue()


def test_a_run_folder_with_two_evaluations_gets_the_row(tmp_path):
    rd = _folder(tmp_path, evaluation({0}, {0, 1}), evaluation({1, 2, 3, 4, 5, 6}, set(range(10)), step=1))
    sig = run_significance(rd)
    assert sig is not None and sig["success"]["mcnemar"]["p"] == 0.125
    text = _summary(rd, sig)
    row = next(line for line in text.splitlines() if "eval success per task (before -> after)" in line)
    assert "10.0 % [1.8, 40.4] -> 60.0 % [31.3, 83.2] over 10 tasks; McNemar 1 lost, 6 gained, p 0.125" in row
    tool = next(line for line in text.splitlines() if "skill tool" in line)
    assert ("right 60.0 % -> 100.0 % (turn 0: 20.0 % [5.7, 51.0] -> 100.0 % [72.2, 100.0], 10 tasks; "
            "McNemar 0 lost, 8 gained, p 0.00781)") in tool
    json.dumps(TrainResult("toy", rd.path, 1, None, None, [], significance=sig).summary())  # summary.json can hold it


@pytest.mark.parametrize("case", ["no evaluation", "one evaluation", "different tasks", "torn line"])
def test_no_row_and_no_crash_without_a_comparison(tmp_path, case):
    evals = {"no evaluation": [], "one evaluation": [evaluation({0}, set())],
             "different tasks": [evaluation({0}, set(), tasks=4), evaluation({0}, set(), tasks=5, step=1)],
             "torn line": [evaluation({0}, set()), evaluation({1}, set(), step=1)]}[case]
    rd = _folder(tmp_path, *evals)
    if case == "torn line":  # a run killed while it wrote its last evaluation
        with open(sorted((rd.path / "eval").iterdir())[-1], "a") as f:
            f.write('{"task_id": "t0", "ro')
    sig = run_significance(rd)
    assert sig is None
    text = _summary(rd, sig)
    assert "eval success per task" not in text
    assert "right 60.0 % -> 100.0 % (turn 0: 20.0 % -> 100.0 %)" in text  # the bare values, as before
