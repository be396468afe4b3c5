"""benchmarks/tester_asserts.py: a tester's asserts per reply, the replies made of docstring
examples, the asserts behind each `catches = 1` gained, and distinct replies per group by step."""

from __future__ import annotations

import doctest
import json
import sys

import pytest

from tests.support.benchmarks import benchmark_module


@pytest.fixture(scope="module")
def tester_asserts():
    yield from benchmark_module("tester_asserts")


def rec(task, step, reply, catches, response_ids=(1,), role="tester", turn=0):
    return json.dumps({"task_id": task, "step": step, "role": role, "turn": turn, "selected": True,
                       "prompt_text": ">>> f(1)\n2\n>>> f(2)\n3", "response_text": reply,
                       "response_ids": list(response_ids), "metrics": {"catches": catches}})


def test_a_gain_made_by_dropping_asserts_is_shown_as_such(tester_asserts, tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    (run / "eval").mkdir(parents=True)
    before = [rec("a", 0, "assert f(1) == 2\nassert f(2) == 3\nassert f(9) == 1", 0.67), rec("b", 0, "assert f(5) == 6", 1.0)]
    after = [rec("a", 8, "assert f(1) == 2", 1.0), rec("b", 8, "assert f(5) == 6", 1.0)]
    (run / "eval" / "step_000000.jsonl").write_text("\n".join(before) + "\n")
    (run / "eval" / "step_000008.jsonl").write_text("\n".join(after) + "\n")
    training = [rec("a", 1, "x", 1.0, (1,)), rec("a", 1, "y", 1.0, (2,)), rec("a", 2, "x", 1.0, (1,)), rec("a", 2, "x", 1.0, (1,)),
                rec("a", 2, "z", 0.0, (3,), role="coder")]
    (run / "records.jsonl").write_text("\n".join(training) + "\n")
    out = tmp_path / "out.json"
    monkeypatch.setattr(sys, "argv", ["tester_asserts.py", str(run), "--json", str(out)])
    tester_asserts.main()
    row = json.loads(out.read_text())
    assert row["before"] == {"replies": 2, "asserts_per_reply": 2.0, "all_copied": 0, "catches_all": 1}
    assert row["after"] == {"replies": 2, "asserts_per_reply": 1.0, "all_copied": 1, "catches_all": 2}
    assert row["catches_gained"] == {"a": [3, 1]}
    assert row["distinct_replies_per_group"] == {"1": 2.0, "2": 1.0}
    assert "a 3 -> 1" in capsys.readouterr().out


def test_the_modules_examples(tester_asserts):
    result = doctest.testmod(tester_asserts)
    assert result.attempted >= 2 and result.failed == 0
