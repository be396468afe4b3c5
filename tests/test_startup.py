"""`masdsl.startup`: processes masdsl starts itself import transformers without scikit-learn, yet
scikit-learn stays importable and transformers' use of it still works; `import masdsl` and the
Python API change nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LOADED = "print('sklearn' in sys.modules)"
MODEL_IMPORT = "import transformers.models.llama.modeling_llama"
DEFERRING = "print(any(type(f).__name__ == 'DeferImports' for f in sys.meta_path))"


def python(code: str) -> list[str]:
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout.split()


@pytest.fixture(scope="module")
def sklearn_installed():
    import importlib.util

    if importlib.util.find_spec("sklearn") is None:
        pytest.skip("scikit-learn is not installed: nothing to defer")


def test_an_owned_process_defers_scikit_learn_until_it_is_used(sklearn_installed):
    out = python("import sys; from masdsl.startup import start_owned_process; start_owned_process(); "
                 f"{MODEL_IMPORT}; {LOADED}; "
                 "from transformers.generation import candidate_generator as cg; "
                 "fpr, tpr, _ = cg.roc_curve([0, 1, 1], [0.2, 0.6, 0.9]); "  # imports scikit-learn's now
                 f"{LOADED}; import sklearn.metrics, sklearn.svm; "
                 "print(tpr.tolist() == sklearn.metrics.roc_curve([0, 1, 1], [0.2, 0.6, 0.9])[1].tolist(), "
                 "sklearn.svm.SVC.__name__)")
    assert out == ["False", "True", "True", "SVC"]


def test_import_masdsl_defers_nothing():
    """A user's process (the Python API) imports as it always did."""
    assert python(f"import sys, masdsl, masdsl.api; {DEFERRING}") == ["False"]


def test_the_masdsl_command_is_an_owned_process():
    out = python("import sys; sys.argv = ['masdsl', 'check', 'workflows/coder_tester.mas']; "
                 f"from masdsl.cli import program; rc = program(); print(rc); {DEFERRING}")
    assert out[-2:] == ["0", "True"]
    library = python("import sys; from masdsl.cli import main; rc = main(['check', 'workflows/coder_tester.mas']); "
                     f"print(rc); {DEFERRING}")
    assert library[-2:] == ["0", "False"]  # `main(argv)` called as a library changes nothing


HEAVY = ("torch", "transformers", "vllm", "ray", "mlflow")
LOADED_AFTER = ("import contextlib, io, json, sys\nfrom masdsl.cli import main\n"
                "with contextlib.redirect_stdout(io.StringIO()) as text:\n"
                "    try:\n        rc = main({argv!r})\n    except SystemExit as exc:\n        rc = exc.code\n"
                "print(rc, json.dumps([sorted(m for m in sys.modules if m.startswith('masdsl.commands.')), "
                f"[m for m in {HEAVY!r} if m in sys.modules]], separators=(',', ':')))")


def loaded_after(argv: list[str]) -> tuple[int, list[str], list[str]]:
    """(exit status, the command modules imported, the heavy packages imported) of `masdsl ARGV`."""
    import json

    rc, loaded = python(LOADED_AFTER.format(argv=argv))[-2:]
    commands, heavy = json.loads(loaded)
    return int(rc), commands, heavy


def test_help_imports_no_command_and_nothing_heavy():
    """`masdsl --help` lists the commands from `masdsl.cli.COMMANDS`: no command module loads."""
    assert loaded_after(["--help"]) == (0, ["masdsl.commands.output"], [])
    assert loaded_after(["--color", "never", "check", "workflows/coder_tester.mas"]) == (
        0, ["masdsl.commands.check", "masdsl.commands.output"], [])


def test_a_split_command_imports_its_body_only_when_it_goes_ahead():
    """`masdsl run --dry-run` is answered by the light module (`masdsl.commands.run`); the body
    (`run_body`: the trainer, torch) is not imported. `masdsl completion` imports every light module."""
    rc, commands, heavy = loaded_after(["run", "workflows/coder_tester.mas", "--dry-run"])
    assert rc == 0 and "masdsl.commands.run" in commands and heavy == []
    assert not [m for m in commands if m.endswith("_body")]
    rc, commands, heavy = loaded_after(["completion", "bash"])
    assert rc == 0 and "masdsl.commands.eval" in commands and heavy == []
    assert not [m for m in commands if m.endswith("_body")]


def deferring(_) -> bool:
    """Run inside an actor: whether its process defers (what that does: the first test)."""
    return any(type(f).__name__ == "DeferImports" for f in sys.meta_path)


def test_engine_and_learner_actors_are_owned_processes(tmp_path, local_ray):
    from masdsl.learner.workers import LearnerWorker
    from masdsl.runtime.actors import RemoteEngine
    from masdsl.runtime.backends.replay import ReplayEngine

    replay = tmp_path / "r.jsonl"
    replay.write_text("")
    engine = RemoteEngine(lambda: ReplayEngine(replay))
    try:
        assert local_ray.get(engine.actor.__ray_call__.remote(deferring)) is True
    finally:
        engine.close()
    worker = local_ray.remote(num_cpus=0)(LearnerWorker).remote(0, 1, 1)
    try:
        assert local_ray.get(worker.__ray_call__.remote(deferring)) is True
    finally:
        local_ray.kill(worker)
