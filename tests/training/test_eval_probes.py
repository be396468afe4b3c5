"""Eval probes (`train.eval_probe`, masdsl/runtime/probes.py): a Plan-Path planner evaluated with
the tool's output removed from its prompt, or a wrong plan printed in its place."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import masdsl
from masdsl.config import ConfigError, resolve_config
from masdsl.envs.math import wrong_number
from masdsl.envs.plan_path import PlanPathEnv, make_maze, play, plan_path, shortest_path
from masdsl.envs.plan_path_probe import wrong_path
from masdsl.envs.rewards import equivalent
from masdsl.runtime.inputs import load_split
from masdsl.plan.run_plan import RunPlanError, resolve_rollout
from masdsl.runtime.records import read_records
from masdsl.training.evaluation import run_evaluation
from tests.support.overrides import NO_TRACKING

ROOT = Path(__file__).resolve().parents[2]
HELPER = ROOT / "workflows" / "plan_path_helper.mas"
PRINTED = "A planning program printed:"  # the planner prompt's line before `env.tool_output`


@pytest.mark.parametrize("size, n", [(5, 64), (10, 32)])
def test_the_wrong_plan_is_legal_and_never_reaches_the_goal(size, n):
    for task in plan_path("eval", n=n, size=size):
        maze = make_maze(task["grid"].splitlines(), tuple(task["goal"]))
        start = tuple(task["start"])
        moves = wrong_path(maze, start)
        walked = play(maze, start, moves, gamma=1.0)
        assert moves and not walked.blocked and walked.executed == len(moves)  # looks like a real plan
        assert walked.after != maze.goal and moves != shortest_path(maze, start)
        assert wrong_path(maze, start) == moves  # deterministic


def _replay(tmp_path: Path, tasks: list[dict]) -> Path:
    """The tool replies with the env's own program (it prints the shortest path), the planner with ["U"]."""
    env = PlanPathEnv(helper=True, gamma=1.0)
    path = tmp_path / "replay.jsonl"
    rows = [{"task_id": t["id"], "role": "tool", "turn": 0, "output": env.demonstration(env.reset(t), "code")}
            for t in tasks] + [{"task_id": t["id"], "role": "planner", "turn": 0, "output": '["U"]'} for t in tasks]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _planner_prompts(result) -> dict[str, str]:
    return {r.task_id: r.prompt_text for r in read_records(result.records) if r.role == "planner"}


def test_probes_change_what_the_planner_is_shown_and_nothing_else(tmp_path):
    """Replayed replies make the tool's output the true shortest path: plain, the planner's prompt
    shows it; `no_tool_output` drops the whole block; `wrong_plan` shows the env's wrong plan
    instead. The tool's own scoring is the same under every probe."""
    wf = masdsl.load(HELPER)
    tasks = load_split(wf, "eval")[:3]
    replay = _replay(tmp_path, tasks)
    env = PlanPathEnv(helper=True, gamma=1.0)
    results = {}
    for probe in ("none", "no_tool_output", "wrong_plan"):
        cfg = resolve_config(wf.train, overrides=["runtime.engine=replay", f"runtime.replay_file={replay}",
                                                  f"runtime.runs_dir={tmp_path / probe}", NO_TRACKING,
                                                  f"train.eval_probe={probe}"])
        results[probe] = run_evaluation(resolve_rollout(wf, cfg), tasks)
    for t in tasks:
        state = env.reset(t)
        truth = json.dumps(shortest_path(state.maze, state.start))
        plain, removed, wrong = (_planner_prompts(results[p])[t["id"]] for p in ("none", "no_tool_output", "wrong_plan"))
        assert f"{PRINTED}\n{truth}" in plain
        assert PRINTED not in removed and truth not in removed
        assert f"{PRINTED}\n{env.wrong_plan(state)}" in wrong and truth not in wrong
        assert removed.replace("\n", "") in plain.replace("\n", "").replace(PRINTED + truth, "")  # the rest is the same
    tool = {p: [r.reward for r in read_records(res.records) if r.role == "tool"] for p, res in results.items()}
    assert tool["none"] == tool["no_tool_output"] == tool["wrong_plan"] and min(tool["none"]) > 1.0
    summary = json.loads((results["wrong_plan"].run_dir / "summary.json").read_text())
    assert summary["probe"] == "wrong_plan"


