"""`masdsl serve-env --openenv`: its options and their mistakes. A bad `--reward`, an unknown
`--data` source, and `--reward`/`--data` without `--openenv` are each one clear message (exit 2,
no traceback); the served rows and the default rewards are the env's own; an OpenEnv server's
log stays free of a traceback per ended episode (the servers' rewards: tests/envs/test_openenv.py)."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from masdsl.commands import serve_env
from masdsl.envs.registry import load_builtins
from masdsl.errors import UserError


def args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    serve_env.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_reward_and_data_belong_to_openenv():
    with pytest.raises(UserError, match=r"--reward and --data are for --openenv"):
        serve_env.prepare(args("plan_path", "--reward", "step_reward()"))


def test_data_names_a_source_with_literal_arguments():
    rows = serve_env.rows_of('plan_path("eval", n=3)', "plan_path")
    assert [r["id"] for r in rows] == [r["id"] for r in load_builtins().data_sources["plan_path"].fn("eval", n=3)]
    assert len(serve_env.rows_of(None, "sudoku")) == len(load_builtins().data_sources["sudoku"].fn("train"))
    assert serve_env.rows_of(None, "code") == []  # no source of that name: a reset must send its task
    with pytest.raises(UserError, match=r"unknown data source `plan_pth` \(did you mean `plan_path`\?\)"):
        serve_env.rows_of("plan_pth(\"train\")", "plan_path")


def test_a_bad_reward_is_refused_before_serving():
    pytest.importorskip("openenv.core")
    from masdsl.commands.serve_env_body import DEFAULT_REWARDS, reward_expr

    assert reward_expr(DEFAULT_REWARDS["code"]).source == "pass_rate(code, task.tests)"
    with pytest.raises(UserError, match=r"--reward `stp_reward\(\)`: unknown function `stp_reward`"):
        reward_expr("stp_reward()")
    with pytest.raises(UserError, match=r"--reward `step_reward\(\) \+` is not an expression"):
        reward_expr("step_reward() +")


def test_the_command_line_says_what_is_wrong_without_a_traceback():
    pytest.importorskip("openenv.core")
    p = subprocess.run([sys.executable, "-m", "masdsl", "serve-env", "--openenv", "sudoku", "--reward", "solvd()",
                        "--port", "0"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "unknown function `solvd`" in p.stderr and "Traceback" not in p.stderr


def test_the_openenv_server_ends_episodes_without_a_traceback_in_its_log():
    pytest.importorskip("openenv.core")
    from openenv.core import GenericEnvClient

    proc = subprocess.Popen([sys.executable, "-m", "masdsl", "serve-env", "--openenv", "sudoku", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().split(" on ")[1].split()[0]
        for seed in range(3):  # each client closes its session: openenv-core's handler then raised into uvicorn's log
            with GenericEnvClient(base_url=url, connect_timeout_s=30).sync() as client:
                assert client.reset(seed=seed).observation["size"] == 4
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "Traceback" not in err and "WebSocketDisconnect" not in err, err[-2000:]
