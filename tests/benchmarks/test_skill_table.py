"""benchmarks/skill_table.py: per role, a metric's rate at turn 0 and over all turns, before vs
after, on the same tasks, with Wilson intervals over tasks and McNemar's test; records without
stored metric values get the workflow's metric lines evaluated again."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support.benchmarks import benchmark_module

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def skill_table():
    yield from benchmark_module("skill_table")


def record(task: str, role: str, turn: int, success: float, metrics: dict | None = None, fields: dict | None = None,
           node: str = "") -> str:
    return json.dumps({"task_id": task, "role": role, "turn": turn, "node": node, "episode_success": success,
                       "response_ids": [1, 2, 3], "response_text": "", "fields": fields or {}, "metrics": metrics or {}})


def test_a_run_before_and_after_per_role(skill_table, tmp_path):
    run = tmp_path / "run"
    (run / "eval").mkdir(parents=True)
    shutil.copy(ROOT / "workflows" / "math_arith.mas", run / "workflow.mas")
    tasks = [f"arith/eval/{i}" for i in range(4)]
    before = [record(t, "tool", 0, 0.0, {"answers": 1.0, "correct": float(i == 0)}) for i, t in enumerate(tasks)]
    after = [record(t, "tool", 0, float(i < 3), {"answers": 1.0, "correct": float(i < 3)}) for i, t in enumerate(tasks)]
    after += [record(tasks[3], "tool", 1, 0.0, {"answers": 0.0, "correct": 0.0})]
    (run / "eval" / "step_000000.jsonl").write_text("\n".join(before) + "\n")
    (run / "eval" / "step_000008.jsonl").write_text("\n".join(after) + "\n")
    row = skill_table.compare(run, None)
    assert row["tasks"] == 4 and row["success"]["before"]["rate"] == 0.0 and row["success"]["after"]["rate"] == 0.75
    assert (row["success"]["mcnemar"]["b"], row["success"]["mcnemar"]["c"]) == (0, 3)
    correct = row["skills"]["tool/correct"]
    assert correct["turn0"]["before"]["rate"] == 0.25 and correct["turn0"]["after"]["rate"] == 0.75
    assert correct["all_turns"]["after"]["n"] == 5 and correct["all_turns"]["after"]["rate"] == 0.6
    assert "| run | 4 |" in skill_table.markdown([row])


def test_records_without_metrics_get_the_workflows_metric_lines_again(skill_table):
    import masdsl
    from masdsl.runtime.inputs import load_split

    wf = masdsl.load(ROOT / "workflows" / "math_arith.mas")
    tasks = {t["id"]: t for t in load_split(wf, "eval")}
    task = next(iter(tasks.values()))
    metrics = skill_table.Metrics(wf, tasks)
    right = f"print({task['answer']})"
    rec = {"task_id": task["id"], "role": "tool", "turn": 0, "metrics": {}}
    assert metrics.of(rec, {"tool": {"code": right}}) == {"answers": 1.0, "correct": 1.0}
    assert metrics.of(rec, {"tool": {"code": "print('n/a')"}}) == {"answers": 0.0, "correct": 0.0}


def test_a_metric_line_newer_than_the_records_is_evaluated_beside_the_stored_ones(skill_table):
    import masdsl
    from masdsl.runtime.inputs import load_split

    wf = masdsl.load(ROOT / "workflows" / "math_arith.mas")
    tasks = {t["id"]: t for t in load_split(wf, "eval")}
    task = next(iter(tasks.values()))
    metrics = skill_table.Metrics(wf, tasks)
    # the record kept `answers` (a stored 0.5 no line could give) but was written before `correct` existed
    rec = {"task_id": task["id"], "role": "tool", "turn": 0, "metrics": {"answers": 0.5}}
    assert metrics.of(rec, {"tool": {"code": f"print({task['answer']})"}}) == {"answers": 0.5, "correct": 1.0}


def eval_run(folder: Path, before: list[float], after: list[float]) -> Path:
    """A run folder whose evaluations before and after hold one tool record per task."""
    (folder / "eval").mkdir(parents=True)
    shutil.copy(ROOT / "workflows" / "math_arith.mas", folder / "workflow.mas")
    for step, rates in (("step_000000", before), ("step_000008", after)):
        rows = [record(f"arith/eval/{i}", "tool", 0, s, {"answers": 1.0, "correct": s}) for i, s in enumerate(rates)]
        (folder / "eval" / f"{step}.jsonl").write_text("\n".join(rows) + "\n")
    return folder


def test_an_arms_interval_counts_tasks_not_tasks_times_seeds(skill_table, tmp_path):
    """Two seeds on the same 10 tasks: the pooled rate is the seeds' mean, and its Wilson
    interval is the one of 10 tasks, as wide as one seed's, not the narrower one of 20 episodes."""
    sweep = tmp_path / "sweep" / "trials"
    runs = [eval_run(sweep / f"train.grouping=at,seed={seed}", [0.0] * 10, [1.0] * 8 + [0.0] * 2) for seed in (0, 1)]
    rows = [skill_table.compare(run, None) for run in runs]
    (arm,) = skill_table.arms(rows)
    assert arm["arm"] == "train.grouping=at" and arm["seeds"] == [0, 1]
    assert arm["after"]["n"] == 10 and arm["after"]["rate"] == pytest.approx(0.8)
    assert arm["after"]["ci"] == pytest.approx(skill_table.wilson(8, 10))
    assert arm["after"]["ci"] != pytest.approx(skill_table.wilson(16, 20))
    assert "| train.grouping=at | 0, 1 |" in skill_table.arms_markdown([arm])


