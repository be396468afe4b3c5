"""benchmarks/probe_table.py: per evaluation, what the reasoner does at turn 1 with the number its
prompt showed, counted the same way for a plain and a probed evaluation (replayed math_arith
episodes: the tool prints the right answer, the reasoner boxes it at turn 1 or not)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import masdsl
from masdsl.config import resolve_config
from masdsl.envs.math import wrong_number
from masdsl.plan.run_plan import resolve_rollout
from masdsl.runtime.inputs import load_split
from masdsl.training.evaluation import run_evaluation
from tests.support.benchmarks import benchmark_module
from tests.support.overrides import NO_TRACKING

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def probe_table():
    yield from benchmark_module("probe_table")


def _evaluate(tmp_path: Path, probe: str, turn1: str) -> Path:
    """3 math_arith eval tasks: the tool prints the answer; the reasoner boxes -1 at turn 0 and
    `turn1` at turns 1-2 ("{shown}": the number its prompt shows, "{answer}": the task's)."""
    wf = masdsl.load(ROOT / "workflows" / "math_arith.mas")
    tasks = load_split(wf, "eval")[:3]
    shown = {t["id"]: (t["answer"] if probe == "none" else wrong_number(t["answer"])) for t in tasks}
    rows = [{"task_id": t["id"], "role": "tool", "turn": k, "output": f"```python\nprint({t['answer']})\n```"}
            for t in tasks for k in (0, 1, 2)]
    rows += [{"task_id": t["id"], "role": "reasoner", "turn": 0, "output": "\\boxed{-1}"} for t in tasks]
    rows += [{"task_id": t["id"], "role": "reasoner", "turn": k,
              "output": "\\boxed{" + turn1.format(shown=shown[t["id"]], answer=t["answer"]) + "}"}
             for t in tasks for k in (1, 2)]
    replay = tmp_path / f"replay_{probe}.jsonl"
    replay.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = resolve_config(wf.train, overrides=["runtime.engine=replay", f"runtime.replay_file={replay}",
                                              f"runtime.runs_dir={tmp_path / probe}", NO_TRACKING,
                                              f"train.eval_probe={probe}"])
    return run_evaluation(resolve_rollout(wf, cfg), tasks).records


def test_a_reasoner_that_states_what_it_is_shown(probe_table, tmp_path):
    plain = probe_table.probe_row(_evaluate(tmp_path, "none", "{shown}"))
    wrong = probe_table.probe_row(_evaluate(tmp_path, "wrong_number", "{shown}"))
    assert plain["success"]["k"] == 3 and plain["reasoner_right_turn0"]["k"] == 0
    assert (plain["turn1"], plain["turn1_states_shown"], plain["turn1_right"], plain["turn1_shown_right"]) == (3, 3, 3, 3)
    assert wrong["success"]["k"] == 0
    assert (wrong["turn1"], wrong["turn1_states_shown"], wrong["turn1_right"], wrong["turn1_shown_right"]) == (3, 3, 0, 0)
    table = probe_table.markdown({"plain": plain, "wrong": wrong})
    assert "| plain | 3/3 = 100.0" in table and "| wrong | 0/3 = 0.0" in table


def test_a_reasoner_that_solves_ignores_a_wrong_number(probe_table, tmp_path):
    row = probe_table.probe_row(_evaluate(tmp_path, "wrong_number", "{answer}"))
    assert (row["turn1"], row["turn1_states_shown"], row["turn1_right"], row["success"]["k"]) == (3, 0, 3, 3)


def test_a_bad_argument_is_refused(probe_table, capsys):
    assert probe_table.main(["plain"]) == 2
    assert "expected NAME=RECORDS.jsonl" in capsys.readouterr().err
