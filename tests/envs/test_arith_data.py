"""`arith_words`: generated arithmetic word problems (masdsl/envs/arith_data.py)."""

import re

import pytest

from masdsl.envs.arith_data import arith_words
from masdsl.errors import DataError


def test_rows_are_stable_and_splits_disjoint():
    train, evals = arith_words("train", n=2000), arith_words("eval", n=500)
    assert arith_words("eval", n=500) == evals
    assert not {r["question"] for r in train} & {r["question"] for r in evals}
    assert len({r["id"] for r in train + evals}) == 2500
    assert arith_words("eval", n=3) == evals[:3]  # row i does not depend on n


def test_answers_are_positive_integers_the_words_determine():
    for row in arith_words("eval", n=300):
        assert re.fullmatch(r"[1-9][0-9]*", row["answer"]), row
        numbers = [int(x) for x in re.findall(r"\d+", row["question"])]
        assert len(numbers) >= 3, row  # two or three operations on numbers given in the text


def test_shopping_answer_is_recomputed_from_the_text():
    rows = [r for r in arith_words("train", n=200) if "notebooks" in r["question"]]
    assert rows
    for r in rows:
        a, b, c, d = (int(x) for x in re.findall(r"\d+", r["question"]))
        assert int(r["answer"]) == a * b + c * d


@pytest.mark.parametrize("split, n", [("test", 4), ("train", 0), ("eval", "8"), ("train", 10_001)])
def test_bad_arguments_are_named(split, n):
    with pytest.raises(DataError):
        arith_words(split, n=n)
