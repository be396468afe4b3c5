"""Data sources: the bundled math answers are right, splits are disjoint, and the file loaders
read the public formats and name the file and row of a malformed one."""

from __future__ import annotations

import base64
import json
import math
import pickle
import zlib
from fractions import Fraction

import pytest

from masdsl.envs.datasets import (aime, apps, codecontests, livecodebench, load_jsonl, math_small, olympiadbench,
                                  split_of)
from masdsl.envs.rewards import correct, pass_rate
from masdsl.errors import DataError

# Each bundled answer recomputed independently in Python (the question's arithmetic).
COMPUTE = {
    "math-001": '12*24-230',
    "math-002": '48//4*3',
    "math-003": '80*2.5',
    "math-004": '(31-7)//3',
    "math-005": '(9+12)//(5-2)',
    "math-006": '240*15//100',
    "math-007": '40*(1-0.25)',
    "math-008": '72//3+1',
    "math-009": '15*(50//2-15)',
    "math-010": '2**10-10**2',
    "math-011": '252//18',
    "math-012": '1.20/4*10',
    "math-013": 'max(r for r in range(-20,21) if r*r-5*r-14==0)',
    "math-014": "__import__('math').lcm(12,18)",
    "math-015": "__import__('math').gcd(84,126)",
    "math-016": '6*350/100',
    "math-017": '5*14-(10+12+15+20)',
    "math-018": '3.5*60',
    "math-019": '30-30*40//100',
    "math-020": '(10-3)*4',
    "math-021": 'sum(range(1,101))',
    "math-022": '500//25',
    "math-023": '7/8',
    "math-024": "str(__import__('fractions').Fraction(45,60))",
    "math-025": '3**2+3*3*(-2)-(-2)**2',
    "math-026": '15//3*2',
    "math-027": '14*9/2',
    "math-028": 'next(j for j in range(100) if (j+6)+(j+4+6)==40)',
    "math-029": 'sum(1 for n in range(2,51) if all(n%d for d in range(2,n)))',
    "math-030": '2023%7',
    "math-031": '1000%13',
    "math-032": '(20+6)//2',
    "math-033": 'next(y for y in range(-50,51) for x in [y+1] if 2*x+3*y==12)',
    "math-034": "str(__import__('fractions').Fraction(7,5+7+8))",
    "math-035": '(25-20)/20*100',
    "math-036": "__import__('math').isqrt(1764)",
    "math-037": "sum(__import__('math').factorial(k) for k in (3,4,5))",
    "math-038": "__import__('math').factorial(5)",
    "math-039": "__import__('math').comb(8,3)",
    "math-040": '45/1.5',
    "math-041": '180*4/(2+3+4)',
    "math-042": '(6-2)*180',
    "math-043": '(45-9)//2',
    "math-044": '2*4**2-3*4+1',
    "math-045": '3+9*4',
    "math-046": 'sum(2**k for k in range(8))',
    "math-047": '3*60//12',
    "math-048": '255//15',
    "math-049": "4*__import__('math').isqrt(81)",
    "math-050": '6**3',
    "math-051": '(12-4)*3+18/6',
    "math-052": 'next(x for x in range(20) if 2**x==64)',
    "math-053": 'next(k for k in range(10) if 3**k==81)',
    "math-054": '3*(-5)',
    "math-055": '18*37',
    "math-056": "__import__('math').prod(r for r in range(-30,31) if r*r-9*r+20==0)",
    "math-057": '84*4//7',
    "math-058": '0.35*80',
    "math-059": 'sum(1 for d in range(1,37) if 36%d==0)',
    "math-060": '(120-120//4)-(120-120//4)//3',
    "math-061": "__import__('math').dist((1,2),(7,10))",
    "math-062": '3*8/4',
}

def test_math_small_answers_are_verified_by_computation():
    rows = math_small("all")
    assert len(rows) >= 60 and set(COMPUTE) == {r["id"] for r in rows}
    env = {"__import__": __import__, "math": math, "Fraction": Fraction}
    for row in rows:
        value = eval(COMPUTE[row["id"]], {"__builtins__": {"range": range, "sum": sum, "max": max, "next": next,
                                                           "all": all, "str": str, **env}})
        assert correct(str(value), row["answer"]) == 1.0, (row, value)
        assert row["question"].strip() and row["answer"].strip()


