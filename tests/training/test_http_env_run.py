"""A training run whose env is served over HTTP (issue 32, item 3) survives its server dying in the
middle of a step: the lost episodes score the env's penalty, are counted in `env_lost` (the step's
metrics and the evaluations') and the run finishes."""

from __future__ import annotations

import shutil
import threading

import pytest

import masdsl
from masdsl.config import resolve_config
from masdsl.envs.env_server import make_server
from masdsl.lang.imports import import_file
from masdsl.plan.run_plan import resolve_run

from tests.support.overrides import tiny_hf
from tests.support.toy import TOY, TOY_DIR, train_into

PENALTY = -2.0

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/learner/conftest.py


class Dying:
    """The toy env, served, whose server stops after `after` applies: the next apply answers 500
    and the server shuts down, so every later request is refused."""

    limits = None

    def __init__(self, env, after):
        self.env, self.after, self.applies, self.server = env, after, 0, None
        self._lock = threading.Lock()

    def apply(self, state, role, fields):
        with self._lock:
            self.applies += 1
            dead = self.applies > self.after
        if dead:
            threading.Thread(target=self.server.shutdown, daemon=True).start()
            raise RuntimeError("the simulator crashed")
        return self.env.apply(state, role, fields)

    def __getattr__(self, name):
        return getattr(self.env, name)


def test_a_run_survives_its_env_server_dying_and_counts_the_lost_episodes(tiny_model_dir, tmp_path):
    shutil.copy(TOY_DIR / "toy_env.py", tmp_path / "toy_env.py")
    module = import_file(tmp_path / "toy_env.py")
    # applies: evaluation before training 2 tasks x 2 roles, then per step 3 tasks x 2 candidates
    # x 2 roles; step 1's namer ends at 4 + 12 + 6 = 22, so its copier's applies all fail
    env = Dying(module.ToyDigits(), after=22)
    server = env.server = make_server(env, "toy_digits", ("said",))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    text = TOY.read_text().replace("env toy_digits", f'env http("{url}", retries=0, penalty={PENALTY})')
    wf = masdsl.loads(text, name="toy_http", base_dir=tmp_path)
    overrides = [*tiny_hf(tiny_model_dir), "train.steps=2",
                 "train.samples=2", "train.batch=3", "train.eval_tasks=2", "train.eval_every=0"]
    try:
        result = train_into(resolve_run(wf, resolve_config(wf.train, overrides=overrides)), tmp_path / "run")
    finally:
        server.server_close()
    assert [h["env_lost"] for h in result.history] == [0.0, 3.0]
    assert [e["env_lost/eval"] for e in result.evals] == [0.0, 2.0]  # the last evaluation: no server at all
    assert result.history[1]["reward/copier/turn0/mean"] == PENALTY
    assert result.history[0]["reward/copier/turn0/mean"] != PENALTY