@pytest.mark.parametrize("probe", ["no_tool_output", "wrong_plan"])
def test_masdsl_eval_runs_a_probe_on_the_tiny_model(probe, tiny_model_dir, tmp_path, capsys):
    from masdsl.cli import main

    code = main(["eval", str(HELPER), "--tasks", "2", "runtime.engine=hf", f"policy.shared.model={tiny_model_dir}",
                 f"runtime.runs_dir={tmp_path}", NO_TRACKING, "sample.*.max_tokens=8",
                 f"train.eval_probe={probe}"])
    assert code == 0
    assert f"probe {probe}" in capsys.readouterr().err
    (summary,) = tmp_path.glob("*/*/summary.json")
    records = list(read_records(summary.parent / "records.jsonl"))
    env = PlanPathEnv(helper=True, gamma=1.0)
    tasks = {t["id"]: t for t in plan_path("eval", n=2, size=5)}
    planner = [r for r in records if r.role == "planner"]
    assert len(planner) == 2 and all(r.task_id in tasks for r in planner)
    for r in planner:
        shown = env.wrong_plan(env.reset(tasks[r.task_id]))
        assert (f"{PRINTED}\n{shown}" in r.prompt_text) == (probe == "wrong_plan")
        assert (PRINTED in r.prompt_text) == (probe == "wrong_plan")


def test_a_probe_the_env_cannot_serve_is_refused_before_anything_starts():
    coder = masdsl.load(ROOT / "workflows" / "coder_tester.mas")
    with pytest.raises(RunPlanError, match="env `code` has no such field"):
        resolve_rollout(coder, resolve_config(coder.train, overrides=["train.eval_probe=no_tool_output"]))
    sokoban = masdsl.load(ROOT / "workflows" / "sokoban.mas")
    with pytest.raises(RunPlanError, match="needs an env that writes a wrong plan"):
        resolve_rollout(sokoban, resolve_config(sokoban.train, overrides=["train.eval_probe=wrong_plan"]))
    with pytest.raises(RunPlanError, match="needs an env that writes a wrong number"):
        resolve_rollout(sokoban, resolve_config(sokoban.train, overrides=["train.eval_probe=wrong_number"]))
    with pytest.raises(ConfigError, match="`train.eval_probe` must be one of none, no_tool_output, wrong_plan, wrong_number"):
        resolve_config(overrides=["train.eval_probe=wrong"])


def test_wrong_number_shows_the_reasoner_a_wrong_number_and_scores_the_same(tmp_path):
    """math_arith: the tool prints the right answer, the reasoner first boxes nothing useful; at
    turn 1 the reasoner is shown the program's output. `wrong_number` prints the env's wrong
    number there instead (`masdsl.envs.math.wrong_number`); the tool's rewards are unchanged."""
    wf = masdsl.load(ROOT / "workflows" / "math_arith.mas")
    tasks = load_split(wf, "eval")[:3]
    replay = tmp_path / "replay.jsonl"
    rows = [{"task_id": t["id"], "role": "tool", "turn": turn, "output": f"```python\nprint({t['answer']})\n```"}
            for t in tasks for turn in (0, 1, 2)]
    rows += [{"task_id": t["id"], "role": "reasoner", "turn": turn, "output": "\\boxed{-1}"} for t in tasks for turn in (0, 1, 2)]
    replay.write_text("".join(json.dumps(r) + "\n" for r in rows))
    results = {}
    for probe in ("none", "wrong_number"):
        cfg = resolve_config(wf.train, overrides=["runtime.engine=replay", f"runtime.replay_file={replay}",
                                                  f"runtime.runs_dir={tmp_path / probe}", NO_TRACKING,
                                                  f"train.eval_probe={probe}"])
        results[probe] = run_evaluation(resolve_rollout(wf, cfg), tasks)
    shown = "A Python program printed:"
    for probe, result in results.items():
        turn1 = {r.task_id: r.prompt_text for r in read_records(result.records) if r.role == "reasoner" and r.turn == 1}
        assert set(turn1) == {t["id"] for t in tasks}
        for t in tasks:
            number = t["answer"] if probe == "none" else wrong_number(t["answer"])
            assert f"{shown} {number}\n" in turn1[t["id"]]
            assert probe == "none" or not equivalent(number, t["answer"])
    tool = {p: [r.reward for r in read_records(res.records) if r.role == "tool"] for p, res in results.items()}
    assert tool["none"] == tool["wrong_number"] and min(tool["none"]) == 1.0
