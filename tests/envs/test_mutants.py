"""The wrong solutions a tester is measured against (`masdsl.envs.mutants`) and the `catches`
skill metric built on them, on real HumanEval problems in the sandbox."""

from __future__ import annotations

import pytest

from masdsl.envs.code_data import humaneval
from masdsl.envs.mutants import KILL_MUTANTS, killed_mutants, mutants, wrong_solution
from masdsl.envs.rewards import catches, kills, pass_rate

PROBLEMS = {r["id"]: r for r in humaneval("all")}


@pytest.mark.parametrize("task_id", ["HumanEval/0", "HumanEval/23", "HumanEval/53", "HumanEval/162"])
def test_the_wrong_solution_fails_the_hidden_tests_and_differs_by_one_edit(task_id):
    task = PROBLEMS[task_id]
    wrong = wrong_solution(task["solution"], task["tests"])
    assert wrong is not None and wrong in set(mutants(task["solution"]))
    assert pass_rate(task["solution"], task["tests"]) == 1.0
    assert pass_rate(wrong, task["tests"]) < 1.0
    assert wrong_solution(task["solution"], task["tests"]) == wrong  # the same every time


def test_catches_counts_only_tests_that_hold_for_the_reference():
    task = PROBLEMS["HumanEval/53"]  # add(x, y)
    hidden = task["tests"]
    # the hidden tests hold for the reference, and some of them reject its wrong twin
    assert 0.0 < catches(hidden, task["solution"], hidden) <= 1.0
    # a test that fails on the reference catches nothing, whatever the wrong solution does
    assert catches(["assert add(2, 3) == 6"], task["solution"], hidden) == 0.0
    # a test the reference and its wrong twin both pass catches nothing either
    assert catches(["assert callable(add)"], task["solution"], hidden) == 0.0
    assert catches(["assert add(2, 3) == 5"], task["solution"], hidden) == 1.0


def test_kills_is_a_share_of_the_wrong_twins_that_more_good_asserts_never_lower():
    task = PROBLEMS["HumanEval/0"]  # has_close_elements(numbers, threshold)
    hidden, right = task["tests"], task["solution"]
    wrong = killed_mutants(right, hidden)
    assert len(wrong) == KILL_MUTANTS and wrong[0] == wrong_solution(right, hidden)
    assert all(pass_rate(w, hidden) < 1.0 for w in wrong)
    assert kills(hidden, right, hidden) == 1.0  # every killed mutant fails some hidden test, by definition
    # the docstring's two examples: the first rejects two of the four twins, both reject all four;
    # catches, a share of the asserts, halves when the second (which the first twin passes) is added
    one = ["assert has_close_elements([1.0, 2.0, 3.0], 0.5) == False"]
    both = one + ["assert has_close_elements([1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3) == True"]
    assert (kills(one, right, hidden), kills(both, right, hidden)) == (0.5, 1.0)
    assert (catches(one, right, hidden), catches(both, right, hidden)) == (1.0, 0.5)
    # an assert that fails on the reference is left out, not held against the others
    assert kills(one + ["assert has_close_elements([1.0, 1.1], 0.5) == False"], right, hidden) == 0.5


def test_held_out_split_of_a_chosen_size():
    train, held_out = humaneval("train", eval_size=64), humaneval("eval", eval_size=64)
    assert (len(train), len(held_out)) == (100, 64)
    assert {r["id"] for r in train} | {r["id"] for r in held_out} == set(PROBLEMS)
    with pytest.raises(Exception, match="eval_size=164 leaves no training problems"):
        humaneval("train", eval_size=164)
    with pytest.raises(Exception, match="eval_size must be a whole number"):
        humaneval("train", eval_size=-1)