def test_math_small_split_is_disjoint_and_stable():
    train, evals = math_small("train"), math_small("eval")
    assert {r["id"] for r in train}.isdisjoint(r["id"] for r in evals)
    assert len(train) + len(evals) == len(math_small("all")) and evals and train
    assert all(split_of(r["id"]) == "eval" for r in evals)
    with pytest.raises(DataError, match="unknown split"):
        math_small("test")


def write(tmp_path, name, rows):
    path = tmp_path / name
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return str(path)


def test_load_jsonl_ids_and_errors(tmp_path):
    path = write(tmp_path, "d.jsonl", [{"prompt": "a"}, {"id": 7, "prompt": "b"}])
    assert [r["id"] for r in load_jsonl(path)] == ["row-1", "7"]
    bad = write(tmp_path, "bad.jsonl", [{"id": "a"}, "{not json"])
    with pytest.raises(DataError, match=r"bad\.jsonl: row 2: not valid JSON"):
        load_jsonl(bad)
    dup = write(tmp_path, "dup.jsonl", [{"id": "a"}, {"id": "a"}])
    with pytest.raises(DataError, match=r"dup\.jsonl: row 2: duplicate id 'a' \(first on row 1\)"):
        load_jsonl(dup)
    with pytest.raises(DataError, match=r"row 1: missing field `question`"):
        load_jsonl(path, required=("question",))
    with pytest.raises(DataError, match="no such data file"):
        load_jsonl(tmp_path / "missing.jsonl")
    arr = write(tmp_path, "d.jsonl", [json.dumps([1])])
    with pytest.raises(DataError, match="row 1: expected a JSON object"):
        load_jsonl(arr)


APPS_ROW = {
    "problem_id": 12, "question": "Read two ints, print their sum.", "difficulty": "introductory", "starter_code": "",
    "solutions": json.dumps(["a, b = map(int, input().split())\nprint(a + b)"]),
    "input_output": json.dumps({"inputs": ["1 2\n", "3 4\n"], "outputs": ["3\n", "7\n"]}),
}
APPS_CALL = {
    "problem_id": 13, "question": "Return the double.", "starter_code": "class Solution:\n    def double(self, x):",
    "solutions": json.dumps(["class Solution:\n    def double(self, x):\n        return 2 * x"]),
    "input_output": json.dumps({"fn_name": "double", "inputs": [[2], [5]], "outputs": [[4], 10]}),
}


def test_apps_rows_and_their_tests_run(tmp_path):
    rows = apps(write(tmp_path, "apps.jsonl", [APPS_ROW, APPS_CALL]), "all")
    assert [r["id"] for r in rows] == ["apps/12", "apps/13"]
    assert rows[0]["tests"] == [{"input": "1 2\n", "output": "3\n"}, {"input": "3 4\n", "output": "7\n"}]
    assert "class Solution" in rows[1]["prompt"]
    assert pass_rate(rows[0]["solution"], rows[0]["tests"]) == 1.0
    assert pass_rate(rows[1]["solution"], rows[1]["tests"]) == 1.0
    assert pass_rate("print(0)", rows[0]["tests"]) == 0.0


def test_apps_malformed_rows_name_file_and_row(tmp_path):
    broken = dict(APPS_ROW, input_output="{oops")
    with pytest.raises(DataError, match=r"apps\.jsonl: row 2: field `input_output` is not valid JSON"):
        apps(write(tmp_path, "apps.jsonl", [APPS_ROW, broken]), "all")
    missing = {k: v for k, v in APPS_ROW.items() if k != "question"}
    with pytest.raises(DataError, match=r"row 1: missing field `question`"):
        apps(write(tmp_path, "apps.jsonl", [missing]), "all")
    uneven = dict(APPS_ROW, input_output=json.dumps({"inputs": ["1"], "outputs": []}))
    with pytest.raises(DataError, match=r"row 1: 1 test inputs but 0 outputs"):
        apps(write(tmp_path, "apps.jsonl", [uneven]), "all")


