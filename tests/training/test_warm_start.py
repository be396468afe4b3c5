"""`masdsl warm-start`: the env's demonstrations, the supervised steps, the saved folder, its refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import masdsl
from masdsl.cli import main
from masdsl.config import resolve_config
from masdsl.envs.parsers import actions, code_block
from masdsl.envs.plan_path import PlanPathEnv, plan_path
from masdsl.plan.run_plan import resolve_rollout
from masdsl.sandbox import run_python
from masdsl.training import warm_start as ws
from tests.support.overrides import NO_TRACKING

ROOT = Path(__file__).resolve().parents[2]
HELPER = ROOT / "workflows" / "plan_path_helper.mas"
PLAN_PATH = ROOT / "workflows" / "plan_path.mas"

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/learner/conftest.py


@pytest.mark.parametrize("helper", [True, False])
def test_the_tool_demonstration_prints_a_shortest_path_and_the_planner_one_solves(helper):
    env = PlanPathEnv(helper=helper, gamma=1.0)
    for task in plan_path("train", n=6, size=5):
        state = env.reset(task)
        program = code_block(env.demonstration(state, "code"), "python")
        run = run_python(program, stdin=env.tool_stdin(state), modules=env.tool_modules(state))
        moves = json.loads(run.stdout)
        assert run.returncode == 0 and moves == json.loads(env.demonstration(state, "moves"))
        after = env.apply(state, "planner", {"moves": actions(env.demonstration(state, "moves")), "ok": True})
        assert env.success(after) and len(moves) == state.maze.dist[state.start[0]][state.start[1]]


def test_demonstrations_render_each_role_prompt_at_turn_0(tiny_model_dir):
    from masdsl.runtime.inputs import make_env
    from masdsl.models.load import load_model

    wf = masdsl.load(HELPER)
    cfg = resolve_config(wf.train, overrides=[NO_TRACKING])
    _, tok = load_model(tiny_model_dir)
    env = make_env(wf, cfg.sandbox)
    tasks = plan_path("train", n=3, size=5)
    data = ws.demonstrations(env, resolve_rollout(wf, cfg), tok, tasks, ["tool", "planner"])
    assert [(d.role, d.task_id) for d in data] == [(r, t["id"]) for t in tasks for r in ("tool", "planner")]
    tool, planner = data[0], data[1]
    assert "grid.shortest_path(board)" in tok.decode(tool.reply_ids)
    assert tok.decode(planner.reply_ids, skip_special_tokens=True) == env.demonstration(env.reset(tasks[0]), "moves")
    assert "A planning program printed" not in tok.decode(planner.prompt_ids)  # turn 0: the tool has not run
    assert all(d.reply_ids[-1] == tok.eos_token_id for d in data)


def test_supervised_steps_lower_the_loss_and_the_folder_loads(tiny_model_dir, tmp_path):
    from masdsl.models.load import load_model

    wf = masdsl.load(HELPER)
    cfg = resolve_config(wf.train, overrides=[NO_TRACKING, f"policy.shared.model={tiny_model_dir}"])
    steps = []
    info = ws.warm_start(resolve_rollout(wf, cfg), tmp_path / "warm", tasks=2, epochs=20, lr=3e-3,
                         on_step=lambda *a: steps.append(a))
    assert info.roles == ["tool", "planner"] and info.steps == 2 * 2 * 20 == len(steps)
    assert steps[-1][:2] == (80, 80)
    assert info.loss_last < 0.5 * info.loss_first  # a tiny random model memorises four replies
    saved = json.loads((tmp_path / "warm" / ws.INFO_FILE).read_text())
    assert saved["steps"] == 80 and saved["model"] == str(tiny_model_dir)
    model, _ = load_model(tmp_path / "warm")
    assert sum(p.numel() for p in model.parameters()) > 0


def test_the_same_seed_gives_the_same_weights(tiny_model_dir, tmp_path):
    import torch

    from masdsl.models.load import load_model

    wf = masdsl.load(HELPER)
    cfg = resolve_config(wf.train, overrides=[NO_TRACKING, f"policy.shared.model={tiny_model_dir}"])
    for name in ("a", "b"):
        ws.warm_start(resolve_rollout(wf, cfg), tmp_path / name, tasks=1, epochs=1, lr=1e-3, seed=3)
    a, b = (load_model(tmp_path / n)[0].state_dict() for n in ("a", "b"))
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("argv, message", [
    (["workflows/coder_tester.mas"], "env `code` has no demonstrations"),
    ([str(HELPER), "--roles", "coder"], "the workflow has no role `coder`; roles: tool, planner"),
    ([str(HELPER), "--tasks", "0"], "tasks and epochs must be >= 1"),
    ([str(ROOT / "workflows" / "plan_path_per_role.mas")], "use 2 policies"),
])
def test_refusals_exit_2_before_any_model_loads(tmp_path, capsys, monkeypatch, argv, message):
    import masdsl.models.load as models

    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(models, "load_model", lambda *a, **k: pytest.fail("loaded a model"))
    assert main(["warm-start", *argv, "--out", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_an_existing_warm_start_is_kept_unless_forced(tmp_path, capsys):
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / ws.INFO_FILE).write_text("{}")
    assert main(["warm-start", str(HELPER), "--out", str(tmp_path / "w")]) == 2
    assert "give --force to overwrite it" in capsys.readouterr().err
