"""OpenEnv in both directions, against real servers started here (`masdsl serve-env --openenv` and
a plain openenv-core server, each in its own process):

- an openenv-core client (`GenericEnvClient`) plays 20 seeded episodes of each masdsl env served
  over OpenEnv and gets the rewards and success the env gives in process;
- `env openenv(URL)` rolls a workflow out on a served env with the same records as the env in
  process (the K candidates of a step branch by replaying the episode), drives a server that is
  not masdsl's (its action schema picks the fields sent), loses episodes with a clear message
  when the server is gone, and masdsl trains one step on the tiny model against an OpenEnv server.
"""

from __future__ import annotations

import json
import pickle
import random
import subprocess
import sys

import pytest

import masdsl
from masdsl.commands.serve_env import resolve, rows_of
from masdsl.config import SandboxConfig, resolve_config
from masdsl.envs import games_common
from masdsl.envs.openenv_client import OpenEnvEnv
from masdsl.envs.registry import load_builtins
from masdsl.envs.rewards import correct, pass_rate
from masdsl.errors import UserError
from masdsl.lang.errors import MasError
from masdsl.runtime.backends.replay import ReplayEngine
from masdsl.runtime.executor import rollout
from tests.support.rollout_plans import plan_of
from masdsl.runtime.inputs import make_env
from masdsl.sandbox import limits_from_config
from tests.support.paths import ROOT
from tests.support.servers import serve_env

pytest.importorskip("openenv.core")
from openenv.core import GenericEnvClient  # noqa: E402 - after the skip

EPISODES = 20
WORD_SERVER = ROOT / "tests" / "envs" / "data" / "word_openenv.py"


def _moves(rng, task):
    return {"moves": [rng.choice("UDLR") for _ in range(rng.randint(0, 4))]}


def _grid(rng, task):
    """The puzzle with its empty cells filled at random (and, one time in five, a given changed)."""
    grid = [[v or rng.randint(1, 4) for v in row] for row in task["puzzle"]]
    if rng.random() < 0.2:
        grid[0][0] = grid[0][0] % 4 + 1
    return {"grid": grid}


# env (as serve-env takes it), --data, the acting role, a seeded action, the in-process reward
GAMES = {
    "plan_path(gamma=1.0)": (None, "planner", _moves, lambda state, task, f: games_common.step_reward(state)),
    "sokoban": (None, "planner", _moves, lambda state, task, f: games_common.step_reward(state)),
    "sudoku": (None, "planner", _grid, lambda state, task, f: games_common.step_reward(state)),
    "math(answer_role=\"solver\")": ('arith_words("train", n=40)', "solver",
                                     lambda rng, task: {"answer": rng.choice([task["answer"], "12"])},
                                     lambda state, task, f: correct(f["answer"], task["answer"])),
}
STEPS = 3


def served(target, data):
    """The env `serve-env` makes of `target`, and the rows a seed picks from."""
    env, name, _ = resolve(target)
    return env, rows_of(data, name)


def in_process(target, data, role, act, reward, seed):
    """(rewards, success) of one episode of `target` played in process with the actions of `seed`."""
    env, rows = served(target, data)
    task = rows[seed % len(rows)]
    rng, state, rewards = random.Random(seed), env.reset(task), []
    for _ in range(STEPS):
        fields = {"output": "", "ok": True, **act(rng, task)}
        state = env.apply(state, role, fields)
        rewards.append(float(reward(state, task, fields)))
    return rewards, float(env.success(state))


def over_openenv(client, rows, role, act, seed):
    rng, rewards, task = random.Random(seed), [], rows[seed % len(rows)]  # the row the seed picks, for the actions
    result = client.reset(seed=seed)
    assert result.reward is None and result.done is False
    for _ in range(STEPS):
        result = client.step({"role": role, "fields": act(rng, task)})
        rewards.append(result.reward)
    return rewards, result.observation["success"]


@pytest.mark.parametrize("target", list(GAMES))
def test_an_openenv_client_gets_the_in_process_rewards_on_20_seeded_episodes(target):
    data, role, act, reward = GAMES[target]
    expected = [in_process(target, data, role, act, reward, seed) for seed in range(EPISODES)]
    with serve_env("--openenv", target, *(("--data", data) if data else ())) as url:
        with GenericEnvClient(base_url=url).sync() as client:
            rows = served(target, data)[1]
            got = [over_openenv(client, rows, role, act, seed) for seed in range(EPISODES)]
    assert got == expected
    assert len({r for rewards, _ in expected for r in rewards}) >= 2  # the actions score differently


