"""benchmarks/program_shapes.py (the tool's turn-0 programs per evaluation, from a trial's
committed answers) and benchmarks/vllm_determinism.py's comparison of runs (no engine needed)."""

from __future__ import annotations

import json

import pytest

from tests.support.benchmarks import benchmark_module


@pytest.fixture(scope="module")
def program_shapes():
    yield from benchmark_module("program_shapes")


@pytest.fixture(scope="module")
def vllm_determinism():
    yield from benchmark_module("vllm_determinism")


def _row(eval_name: str, task: int, code: str) -> dict:
    # one line of skill_table.py --answers: every reply's parsed fields
    return {"run": "base,seed=0", "eval": eval_name, "task": f"t{task}", "success": 0.0,
            "replies": [{"role": "reasoner", "turn": 0, "fields": {"answer": "1", "ok": True}},
                        {"role": "tool", "turn": 0, "fields": {"code": code, "ok": True}},
                        {"role": "tool", "turn": 1, "fields": {"code": "print(0)", "ok": True}}]}


def test_a_collapse_to_one_line_programs_is_counted_per_evaluation(program_shapes, tmp_path, capsys, monkeypatch):
    before = "# pages left\npages = 256\nread = pages / 4\n\nprint(pages - read)"
    rows = [_row("step_000000", 0, before), _row("step_000000", 1, "print(3)"),
            _row("step_000008", 0, "print(256 - 1/4)"), _row("step_000008", 1, "print(3)")]
    answers = tmp_path / "answers.jsonl"
    answers.write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setattr("sys.argv", ["program_shapes.py", str(answers)])
    assert program_shapes.main() == 0
    lines = capsys.readouterr().out.splitlines()
    # 3 code lines and 1 before (mean 2, one single line); 1 and 1 after; the turn-1 programs not counted
    assert f"| answers.jsonl | step_000000 | 2 | 2.0 | {(len(before) + 8) / 2} | 1 |" in lines
    assert "| answers.jsonl | step_000008 | 2 | 1.0 | 12.0 | 2 |" in lines


def test_an_unreadable_answers_file_is_named(program_shapes, tmp_path, capsys, monkeypatch):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    monkeypatch.setattr("sys.argv", ["program_shapes.py", str(bad)])
    assert program_shapes.main() == 2
    assert "bad.jsonl" in capsys.readouterr().err


def test_runs_are_compared_reply_by_reply(vllm_determinism):
    same = [[1, 2, 3], [4, 5]]
    assert vllm_determinism.compare([same, same]) == {"replies": 2, "identical": 2, "parted_at": []}
    # the second reply parts at token 1 in run 1 and at token 0 in run 2: one reply differs, two partings
    runs = [same, [[1, 2, 3], [4, 6]], [[1, 2, 3], [7, 5]]]
    assert vllm_determinism.compare(runs) == {"replies": 2, "identical": 1, "parted_at": [0, 1]}