def test_a_trial_still_training_is_left_out_of_its_sweep(skill_table, tmp_path, capsys):
    trials = tmp_path / "sweep" / "trials"
    done = eval_run(trials / "train.grouping=at,seed=0", [0.0, 1.0], [1.0, 1.0])
    running = trials / "train.grouping=at,seed=1"
    (running / "eval").mkdir(parents=True)
    (running / "eval" / "step_000000.jsonl").write_text(record("arith/eval/0", "tool", 0, 0.0) + "\n")
    assert skill_table.run_folders([str(tmp_path / "sweep")]) == [done]
    assert "seed=1: left out" in capsys.readouterr().err


def test_curves_draw_each_runs_history(skill_table, tmp_path):
    run = tmp_path / "run"
    ckpt = run / "checkpoints" / "step_000002"
    ckpt.mkdir(parents=True)
    history = [{"step": s, "skill/train/tool/correct/turn0": 0.1 * s, "nonflat/tool": 0.5, "success/train": 0.2 * s}
               for s in (1, 2)]
    evals = [{"step": 0, "success/eval": 0.1}, {"step": 2, "success/eval": 0.4}]
    (ckpt / "state.json").write_text(json.dumps({"history": history, "evals": evals}))
    out = tmp_path / "curves.png"
    skill_table.curves([run], out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000


def test_the_modules_examples(skill_table):
    import doctest

    result = doctest.testmod(skill_table)
    assert result.attempted >= 2 and result.failed == 0


def shown_rows(skill_table, tmp_path, workflow: str, before: list[str], after: list[str]) -> dict:
    """The `given` rows of a run whose two evaluations hold `before` and `after`."""
    run = tmp_path / "run"
    (run / "eval").mkdir(parents=True)
    shutil.copy(ROOT / "workflows" / workflow, run / "workflow.mas")
    (run / "eval" / "step_000000.jsonl").write_text("\n".join(before) + "\n")
    (run / "eval" / "step_000004.jsonl").write_text("\n".join(after) + "\n")
    return skill_table.compare(run, None)["given"]


def test_a_roles_answer_is_split_by_the_answer_it_was_shown(skill_table, tmp_path):
    """The reasoner at turn 1 saw the tool's turn-0 answer: its correctness is reported apart for
    a right and a wrong answer shown (adopting vs resisting), before and after."""

    def episode(task, tool_right, reasoner_turn1):
        return [record(task, "tool", 0, 0.0, {"answers": 1.0, "correct": tool_right}),
                record(task, "reasoner", 0, 0.0, {"correct": 0.0}),
                record(task, "reasoner", 1, reasoner_turn1, {"correct": reasoner_turn1})]

    given = shown_rows(skill_table, tmp_path, "math_arith.mas", episode("a", 1.0, 0.0) + episode("b", 0.0, 0.0),
                       episode("a", 1.0, 1.0) + episode("b", 0.0, 0.0))
    right, wrong = given["reasoner/correct, shown a right tool answer"], given["reasoner/correct, shown a wrong tool answer"]
    assert (right["before"]["rate"], right["after"]["rate"], right["after"]["n"]) == (0.0, 1.0, 1)
    assert (wrong["before"]["rate"], wrong["after"]["rate"]) == (0.0, 0.0)


def test_in_a_chain_the_second_role_was_shown_the_first_ones_answer_of_its_own_turn(skill_table, tmp_path):
    """`start -> tool -> reasoner` (math_arith_check): the reasoner at turn 0 read the tool's turn-0
    output, so its answer is split by that one; in a parallel group it would wait a turn."""

    def episode(task, tool_right, reasoner_right):
        return [record(task, "tool", 0, reasoner_right, {"answers": 1.0, "correct": tool_right}, node="tool"),
                record(task, "reasoner", 0, reasoner_right, {"correct": reasoner_right}, node="reasoner")]

    given = shown_rows(skill_table, tmp_path, "math_arith_check.mas",
                       episode("a", 1.0, 0.0) + episode("b", 0.0, 0.0) + episode("c", 1.0, 1.0),
                       episode("a", 1.0, 1.0) + episode("b", 0.0, 0.0) + episode("c", 1.0, 1.0))
    right, wrong = given["reasoner/correct, shown a right tool answer"], given["reasoner/correct, shown a wrong tool answer"]
    assert (right["before"]["rate"], right["after"]["rate"], right["after"]["n"]) == (0.5, 1.0, 2)
    assert (wrong["before"]["n"], wrong["after"]["rate"]) == (1, 0.0)
    assert not any(key.startswith("tool/") for key in given)  # the tool wrote first: it was shown nothing


def test_a_lora_policys_change_is_the_norm_of_what_its_adapter_adds(skill_table, tmp_path):
    import torch
    from safetensors.torch import save_file

    ckpt = tmp_path / "run" / "checkpoints" / "step_000003"
    (ckpt / "policies").mkdir(parents=True)
    (ckpt / "state.json").write_text("{}")
    (ckpt / "config.yaml").write_text("policy:\n  '*':\n    lora: {r: 2, alpha: 8}\n")
    a, b = torch.ones(2, 3), torch.zeros(4, 2)
    b[0, 0] = 1.0  # B @ A: one row of ones (3 entries); scale alpha / r = 4
    save_file({"m.lora_A.weight": a, "m.lora_B.weight": b}, str(ckpt / "policies" / "shared.safetensors"))
    save_file({"m.weight": torch.ones(2)}, str(ckpt / "policies" / "full.safetensors"))
    change = skill_table.adapter_change(tmp_path / "run")
    assert change == {"shared": pytest.approx(4 * 3 ** 0.5)}


def test_regrade_applies_todays_success_line_to_stored_episodes(skill_table, tmp_path):
    """A run graded by an older grader: `--regrade` re-evaluates `success` on the final fields."""
    import masdsl
    from masdsl.runtime.inputs import load_split

    wf = masdsl.load(ROOT / "workflows" / "math_arith.mas")
    tasks = [t for t in load_split(wf, "eval")][:3]
    run = tmp_path / "run"
    (run / "eval").mkdir(parents=True)
    shutil.copy(ROOT / "workflows" / "math_arith.mas", run / "workflow.mas")
    # stored 1 each time; the reasoner's answers: right, left as arithmetic (scores 0 today), wrong
    given = [str(tasks[0]["answer"]), "27 * 74 + 18 * 58", "-1"]
    rows = [record(t["id"], "reasoner", 0, 1.0, {"correct": 1.0}, {"answer": a}) for t, a in zip(tasks, given)]
    for step in ("step_000000", "step_000008"):
        (run / "eval" / f"{step}.jsonl").write_text("\n".join(rows) + "\n")
    stored = skill_table.compare(run, None)
    again = skill_table.compare(run, None, regrade=True)
    assert stored["success"]["after"]["rate"] == 1.0 and stored["grading"] == "stored"
    assert again["success"]["after"]["per_task"] == {tasks[0]["id"]: 1, tasks[1]["id"]: 0, tasks[2]["id"]: 0}
    assert again["grading"]["after"] == {"regraded": 3, "stored": 0, "changed": 2}
    lines = skill_table.answers(run / "eval" / "step_000008.jsonl")
    assert [line["replies"][0]["fields"]["answer"] for line in lines] == given
    assert {line["success"] for line in lines} == {1.0}


def test_a_pair_of_evaluations_outside_a_run(skill_table, tmp_path):
    """`--pair`: two evaluations of the same tasks (e.g. `masdsl eval` run folders) side by side;
    evaluations of different tasks are refused, not paired."""
    tasks = [f"arith/eval/{i}" for i in range(3)]
    before, after = tmp_path / "base" / "records.jsonl", tmp_path / "trained" / "records.jsonl"
    for path, right in ((before, 1), (after, 3)):
        path.parent.mkdir()
        path.write_text("".join(record(t, "tool", 0, float(i < right), {"correct": float(i < right)}) + "\n"
                                for i, t in enumerate(tasks)))
    row = skill_table.compare_files(before, after, ROOT / "workflows" / "math_arith.mas")
    assert row["tasks"] == 3 and row["success"]["before"]["rate"] == pytest.approx(1 / 3)
    assert (row["success"]["mcnemar"]["b"], row["success"]["mcnemar"]["c"]) == (0, 2)
    assert row["skills"]["tool/correct"]["turn0"]["after"]["rate"] == 1.0
    assert "| base->trained | 3 |" in skill_table.markdown([row])
    after.write_text(record(tasks[0], "tool", 0, 1.0) + "\n")
    with pytest.raises(SystemExit, match="different tasks"):
        skill_table.compare_files(before, after, ROOT / "workflows" / "math_arith.mas")


def test_curves_of_two_sweeps_trials_named_alike_keep_both_lines(skill_table):
    # every one-arm sweep names its trial `base,seed=0`: keyed by folder name, the second sweep's
    # curves replaced the first's in the image
    runs = [Path("w/single/trials/base,seed=0"), Path("w/per_role/trials/base,seed=0"), Path("runs/solo")]
    labels = [skill_table.curve_label(r, runs) for r in runs]
    assert labels == ["single/base,seed=0", "per_role/base,seed=0", "solo"]


def test_a_gain_taken_apart_by_kind_of_task(skill_table):
    tasks = ["rg/lcm/eval/0", "rg/lcm/eval/1", "rg/products/eval/0", "rg/products/eval/1"]

    def per_task(values):
        return {"per_task": dict(zip(tasks, values))}

    row = {"run": "rg_check", "success": {"before": per_task([1, 0, 0, 0]), "after": per_task([1, 0, 1, 1])},
           "skills": {"tool/correct": {"turn0": {"before": per_task([1, 0, 0, 0]), "after": per_task([0, 0, 1, 1])}}}}
    kinds = skill_table.by_kind(row)
    assert kinds == {"rg/lcm/eval": {"episode success": [1, 1, 2], "tool/correct, turn 0": [1, 0, 2]},
                     "rg/products/eval": {"episode success": [0, 2, 2], "tool/correct, turn 0": [0, 2, 2]}}
    table = skill_table.kinds_markdown([{**row, "by_kind": kinds}])
    assert "| rg/products/eval | 0 -> 2 of 2 | 0 -> 2 of 2 |" in table and "| rg/lcm/eval | 1 -> 1 of 2 | 1 -> 0 of 2 |" in table
