"""`masdsl.startup`: processes masdsl starts itself leave scikit-learn out of transformers' import;
`import masdsl` and the Python API do not."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REPORT = ("from transformers.utils import is_sklearn_available; "
          "print(is_sklearn_available(), 'sklearn' in sys.modules and sys.modules['sklearn'] is not None)")


def python(code: str) -> str:
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def sklearn_installed():
    import importlib.util

    if importlib.util.find_spec("sklearn") is None:
        pytest.skip("scikit-learn is not installed: nothing to leave out")


def test_an_owned_process_loads_transformers_without_scikit_learn(sklearn_installed):
    owned = python("import sys; from masdsl.startup import start_owned_process; start_owned_process(); "
                   f"import transformers.models.llama.modeling_llama; {REPORT}")
    assert owned == "False False"
    # the same import in a process that is not masdsl's own (a user's, through the API): untouched
    user = python(f"import sys, masdsl, masdsl.api; import transformers.models.llama.modeling_llama; {REPORT}")
    assert user == "True True"


def test_the_masdsl_command_is_an_owned_process(sklearn_installed):
    out = python("import sys; sys.argv = ['masdsl', 'check', 'workflows/coder_tester.mas']; "
                 "from masdsl.cli import program; rc = program(); print(rc, sys.modules.get('sklearn', 'absent'))")
    assert out == "0 None"
    library = python("import sys; from masdsl.cli import main; rc = main(['check', 'workflows/coder_tester.mas']); "
                     "print(rc, sys.modules.get('sklearn', 'absent'))")
    assert library == "0 absent"  # `main(argv)` called as a library changes nothing


def sklearn_in(actor, ray) -> str:
    return ray.get(actor.__ray_call__.remote(lambda _: repr(sys.modules.get("sklearn", "absent"))))


def test_engine_and_learner_actors_are_owned_processes(tmp_path, local_ray, sklearn_installed):
    from masdsl.learner.workers import LearnerWorker
    from masdsl.runtime.actors import RemoteEngine
    from masdsl.runtime.backends.replay import ReplayEngine

    replay = tmp_path / "r.jsonl"
    replay.write_text("")
    engine = RemoteEngine(lambda: ReplayEngine(replay))
    try:
        assert sklearn_in(engine.actor, local_ray) == "None"
    finally:
        engine.close()
    worker = local_ray.remote(num_cpus=0)(LearnerWorker).remote(0, 1, 1)
    try:
        assert sklearn_in(worker, local_ray) == "None"
    finally:
        local_ray.kill(worker)
