"""`runtime.engine_replicas`: several engine actors per policy behind one `ReplicatedEngine`.

Real engines (the tiny hf model) in real Ray actors. Each actor logs, in a file, the pid that
served every request and every sleep / wake-up it got, so the tests see which replica did what.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest
import torch

from masdsl.runtime.actors import RemoteEngine, engine_from_folder
from masdsl.runtime.backends.base import GenRequest
from masdsl.runtime.replicas import ReplicatedEngine, request_cost, split_balanced
from tests.support.overrides import NO_TRACKING
from tests.support.paths import COUNTER_DIR

DATA = COUNTER_DIR


def logged_factory(model_dir: str, log: str):
    """A factory for `RemoteEngine`: the hf engine of `model_dir`, logging to `log` what it serves."""
    threads = torch.get_num_threads()

    def build(kind, model_path, kwargs, threads_=None, log=log):
        # runs inside the actor (pickled by value: defined in a function)
        import os

        from masdsl.runtime.backends.base import LocalEngine

        inner = engine_from_folder(kind, model_path, kwargs, threads_)

        def note(line: str) -> None:
            with open(log, "a") as f:
                f.write(f"{os.getpid()} {line}\n")

        class Logged(LocalEngine):  # an Engine: its sleep and wake_up are its own
            tokenizer = inner.tokenizer

            def generate(self, requests):
                for r in requests:
                    note(f"seed {r.seed}")
                return inner.generate(requests)

            def update_weights(self, state_dict):
                note("weights")
                inner.update_weights(state_dict)

            def sleep(self, level=1):
                note(f"sleep {level}")

            def wake_up(self):
                note("wake")

            def close(self):
                inner.close()

        return Logged()

    return build, threads


def _log(path: Path) -> dict[str, list[str]]:
    """{pid: [what it did, in order]}."""
    out: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        pid, what = line.split(" ", 1)
        out.setdefault(pid, []).append(what)
    return out


def _requests(temperature: float) -> list[GenRequest]:
    return [GenRequest(list(range(3, 8 + 3 * i)), n=2, temperature=temperature, max_tokens=6, seed=100 + i)
            for i in range(5)]


def _tokens(results):
    return [[c.token_ids for c in cands] for cands in results]


def _logprobs(results):
    return [[c.logprobs for c in cands] for cands in results]


def test_two_replicas_share_the_work_and_sample_what_one_engine_samples(tiny_model_dir, tmp_path, ray_session):
    log = tmp_path / "served.log"
    build, threads = logged_factory(str(tiny_model_dir), str(log))
    kw = {"seed": 0}
    one = RemoteEngine(partial(engine_from_folder, "hf", str(tiny_model_dir), kw, threads))
    two = ReplicatedEngine([RemoteEngine(partial(build, "hf", str(tiny_model_dir), kw, threads)) for _ in range(2)])
    try:
        # greedy: the same tokens as one engine; log-probs up to float noise (another batch shape)
        greedy = _requests(0.0)
        a, b = one.generate(greedy), two.generate(greedy)
        assert _tokens(a) == _tokens(b) and len(a) == len(greedy)
        assert all(torch.allclose(torch.tensor(x), torch.tensor(y), atol=1e-5)
                   for ra, rb in zip(_logprobs(a), _logprobs(b)) for x, y in zip(ra, rb))
        # sampled: each replica samples its part as one engine given that part (the hf engine seeds a
        # batch from all its requests' seeds, so one engine given every request samples otherwise)
        sampled = _requests(1.0)
        parts = split_balanced([request_cost(r) for r in sampled], 2)
        assert [len(p) for p in parts] == [3, 2]
        expected = [c for p in parts for c in one.generate([sampled[i] for i in p])]
        got = two.submit(sampled).result()
        assert _tokens(got) == _tokens(expected) and _logprobs(got) == _logprobs(expected)
        # both actors served: each its own contiguous part, with the requests' own seeds
        served = _log(log)
        assert len(served) == 2
        seeds = sorted(served.values())
        assert seeds == [["seed 100", "seed 101", "seed 102"] * 2, ["seed 103", "seed 104"] * 2]
        assert two.served == [6, 4]
        two.sleep()
        two.wake_up()
        assert all(d[-2:] == ["sleep 1", "wake"] for d in _log(log).values())
    finally:
        one.close()
        two.close()


@pytest.mark.slow
def test_training_with_two_replicas_syncs_new_weights_into_both(local_ray, tiny_model_dir, tmp_path, monkeypatch):
    import masdsl
    from masdsl.config import resolve_config
    from masdsl.plan.run_plan import resolve_run
    from masdsl.runtime import actors
    from masdsl.runtime.backends.hf import HFEngine
    from masdsl.models.load import load_model
    from masdsl.training import session
    from masdsl.training.checkpoint import policy_weights
    from tests.support.toy import train_into

    log = tmp_path / "served.log"
    build, _ = logged_factory(str(tiny_model_dir), str(log))
    monkeypatch.setattr(actors, "engine_from_folder", build)
    built: list[dict] = []
    real_build = session.build_engines
    monkeypatch.setattr(session, "build_engines", lambda plan, p: built.append(real_build(plan, p)) or built[-1])
    wf = masdsl.load(str(DATA / "lengths.mas"))
    cfg = resolve_config(wf.train, None, ["runtime.ray=true", "runtime.engine=hf", "runtime.engine_replicas=2",
                                          f"policy.shared.model={tiny_model_dir}", NO_TRACKING,
                                          "train.steps=1", "train.seed=5"])
    probe = [GenRequest(list(range(3, 12)), n=1, temperature=0.0, max_tokens=6, seed=1)]
    seen: dict[str, list] = {}

    def after_step(step, metrics):  # the engines are synced and the final checkpoint saved
        (engine,) = {id(e): e for e in built[0].values()}.values()
        assert isinstance(engine, ReplicatedEngine) and len(engine.replicas) == 2
        seen["replicas"] = [r.generate(probe) for r in engine.replicas]
        seen["served"] = list(engine.served)

    run = train_into(resolve_run(wf, cfg), tmp_path / "run", on_step=after_step)
    assert run.steps == 1 and min(seen["served"]) > 0
    trained = policy_weights(tmp_path / "run" / "checkpoints" / "step_000001", "shared")

    def local(state):
        model, tok = load_model(tiny_model_dir)
        if state is not None:
            model.load_state_dict(state)
        return HFEngine(model, tok, seed=0).generate(probe)

    new, old = local(trained), local(None)
    change = (torch.tensor(new[0][0].logprobs) - torch.tensor(old[0][0].logprobs)).abs().max()
    assert change > 1e-3  # the step changed the weights
    for got in seen["replicas"]:  # each replica samples from the trained weights
        assert _tokens(got) == _tokens(new)
        assert torch.allclose(torch.tensor(got[0][0].logprobs), torch.tensor(new[0][0].logprobs), atol=1e-5)
    served = _log(log)
    assert len(served) == 2 and all("weights" in d for d in served.values())