def test_codecontests_rows(tmp_path):
    row = {
        "name": "1000_A. Sum", "description": "Print a+b.",
        "public_tests": {"input": ["1 2\n"], "output": ["3\n"]},
        "private_tests": {"input": ["5 5\n"], "output": ["10\n"]},
        "generated_tests": {"input": ["0 0\n"], "output": ["0\n"]},
        "solutions": {"language": [2, 3], "solution": ["int main(){}", "print(sum(map(int, input().split())))"]},
    }
    (parsed,) = codecontests(write(tmp_path, "cc.jsonl", [row]), "all")
    assert parsed["id"] == "codecontests/1000_A. Sum" and len(parsed["tests"]) == 2
    assert parsed["solution"].startswith("print") and pass_rate(parsed["solution"], parsed["tests"]) == 1.0
    empty = dict(row, public_tests={"input": [], "output": []}, private_tests={"input": [], "output": []})
    with pytest.raises(DataError, match=r"cc\.jsonl: row 1: no public or private tests"):
        codecontests(write(tmp_path, "cc.jsonl", [empty]), "all")


def test_livecodebench_rows_with_compressed_private_tests(tmp_path):
    private = [{"input": "4\n", "output": "16\n", "testtype": "stdin"}]
    blob = base64.b64encode(zlib.compress(pickle.dumps(json.dumps(private)))).decode()
    stdin_row = {
        "question_id": "abc300_a", "question_title": "Square", "question_content": "Print n squared.",
        "starter_code": "", "metadata": "{}", "difficulty": "easy",
        "public_test_cases": json.dumps([{"input": "3\n", "output": "9\n", "testtype": "stdin"}]),
        "private_test_cases": blob,
    }
    func_row = {
        "question_id": "2850", "question_title": "Add", "question_content": "Add two numbers.",
        "starter_code": "class Solution:\n    def add(self, a: int, b: int) -> int:",
        "metadata": json.dumps({"func_name": "add"}),
        "public_test_cases": json.dumps([{"input": "1\n2", "output": "3", "testtype": "functional"}]),
        "private_test_cases": json.dumps([{"input": "[1]\n[2]", "output": "[1, 2]", "testtype": "functional"}]),
    }
    rows = livecodebench(write(tmp_path, "lcb.jsonl", [stdin_row, func_row]), "all")
    assert rows[0]["tests"] == [{"input": "3\n", "output": "9\n"}, {"input": "4\n", "output": "16\n"}]
    assert pass_rate("n = int(input())\nprint(n * n)", rows[0]["tests"]) == 1.0
    solution = "class Solution:\n    def add(self, a, b):\n        return a + b"
    assert len(rows[1]["tests"]) == 2 and pass_rate(solution, rows[1]["tests"]) == 1.0


def test_livecodebench_refuses_pickled_objects(tmp_path):
    evil = base64.b64encode(zlib.compress(pickle.dumps(Fraction(1, 2)))).decode()
    row = {"question_id": "x", "question_content": "q", "public_test_cases": "[]", "private_test_cases": evil}
    with pytest.raises(DataError, match=r"lcb\.jsonl: row 1: test cases are neither JSON"):
        livecodebench(write(tmp_path, "lcb.jsonl", [row]), "all")


def test_aime_and_olympiadbench_rows(tmp_path):
    aime_rows = [{"ID": "2024-I-1", "Problem": "Find x.", "Solution": "...", "Answer": 204},
                 {"id": 2, "problem": "Find y.", "answer": "73"}]
    parsed = aime(write(tmp_path, "aime.jsonl", aime_rows), "all")
    assert parsed == [{"id": "aime/2024-I-1", "question": "Find x.", "answer": "204"},
                      {"id": "aime/2", "question": "Find y.", "answer": "73"}]
    ob = [{"id": 1606, "question": "Compute the sum.", "final_answer": ["$\\frac{1}{2}$"], "is_multiple_answer": False}]
    path = tmp_path / "ob.json"
    path.write_text(json.dumps(ob))  # a JSON list file works too
    assert olympiadbench(str(path), "all") == [{"id": "olympiadbench/1606", "question": "Compute the sum.",
                                                "answer": "\\frac{1}{2}"}]
    with pytest.raises(DataError, match=r"aime\.jsonl: row 1: missing field `answer`"):
        aime(write(tmp_path, "aime.jsonl", [{"problem": "no answer"}]), "all")


def test_file_loader_splits_partition_the_file(tmp_path):
    rows = [{"id": i, "problem": f"p{i}", "answer": i} for i in range(50)]
    path = write(tmp_path, "aime.jsonl", rows)
    train, evals = aime(path, "train"), aime(path, "eval")
    assert len(train) + len(evals) == 50 and {r["id"] for r in train}.isdisjoint(r["id"] for r in evals)
