"""A served env keeps its reward functions over masdsl's /v1 protocol: the Plan-Path workflow, its
`env` line pointed at `masdsl serve-env plan_path`, checks without a `wrong-env` error (its nine
reward terms and `solved()` read the env's state, which lives on the server) and rolls out with
the same rewards, success and prompts as with the env in process."""

from __future__ import annotations

import json

import pytest

import masdsl
from masdsl.config import resolve_config
from masdsl.envs.registry import load_builtins
from masdsl.lang.errors import MasError
from masdsl.runtime.backends.replay import ReplayEngine
from masdsl.runtime.executor import rollout
from tests.support.rollout_plans import plan_of
from masdsl.runtime.inputs import make_env
from tests.support.paths import ROOT
from tests.support.servers import serve_env

PLAN_PATH = ROOT / "workflows" / "plan_path.mas"
ENV_LINE = "env plan_path(gamma=1.0)"
TOOL = ["```python\nprint('[\"U\", \"L\"]')\n```", "no program", "```python\nraise SystemExit(3)\n```"]
PLANNER = ['["U", "L"]', '["D", "D", "R"]', "I give up"]


def plan_path(tmp_path, env_line: str) -> masdsl.Workflow:
    """workflows/plan_path.mas with `env ENV_LINE`, its data two generated train levels."""
    rows = load_builtins().data_sources["plan_path"].fn("train", n=2)
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = PLAN_PATH.read_text()
    assert ENV_LINE in text
    text = text.replace(ENV_LINE, f"env {env_line}")
    text = text.replace('data train plan_path("train", n=64)', 'data train "tasks.jsonl"')
    text = text.replace('data eval plan_path("eval", n=32)', 'data eval "tasks.jsonl"')
    (tmp_path / "w.mas").write_text(text)
    return masdsl.load(tmp_path / "w.mas")


def roll(tmp_path, wf):
    tasks = [json.loads(line) for line in (tmp_path / "tasks.jsonl").read_text().splitlines()]
    replay = tmp_path / "replay.jsonl"
    replay.write_text("".join(json.dumps({"task_id": t["id"], "role": role, "turn": turn, "outputs": outs}) + "\n"
                              for t in tasks for turn in range(6) for role, outs in (("tool", TOOL), ("planner", PLANNER))))
    env = make_env(wf, resolve_config().sandbox)
    return rollout(plan_of(wf, resolve_config(wf.train), samples=3), env, tasks, {"shared": ReplayEngine(replay)},
                   mode="train", step=0)


def summary(ro):
    return ([(r.task_id, r.role, r.turn, r.candidate, r.reward, r.selected, r.prompt_text, r.episode_success)
             for r in ro.records], [(e.task_id, e.success, e.team_reward, e.turns) for e in ro.episodes])


def test_plan_path_served_over_http_keeps_its_reward_functions(tmp_path):
    local = roll(tmp_path, plan_path(tmp_path, ENV_LINE.removeprefix("env ")))
    with serve_env("plan_path(gamma=1.0)", health="/v1/info") as url:
        wf = plan_path(tmp_path, f'http("{url}")')  # checks: the server serves `plan_path`, whose functions these are
        remote = roll(tmp_path, wf)
    assert not remote.errors and remote.env_lost == 0
    assert summary(remote) == summary(local)
    rewards = {r[4] for r in summary(local)[0]}
    assert len(rewards) > 3  # the tool's penalty, blocked moves, shaping: the terms differ between candidates


def test_a_served_env_whose_name_is_unknown_to_check_allows_bound_functions_and_others_refuse_them(tmp_path):
    # declared fields: the server is not asked, so which env it serves is unknown until the run
    wf = plan_path(tmp_path, 'http("http://127.0.0.1:9", fields=["board", "tool_output", "position", "goal", '
                             '"feedback", "legend", "size"])')
    assert wf.env == "http"
    with serve_env("sudoku", health="/v1/info") as url:  # sudoku has `step_penalty()` but no `distance_shaping()`
        with pytest.raises(MasError) as err:
            plan_path(tmp_path, f'http("{url}")')
    codes = {d.code for d in err.value.diagnostics}
    assert "wrong-env" in codes
    assert any("`distance_shaping` reads the state of environment" in d.message for d in err.value.diagnostics)
    assert not any("`step_penalty`" in d.message and d.code == "wrong-env" for d in err.value.diagnostics)
