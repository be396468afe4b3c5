"""The single agent of workflows/math_arith_single.mas uses its tool (issue 42): it writes a program,
the sandbox runs it, it reads what the program printed on its next turn, then answers. Real
episodes through the executor, the math env and its sandbox; the policy is scripted (the replay
engine), so each test knows what the agent wrote."""

from __future__ import annotations

import json

import pytest

import masdsl
from masdsl.config import resolve_config
from masdsl.envs.arith_data import arith_words
from masdsl.envs.math import MathEnv
from masdsl.runtime.backends.replay import ReplayEngine
from masdsl.runtime.executor import rollout
from tests.support.rollout_plans import plan_of
from tests.support.paths import ROOT

SINGLE = ROOT / "workflows" / "math_arith_single.mas"


def episode(tmp_path, replies: dict[int, str], task: dict, samples: int = 1):
    """One episode of the single agent on `task`, the solver replying `replies[turn]`."""
    path = tmp_path / "replay.jsonl"
    path.write_text("".join(json.dumps({"task_id": task["id"], "role": "solver", "turn": t, "output": text}) + "\n"
                            for t, text in replies.items()))
    wf = masdsl.load(str(SINGLE))
    plan = plan_of(wf, resolve_config(wf.train), samples=samples)
    ro = rollout(plan, MathEnv(answer_role="solver"), [task], {"shared": ReplayEngine(path)}, mode="train", step=1)
    by_turn = {r.turn: r for r in ro.records if r.selected}
    return ro.episodes[0], by_turn


@pytest.fixture(scope="module")
def task() -> dict:
    return arith_words("eval", n=1)[0]


def program(value: str) -> str:
    return f"Here is the program:\n```python\nx = {value}\nprint(x)\n```"


def test_the_solver_reads_its_programs_output_before_answering(tmp_path, task):
    answer = task["answer"]
    done, turns = episode(tmp_path, {0: program(answer), 1: f"The program printed {answer}.\n\\boxed{{{answer}}}"}, task)
    assert sorted(turns) == [0, 1] and done.turns == {"solver": 2} and not done.truncated
    assert f"It printed: {answer}" in turns[1].prompt_text  # what its turn-0 program printed
    assert f"x = {answer}" in turns[1].prompt_text  # and the program itself
    assert "It printed" not in turns[0].prompt_text
    assert done.success == 1.0
    assert turns[0].reward_local == 1.0  # the program turn: the tool's reward (its program is right)
    assert turns[1].reward_local == 1.0  # the answer turn: `correct`
    assert turns[0].fields["answer"] == ""  # a program is no answer


def test_a_wrong_program_is_paid_as_the_tool_and_its_output_is_what_the_solver_sees(tmp_path, task):
    wrong = str(int(task["answer"]) + 1)
    done, turns = episode(tmp_path, {0: program(wrong), 1: f"\\boxed{{{wrong}}}"}, task)
    assert f"It printed: {wrong}" in turns[1].prompt_text
    assert turns[0].reward_local == 0.0 and turns[1].reward_local == 0.0 and done.success == 0.0
    crashed, turns = episode(tmp_path, {0: "```python\nprint(1 / 0)\n```", 1: "\\boxed{1}"}, task)
    assert turns[0].reward_local == -1.0  # a program that fails: the tool's -1
    assert "ZeroDivisionError" in turns[1].prompt_text  # the solver sees why it failed


def test_an_answer_written_on_the_program_turn_does_not_end_the_episode(tmp_path, task):
    """Neither a line of code (`answer = ...`, which `boxed` once took) nor a boxed guess at turn 0
    ends the episode before the solver has read its program's output."""
    answer = task["answer"]
    for turn0 in (f"```python\nanswer = {answer}\nprint(answer)\n```\nanswer = {answer}",
                  f"{program(answer)}\n\\boxed{{{answer}}}"):
        done, turns = episode(tmp_path, {0: turn0, 1: f"\\boxed{{{answer}}}"}, task)
        assert sorted(turns) == [0, 1], turn0
        assert f"It printed: {answer}" in turns[1].prompt_text


def test_no_answer_on_the_reading_turn_gets_one_more_turn_and_no_more(tmp_path, task):
    answer = task["answer"]
    done, turns = episode(tmp_path, {0: program(answer), 1: "I am not sure.", 2: "I am still not sure."}, task)
    assert sorted(turns) == [0, 1, 2] and done.truncated and done.success == 0.0  # at most the MAS's 3 turns