def test_the_code_env_over_openenv_scores_its_tests_as_in_process():
    rows = load_builtins().data_sources["humaneval"].fn("train")[:3]
    limits = limits_from_config(SandboxConfig())
    codes = [rows[0]["solution"], "def nothing():\n    return 1\n", ""]
    expected = [pass_rate(c, rows[0]["tests"], limits=limits) for c in codes]
    with serve_env("--openenv", "code", "--data", 'humaneval("train")') as url:
        with GenericEnvClient(base_url=url).sync() as client:
            got = []
            for code in codes:
                assert client.reset(seed=0).observation["code"] == ""
                result = client.step({"role": "coder", "fields": {"code": code}})
                got.append((result.reward, result.done))
    assert got == [(expected[0], True), (expected[1], False), (expected[2], False)]
    assert expected[0] == 1.0 and expected[1] == 0.0


WORKFLOW = """\
workflow pp_open "A planner walks the Plan-Path board served over OpenEnv."
env {env}
data train "tasks.jsonl"
data eval "tasks.jsonl"
policy shared {{ model: "smollm2-135m-instruct" }}
role planner {{
  policy shared
  prompt "Walk from A to G. {{{{ env.board }}}} Reply with moves as JSON, like [\\"U\\"]."
  sample {{ max_tokens: 6 }}
  parse moves = actions(output)
  reward {reward}
}}
flow {{
  max_turns 2
  start -> planner
  planner -> end when {done}
  planner -> planner
}}
success {done}
train {{ samples: 3, batch: 2, steps: 1, eval_tasks: 1 }}
"""
OPENENV = {"reward": "env.reward", "done": "env.done"}
IN_PROCESS = {"env": "plan_path(gamma=1.0)", "reward": "step_reward()", "done": "solved()"}


def workflow(tmp_path, **parts):
    rows = load_builtins().data_sources["plan_path"].fn("train", n=2)
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "w.mas").write_text(WORKFLOW.format(**parts))
    return masdsl.load(tmp_path / "w.mas")


def roll(tmp_path, wf, env=None, outputs=('["U", "L"]', '["D", "R", "R"]', "no moves")):
    tasks = [json.loads(line) for line in (tmp_path / "tasks.jsonl").read_text().splitlines()]
    replay = tmp_path / "replay.jsonl"
    replay.write_text("".join(json.dumps({"task_id": t["id"], "role": "planner", "turn": n, "outputs": list(outputs)}) + "\n"
                              for t in tasks for n in range(2)))
    env = env or make_env(wf, resolve_config().sandbox)
    return rollout(plan_of(wf, resolve_config(wf.train), samples=3), env, tasks, {"shared": ReplayEngine(replay)},
                   mode="train", step=0)


def summary(ro):
    return ([(r.task_id, r.turn, r.candidate, r.reward, r.selected, r.prompt_text, r.episode_success) for r in ro.records],
            [(e.task_id, e.success, e.team_reward, e.turns) for e in ro.episodes])


@pytest.fixture(scope="module")
def plan_path_server():
    with serve_env("--openenv", "plan_path(gamma=1.0)") as url:
        yield url


def test_a_workflow_on_an_openenv_server_rolls_out_as_in_process(tmp_path, plan_path_server):
    local = roll(tmp_path, workflow(tmp_path, **IN_PROCESS))
    wf = workflow(tmp_path, env=f'openenv("{plan_path_server}")', **OPENENV)
    remote = roll(tmp_path, wf)
    assert not remote.errors and remote.env_lost == 0
    assert summary(remote) == summary(local)
    # the 3 candidates of a step each moved from the same state (replayed in sessions of their own)
    first = local.records[0].task_id
    assert len({r.reward for r in local.records if (r.task_id, r.turn) == (first, 0)}) == 3


def test_check_reads_the_fields_from_the_servers_schema(tmp_path, plan_path_server):
    with pytest.raises(MasError) as err:
        workflow(tmp_path, env=f'openenv("{plan_path_server}")', reward="env.rewrd", done="env.done")
    [diag] = err.value.diagnostics
    assert diag.code == "unknown-field" and "did you mean `env.reward`?" in str(err.value)
    with pytest.raises(MasError, match="no OpenEnv server answers"):
        workflow(tmp_path, env='openenv("http://127.0.0.1:9")', **OPENENV)
    wf = workflow(tmp_path, env='openenv("http://127.0.0.1:9", fields=["board"])', **OPENENV)
    assert wf.env == "openenv"


class StoppingEngine(ReplayEngine):
    """Replays, and stops the server (leaves its `serve_env` context) before sampling turn 1."""

    def __init__(self, path, server):
        super().__init__(path)
        self.server = server

    def generate(self, requests):
        if requests and requests[0].key[2] == 1 and self.server is not None:
            self.server.__exit__(None, None, None)
            self.server = None
        return super().generate(requests)


