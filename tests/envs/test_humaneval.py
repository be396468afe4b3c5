"""All 164 HumanEval canonical solutions pass their split tests in the sandbox; a broken
variant of each (the entry point returns None) fails at least one."""

from __future__ import annotations

from masdsl.envs.datasets import humaneval, split_of
from masdsl.sandbox import run_tests_many


def test_split_is_deterministic_disjoint_and_complete():
    train, evals = humaneval("train"), humaneval("eval")
    ids_train, ids_eval = {r["id"] for r in train}, {r["id"] for r in evals}
    assert not ids_train & ids_eval and len(ids_train | ids_eval) == 164
    assert 0.12 < len(evals) / 164 < 0.3
    assert all(split_of(i) == "eval" for i in ids_eval)
    assert [r["id"] for r in humaneval("eval")] == [r["id"] for r in evals]


def test_tests_are_single_asserts_calling_the_entry_point():
    rows = {r["id"]: r for r in humaneval("all")}
    first = rows["HumanEval/0"]
    assert first["tests"][0] == "assert has_close_elements([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3) == True"
    assert len(first["tests"]) == 7
    for row in rows.values():
        assert row["tests"], row["id"]
        assert all("candidate" not in t and row["entry_point"] in t for t in row["tests"]), row["id"]
        assert row["solution"].startswith(row["prompt"])


def test_all_canonical_solutions_pass_and_broken_ones_fail():
    rows = humaneval("all")
    good = run_tests_many([(r["solution"], r["tests"]) for r in rows])
    broken = [r["solution"] + f"\n\ndef {r['entry_point']}(*args, **kwargs):\n    return None\n" for r in rows]
    bad = run_tests_many([(code, r["tests"]) for code, r in zip(broken, rows)])
    failing = [(r["id"], [x.error for x in g.results if not x.passed][:2]) for r, g in zip(rows, good) if g.pass_rate < 1]
    assert failing == []
    assert [r["id"] for r, b in zip(rows, bad) if all(b.passed)] == []
    assert sum(b.pass_rate for b in bad) / len(bad) < 0.5


def test_short_solution_subset_is_a_disjoint_filter_of_the_splits():
    import pytest

    from masdsl.errors import DataError

    for split in ("train", "eval"):
        easy, full = humaneval(split, max_solution_lines=2), humaneval(split)
        assert {r["id"] for r in easy} < {r["id"] for r in full}
    ids = {r["id"] for r in humaneval("train", max_solution_lines=2)}
    assert "HumanEval/23" in ids or "HumanEval/23" in {r["id"] for r in humaneval("eval", max_solution_lines=2)}  # strlen
    assert "HumanEval/0" not in ids  # a nested loop is not a short solution
    with pytest.raises(DataError, match="max_solution_lines"):
        humaneval("train", max_solution_lines=-1)
