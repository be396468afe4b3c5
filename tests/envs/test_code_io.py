"""The stdin/stdout code task: the io_tests parser, the APPS / CodeContests / LiveCodeBench loaders
(bundled sample and user files), and the bundled sample's reference solutions in the sandbox."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from masdsl.envs.datasets import SPLITS, apps, codecontests, livecodebench, split_of
from masdsl.envs.parsers import MAX_IO_TESTS, io_tests
from masdsl.envs.rewards import pass_rate, passes
from masdsl.sandbox import run_tests_many
from masdsl.errors import DataError

ROOT = Path(__file__).resolve().parents[2]
LOADERS = (apps, codecontests, livecodebench)


# ---------------------------------------------------------------- io_tests


@pytest.mark.parametrize("text, expected", [
    ('[{"input": "1 2\\n", "output": "3\\n"}]', [("1 2\n", "3\n")]),
    ('```json\n[["4", "16"], ["5", "25"]]\n```', [("4", "16"), ("5", "25")]),
    ('{"tests": [{"input": "x", "output": "y"}]}', [("x", "y")]),
    ('[{"input": ["3", "1 2 3"], "output": 6}]', [("3\n1 2 3\n", "6")]),
    ("Input:\n```\n2\n```\nOutput:\n```\n4\n```", [("2\n", "4\n")]),
    ("Sample Input 1\n3 4\nSample Output 1\n7\n\nSample Input 2\n0 0\nSample Output 2\n0\n",
     [("3 4\n", "7\n"), ("0 0\n", "0\n")]),
    ("**Input:**\n5\n**Output:**\n120\n", [("5\n", "120\n")]),
    ("Example 1:\nstdin: 2 2\nstdout: 4\n", [("2 2\n", "4\n")]),
    ("Test 1\nInput: abc\nExpected output: cba\n", [("abc\n", "cba\n")]),
    ("Here are tests.\nInput:\n1\n2\nOutput:\n3", [("1\n2\n", "3\n")]),
])
def test_io_tests_reads_the_usual_shapes(text, expected):
    assert [(t["input"], t["output"]) for t in io_tests(text)] == expected


@pytest.mark.parametrize("text", ["", "no tests", "[1, 2, 3]", '[{"input": "1"}]', "Output: 3\n", None, 42])
def test_io_tests_returns_none_without_pairs(text):
    assert io_tests(text) is None


def test_io_tests_keeps_at_most_fifty_pairs():
    many = json.dumps([{"input": str(i), "output": str(i)} for i in range(500)])
    assert len(io_tests(many)) == MAX_IO_TESTS


# ---------------------------------------------------------------- the bundled sample


@pytest.mark.parametrize("loader", LOADERS)
def test_bundled_sample_splits_are_disjoint_and_cover_it(loader):
    train, evals, every = loader("train"), loader("eval"), loader("all")
    assert len(every) == 12 and len(train) + len(evals) == 12 and train and evals
    assert not {r["id"] for r in train} & {r["id"] for r in evals}
    for row in every:
        assert set(row) >= {"id", "prompt", "tests", "solution"} and row["solution"] and len(row["tests"]) >= 4
        assert all(set(t) == {"input", "output"} for t in row["tests"])


def test_bundled_layouts_hold_the_same_problems_on_the_same_side_of_the_split():
    def by_name(split):
        return [sorted((r["id"].split("/", 1)[1], json.dumps(r["tests"]), r["solution"]) for r in loader(split))
                for loader in LOADERS]

    for split in SPLITS:
        a, c, lcb = by_name(split)
        assert a == c == lcb
        assert all(split_of(name) == split for name, _, _ in a)


def test_every_bundled_reference_solution_passes_its_tests_in_the_sandbox():
    rows = apps("all") + codecontests("all") + livecodebench("all")
    reports = run_tests_many([(r["solution"], r["tests"]) for r in rows])
    failing = [(r["id"], [x.status for x in rep.results]) for r, rep in zip(rows, reports) if rep.pass_rate != 1.0]
    assert not failing
    # and the rewards the workflows use agree; a wrong program does not pass
    row = apps("all")[0]
    assert pass_rate(row["solution"], row["tests"]) == 1.0 and passes(row["solution"], row["tests"])
    assert pass_rate("print(0)", row["tests"]) < 1.0


# ---------------------------------------------------------------- user files


def _write(tmp_path: Path, name: str, rows: list) -> str:
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


APPS_ROW = {"problem_id": 7, "question": "Add.", "input_output": json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]}),
            "solutions": json.dumps(["print(sum(map(int, input().split())))"])}
CC_ROW = {"name": "add", "description": "Add.", "public_tests": {"input": ["1 2\n"], "output": ["3\n"]},
          "private_tests": {"input": ["2 2\n"], "output": ["4\n"]},
          "solutions": {"language": [1, 3], "solution": ["print 3", "print(sum(map(int, input().split())))"]}}
LCB_ROW = {"question_id": "abc1", "question_content": "Add.", "starter_code": "",
           "public_test_cases": json.dumps([{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]),
           "private_test_cases": json.dumps([]), "metadata": "{}"}


def test_user_files_in_each_layout(tmp_path):
    a = apps(_write(tmp_path, "a.jsonl", [APPS_ROW]), "all")
    assert a[0]["id"] == "apps/7" and a[0]["tests"] == [{"input": "1 2\n", "output": "3\n"}] and a[0]["solution"]
    c = codecontests(_write(tmp_path, "c.jsonl", [CC_ROW]))
    assert len(c[0]["tests"]) == 2 and c[0]["solution"].startswith("print(sum")
    lcb = livecodebench(_write(tmp_path, "l.jsonl", [LCB_ROW]))
    assert lcb[0]["id"] == "livecodebench/abc1" and lcb[0]["solution"] == ""
    assert passes(c[0]["solution"], c[0]["tests"])


@pytest.mark.parametrize("loader, good, bad, message", [
    (apps, APPS_ROW, {**APPS_ROW, "input_output": "{not json"}, "field `input_output` is not valid JSON"),
    (apps, APPS_ROW, {k: v for k, v in APPS_ROW.items() if k != "question"}, "missing field `question`"),
    (apps, APPS_ROW, {**APPS_ROW, "input_output": json.dumps({"inputs": ["1"], "outputs": []})}, "1 test inputs but 0"),
    (codecontests, CC_ROW, {**CC_ROW, "public_tests": {"input": [], "output": []}, "private_tests": None},
     "no public or private tests"),
    (codecontests, CC_ROW, {**CC_ROW, "public_tests": {"input": [1], "output": ["x"]}}, "must be text"),
    (livecodebench, LCB_ROW, {**LCB_ROW, "public_test_cases": "%%%"}, "neither JSON nor"),
    (livecodebench, LCB_ROW, {**LCB_ROW, "public_test_cases": "[]"}, "no test cases"),
])
def test_a_malformed_row_names_the_file_and_the_row(tmp_path, loader, good, bad, message):
    path = _write(tmp_path, "rows.jsonl", [good, {**good, **_other_id(loader)}, bad])
    with pytest.raises(DataError) as err:
        loader(path, "all")
    assert f"{path}: row 3: " in str(err.value) and message in str(err.value)


def _other_id(loader) -> dict:
    return {apps: {"problem_id": 8}, codecontests: {"name": "add2"}, livecodebench: {"question_id": "abc2"}}[loader]


def test_a_line_that_is_not_json_and_a_missing_file(tmp_path):
    path = _write(tmp_path, "bad.jsonl", [APPS_ROW, "{oops"])
    with pytest.raises(DataError, match=r"bad.jsonl: row 2: not valid JSON"):
        apps(path, "all")
    with pytest.raises(DataError, match="no such data file"):
        codecontests(str(tmp_path / "missing.jsonl"), "all")


# ---------------------------------------------------------------- the workflows


def test_the_io_workflows_check_clean():
    files = [str(ROOT / "workflows" / n) for n in ("coder_tester_io.mas", "coder_tester_io_single.mas")]
    r = subprocess.run([sys.executable, "-m", "masdsl.cli", "check", *files], capture_output=True, text=True,
                       cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("ok  ") == 2