def test_a_server_that_goes_away_loses_the_episode_with_its_penalty(tmp_path):
    server = serve_env("--openenv", "plan_path(gamma=1.0)")
    url = server.__enter__()
    try:
        wf = workflow(tmp_path, env=f'openenv("{url}", penalty=-7, timeout_s=3)', **OPENENV)
        roll(tmp_path, wf)  # writes the replay file
        tasks = [json.loads(line) for line in (tmp_path / "tasks.jsonl").read_text().splitlines()]
        ro = rollout(plan_of(wf, resolve_config(wf.train), samples=3), make_env(wf, resolve_config().sandbox), tasks,
                     {"shared": StoppingEngine(tmp_path / "replay.jsonl", server)},
                     mode="train", step=0)
    finally:
        server.__exit__(None, None, None)
    unsolved = {r.task_id for r in ro.records if r.turn == 1}
    assert unsolved and ro.env_lost == len(unsolved)
    assert {r.reward for r in ro.records if r.turn == 1} == {-7.0}
    assert all(url in e.lost and e.success == 0.0 for e in ro.episodes if e.task_id in unsolved)


def test_a_plain_openenv_server_gets_the_fields_its_action_names(tmp_path):
    proc = subprocess.Popen([sys.executable, str(WORD_SERVER)], stdout=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().strip()
        (tmp_path / "tasks.jsonl").write_text('{"id": "w1", "seed": 0}\n{"id": "w2", "seed": 1}\n')
        (tmp_path / "w.mas").write_text(f"""\
workflow words "Guess the word."
import "{WORD_SERVER}"
env openenv("{url}")
data train "tasks.jsonl"
data eval "tasks.jsonl"
policy shared {{ model: "smollm2-135m-instruct" }}
role guesser {{
  policy shared
  prompt "Guess a {{{{ env.length }}}}-letter word. {{{{ env.hint }}}}"
  parse guess = first_word(output)
  parse note = first_word(output)
  reward env.reward
}}
flow {{
  max_turns 2
  start -> guesser
  guesser -> end when env.done
  guesser -> guesser
}}
""")
        wf = masdsl.load(tmp_path / "w.mas")
        tasks = [{"id": "w1", "seed": 0}, {"id": "w2", "seed": 1}]
        replay = tmp_path / "replay.jsonl"
        replay.write_text("".join(json.dumps({"task_id": t, "role": "guesser", "turn": n, "outputs": ["apple pie", "grape", "x"]})
                                  + "\n" for t in ("w1", "w2") for n in range(2)))
        ro = rollout(plan_of(wf, resolve_config(wf.train), samples=3), make_env(wf, resolve_config().sandbox), tasks,
                     {"shared": ReplayEngine(replay)},
                     mode="train", step=0)
    finally:
        proc.kill()
        proc.wait()
    assert not ro.errors and ro.env_lost == 0  # `note` (not in the action schema) was not sent
    by = {(r.task_id, r.turn, r.candidate): r.reward for r in ro.records}
    # seed 0's word is "apple" (solved at once), seed 1's "grape" (the first guess shares 1 letter)
    assert by["w1", 0, 0] == 1.0 and ("w1", 1, 0) not in by
    assert by["w2", 0, 1] == 1.0 and by["w2", 0, 0] == 0.2 and by["w2", 0, 2] == 0.0
    assert [e.success for e in ro.episodes] == [1.0, 1.0]


def test_env_openenv_refuses_a_field_the_server_lacks_and_pickles_without_its_sessions(plan_path_server):
    with pytest.raises(UserError, match="the server's observation has no field `bord`"):
        OpenEnvEnv(plan_path_server, fields=["bord"])
    env = OpenEnvEnv(plan_path_server)
    state = env.reset(load_builtins().data_sources["plan_path"].fn("train", n=1)[0])
    copy = pickle.loads(pickle.dumps(env))  # as Ray sends it to an env worker
    assert not copy._idle and env._idle
    moved = copy.apply(state, "planner", {"moves": ["U"], "ok": True, "output": ""})  # replayed in a new session
    assert moved.lost is None and moved.view == env.apply(state, "planner", {"moves": ["U"], "ok": True, "output": ""}).view
    env.close()
    copy.close()


def test_masdsl_trains_one_step_on_an_openenv_server(tmp_path, plan_path_server, tiny_model_dir, one_thread):
    from masdsl.plan.run_plan import resolve_run
    from tests.support.toy import train_into
    from tests.support.toy import toy_config

    wf = workflow(tmp_path, env=f'openenv("{plan_path_server}")', **OPENENV)
    result = train_into(resolve_run(wf, toy_config(wf, tiny_model_dir)), tmp_path / "run")
    assert result.steps == 1
    records = [json.loads(line) for line in (tmp_path / "run" / "records.jsonl").read_text().splitlines()]
    assert len(records) >= 2 * 3 and all("A" in r["prompt_text"] and "G" in r["prompt_text"] for r in records)
    assert all(isinstance(r["reward"], float) for r in records)
