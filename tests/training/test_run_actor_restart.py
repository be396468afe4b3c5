"""`masdsl run` with `runtime.ray=true`: the policy's inference engine lives in a Ray actor
(`RemoteEngine`), built there from the model folder, and gets the learner's weights after each
update. SIGKILLed in the middle of a `generate` after the first update, the actor is restarted,
gets the latest weights again and redoes the call; the run ends with the step records and
weights of an uninterrupted run with the same seed.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from masdsl.testing.cluster import kill_first_logged
from tests.support.overrides import NO_TRACKING
from tests.support.paths import COUNTER_DIR

DATA = COUNTER_DIR
TIMING = ("gen_s", "env_s")  # wall-clock fields of a record: the only ones allowed to differ


def _records(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]


def _weights(run_dir: Path, step: int) -> dict:
    from masdsl.training.checkpoint import policy_weights

    return policy_weights(run_dir / "checkpoints" / f"step_{step:06d}", "shared")


@pytest.mark.slow
def test_engine_actor_killed_mid_rollout_run_equals_uninterrupted_run(local_ray, tiny_model_dir, tmp_path,
                                                                      monkeypatch):
    # long: one scenario end to end (a run, its actor killed mid-rollout, the same run uninterrupted, compared)
    import torch

    import masdsl
    from masdsl.config import resolve_config
    from masdsl.plan.run_plan import resolve_run
    from masdsl.runtime import actors
    from masdsl.training import session
    from tests.support.toy import train_into

    wf = masdsl.load(str(DATA / "lengths.mas"))
    cfg = resolve_config(wf.train, None, ["runtime.ray=true", "runtime.engine=hf", f"policy.shared.model={tiny_model_dir}",
                                          NO_TRACKING, "train.steps=2", "train.seed=5"])
    built: list[dict] = []  # the engines each train() built
    real_build = session.build_engines
    monkeypatch.setattr(session, "build_engines", lambda plan, p: built.append(real_build(plan, p)) or built[-1])

    reference = train_into(resolve_run(wf, cfg), tmp_path / "reference")
    (engine,) = {id(e): e for e in built[0].values()}.values()
    assert isinstance(engine, actors.RemoteEngine) and engine.restarts == 0

    # the killed run: once step 1 is done, the engine's next generate logs its pid and sleeps,
    # and this test SIGKILLs the actor process during the sleep
    armed, log = tmp_path / "armed", tmp_path / "victim.json"

    def slow_first_armed_call(kind, model_path, kwargs, threads=None, armed=str(armed), log=str(log)):
        # runs inside the actor (pickled by value; there `actors` is not patched): wraps the real engine
        from masdsl.runtime.actors import engine_from_folder

        inner = engine_from_folder(kind, model_path, kwargs, threads)

        class Engine:
            tokenizer = inner.tokenizer

            def generate(self, requests):
                if os.path.exists(armed) and not os.path.exists(log):
                    with open(log + ".tmp", "w") as f:
                        json.dump({"pid": os.getpid(), "time": time.time()}, f)
                    os.replace(log + ".tmp", log)
                    time.sleep(2.0)
                return inner.generate(requests)

            def update_weights(self, state_dict):
                inner.update_weights(state_dict)

            def close(self):
                inner.close()

        return Engine()

    monkeypatch.setattr(actors, "engine_from_folder", slow_first_armed_call)
    thread, killed = kill_first_logged(log, delay_s=0.5, timeout_s=300)  # inside the sleep, before it generates
    run = train_into(resolve_run(wf, cfg), tmp_path / "run", on_step=lambda step, m: step == 1 and armed.touch())
    thread.join(timeout=5)
    (engine,) = {id(e): e for e in built[1].values()}.values()
    assert killed, "no generate call was seen to kill"
    assert engine.restarts == 1
    with pytest.raises(ProcessLookupError):
        os.kill(killed["pid"], 0)

    assert run.steps == reference.steps == 2
    ra, rb = _records(tmp_path / "reference"), _records(tmp_path / "run")
    assert len(ra) == len(rb) > 0 and {r["step"] for r in rb} == {1, 2}
    assert ra == rb
    a, b = _weights(tmp_path / "reference", 2), _weights(tmp_path / "run", 2)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert run.evals == reference.evals
    # the restarted engine got the updated weights: step 1's samples are not the initial model's
    from safetensors.torch import load_file

    (st,) = Path(tiny_model_dir).glob("*.safetensors")
    init = load_file(st)
    assert any(not torch.equal(init[k], a[k]) for k in init if k in a)
