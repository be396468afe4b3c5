"""Run folders are self-contained (`masdsl.runtime.run_files`): export, eval --checkpoint and trace
work from the folder's own copies after the workflow's files are deleted; a copy edited since is
refused by name; the local modules an imported file imports, data files and `..` paths are kept."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from masdsl.cli import main as cli
from masdsl.lang.scaffold import scaffold
from tests.support.overrides import NO_TRACKING, tiny_hf

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/learner/conftest.py


@pytest.fixture(scope="module")
def trained(tiny_model_dir, tmp_path_factory):
    """`masdsl new quiz`, trained for one step on the tiny model; then the originals are deleted."""
    root = tmp_path_factory.mktemp("selfcontained")
    src = root / "src"
    assert cli(["new", str(src / "quiz")]) == 0
    assert cli(["run", str(src / "quiz.mas"), *tiny_hf(tiny_model_dir), f"runtime.runs_dir={root / 'runs'}",
                "train.steps=1", "train.samples=2", "train.batch=2", "train.eval_tasks=2"]) == 0
    (run_dir,) = (root / "runs" / "quiz").iterdir()
    shutil.rmtree(src)  # the .mas and its imported quiz_env.py are gone
    return run_dir


def test_export_eval_and_trace_work_after_the_imported_py_is_deleted(trained, capsys):
    manifest = json.loads((trained / "files.json").read_text())
    (kept,) = manifest["files"]
    assert kept["kind"] == "import" and kept["written"] == "quiz_env.py" and len(kept["sha256"]) == 64
    assert (trained / kept["path"]).is_file() and not Path(kept["original"]).exists()
    assert cli(["export", str(trained), "--out", str(trained / "out")]) == 0
    assert (trained / "out" / "shared" / "config.json").is_file()
    capsys.readouterr()
    assert cli(["eval", "--checkpoint", str(trained), "--tasks", "1", "runtime.engine=hf", NO_TRACKING,
                f"runtime.runs_dir={trained.parent / 'evals'}", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["workflow"] == "quiz" and result["checkpoint"].endswith("step_000001") and result["tasks"] == 1
    assert cli(["trace", str(trained), "--step", "1", "--no-prompt"]) == 0
    assert "══ task" in capsys.readouterr().out


def test_a_copy_changed_since_the_run_is_refused_naming_it(trained, capsys):
    copy = trained / "files" / "quiz_env.py"
    before = copy.read_text()
    try:
        copy.write_text(before + "\n# edited\n")
        assert cli(["export", str(trained), "--out", str(trained / "out2")]) == 2
        err = capsys.readouterr().err
        assert f"{copy}: changed since the run started" in err and "Traceback" not in err
    finally:
        copy.write_text(before)


def test_modules_data_files_and_parent_paths_are_kept(tmp_path, capsys):
    """An imported file two folders away (`../lib/x_env.py`) that imports a helper beside it, and a
    JSONL data file: all copied, and the workflow loads from the copies alone, meaning the same."""
    from masdsl import load
    from masdsl.config import resolve_config
    from masdsl.lang.fingerprint import fingerprint
    from masdsl.plan.run_plan import resolve_rollout
    from masdsl.runtime import run_files
    from masdsl.runtime.rundir import RunDir

    files = scaffold("quiz")
    lib, wf_dir = tmp_path / "proj" / "lib", tmp_path / "proj" / "wf"
    lib.mkdir(parents=True)
    wf_dir.mkdir()
    helper = "rf_helper_7d1c"  # a name no other test imports
    (lib / f"{helper}.py").write_text("SUFFIX = ''\n")
    (lib / "quiz_env.py").write_text(files["quiz_env.py"] + f"\nfrom {helper} import SUFFIX\n")
    (wf_dir / "tasks.jsonl").write_text("".join(json.dumps({"question": f"{i}+1", "answer": str(i + 1)}) + "\n"
                                                for i in range(4)))
    mas = files["quiz.mas"].replace('import "quiz_env.py"', 'import "../lib/quiz_env.py"')
    mas = mas.replace('data eval quiz_tasks("eval")', 'data eval "tasks.jsonl"')
    (wf_dir / "quiz.mas").write_text(mas)
    wf = load(wf_dir / "quiz.mas")
    plan = resolve_rollout(wf, resolve_config(wf.train, None, [f"runtime.runs_dir={tmp_path / 'runs'}"]))
    run = RunDir.open(plan).path
    kinds = {r["written"]: r["kind"] for r in json.loads((run / "files.json").read_text())["files"]}
    assert kinds == {"../lib/quiz_env.py": "import", "tasks.jsonl": "data", f"../lib/{helper}.py": "module"}
    shutil.rmtree(tmp_path / "proj")
    sys.modules.pop(helper, None)  # imported from the original above: the copy must be found on its own
    again = run_files.load(run)
    assert fingerprint(again) == fingerprint(wf)
    assert Path(sys.modules[helper].__file__).resolve() == (run / "files" / "lib" / f"{helper}.py").resolve()
    assert again.data["eval"].path.resolve() == (run / "files" / "wf" / "tasks.jsonl").resolve()
