"""`masdsl run --resume` and `masdsl eval --checkpoint` compare what the workflow means, not its
text: a comment or `masdsl fmt` does not stop them, a changed reward or `train { }` key does, and
the refusal names what changed. One tiny training run (one step) is shared by the tests."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from masdsl.cli import main
from masdsl.lang.format import format_text
from tests.support.overrides import NO_TRACKING, tiny_hf
from tests.support.toy import TOY, TOY_DIR

REWARD = "reward same(digit, task.target)"

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/learner/conftest.py


def workflow_copy(folder: Path, edit=lambda text: text) -> Path:
    """The toy workflow (and the Python file it imports) in `folder`, its text passed through `edit`."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(TOY_DIR / "toy_env.py", folder / "toy_env.py")
    path = folder / "toy_digits.mas"
    path.write_text(edit(TOY.read_text()))
    return path


@pytest.fixture(scope="module")
def trained(tiny_model_dir, tmp_path_factory, one_thread):
    """(workflow file, run folder) of a one-step run of the toy."""
    root = tmp_path_factory.mktemp("meaning")
    wf = workflow_copy(root / "src")
    assert main(["run", str(wf), *tiny_hf(tiny_model_dir),
                 f"runtime.runs_dir={root / 'runs'}", "train.steps=1", "train.samples=2", "train.batch=2",
                 "train.eval_tasks=1", "-q"]) == 0
    (run_dir,) = (root / "runs" / "toy_digits").iterdir()
    return wf, run_dir


def fresh_run(trained, tmp_path) -> Path:
    """A copy of the trained run folder that a test may resume (and so change)."""
    return Path(shutil.copytree(trained[1], tmp_path / "run"))


def commented(text: str) -> str:
    return "# a note added after training\n" + text.replace(REWARD, REWARD + "   # the hidden digit")


def messy(text: str) -> str:
    """The same workflow laid out badly, so that `masdsl fmt` has something to change."""
    return text.replace("role namer {\n  policy shared", "role namer {\n      policy    shared\n\n")


def test_resume_after_adding_a_comment(trained, tmp_path, capsys):
    run_dir = fresh_run(trained, tmp_path)
    wf = workflow_copy(tmp_path / "src", commented)
    assert main(["run", str(wf), "--resume", str(run_dir), "train.steps=2", "-q"]) == 0
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 2
    state = json.loads((run_dir / "checkpoints" / "step_000002" / "state.json").read_text())
    assert state["workflow_hash"] != json.loads((run_dir / "checkpoints" / "step_000001" / "state.json").read_text())[
        "workflow_hash"]  # the new checkpoint describes the commented file it continued with


def test_resume_after_masdsl_fmt(trained, tmp_path):
    run_dir = fresh_run(trained, tmp_path)
    wf = workflow_copy(tmp_path / "src", messy)
    assert format_text(wf.read_text()) != wf.read_text()
    assert main(["fmt", str(wf)]) == 0
    assert main(["run", str(wf), "--resume", str(run_dir), "train.steps=2", "-q"]) == 0


def test_resume_with_a_changed_reward_is_refused_naming_it(trained, tmp_path, capsys):
    run_dir = fresh_run(trained, tmp_path)
    wf = workflow_copy(tmp_path / "src", lambda t: t.replace(REWARD, "reward len(output)"))
    capsys.readouterr()
    assert main(["run", str(wf), "--resume", str(run_dir), "train.steps=2"]) == 2
    err = capsys.readouterr().err
    assert "role namer's reward changed `same(digit, task.target)` -> `len(output)`" in err
    assert f"the run folder keeps it: {run_dir / 'workflow.mas'}" in err and "Traceback" not in err
    assert not (run_dir / "checkpoints" / "step_000002").exists()


def test_resume_with_a_changed_train_block_names_the_override(trained, tmp_path, capsys):
    wf = workflow_copy(tmp_path / "src", lambda t: t.replace("lr: 0.001", "lr: 0.0005"))
    capsys.readouterr()
    assert main(["run", str(wf), "--resume", str(trained[1]), "train.steps=2"]) == 2
    err = capsys.readouterr().err
    assert "train.lr changed 0.001 -> 0.0005" in err and "(train.lr=0.0005)" in err


def test_eval_checkpoint_by_meaning(trained, tmp_path, capsys):
    """A comment, a layout change, a changed train { } block (settings the command line
    overrides anyway) and another `data eval` line (what the weights are measured on) evaluate the
    checkpoint; a changed reward or `data train` line is refused, naming it."""
    base = ["--checkpoint", str(trained[1]), NO_TRACKING, "runtime.engine=hf",
            f"runtime.runs_dir={tmp_path / 'runs'}", "--tasks", "1", "--json", "-q"]
    settings = lambda t: (commented(messy(t)).replace("eval_tasks: 10", "eval_tasks: 3")  # noqa: E731
                          .replace('toy_digits("eval", 10)', 'toy_digits("eval", 4)'))
    wf = workflow_copy(tmp_path / "ok", settings)
    capsys.readouterr()
    assert main(["eval", str(wf), *base]) == 0
    assert json.loads(capsys.readouterr().out)["checkpoint"].endswith("step_000001")
    wf = workflow_copy(tmp_path / "changed", lambda t: t.replace(REWARD, "reward len(output)"))
    assert main(["eval", str(wf), *base]) == 2
    err = capsys.readouterr().err
    assert "role namer's reward changed `same(digit, task.target)` -> `len(output)`" in err and "Traceback" not in err
    wf = workflow_copy(tmp_path / "trained_on_other", lambda t: t.replace('toy_digits("train", 20)', 'toy_digits("train", 12)'))
    assert main(["eval", str(wf), *base]) == 2
    assert "data train" in capsys.readouterr().err


def test_a_checkpoint_of_an_earlier_version_compares_the_text(trained, tmp_path, capsys):
    """Before fingerprints a checkpoint kept only the text's hash: the same text is accepted, any
    other text (even a comment) is refused with what to do."""
    from masdsl import load
    from masdsl.training import checkpoint

    run_dir = fresh_run(trained, tmp_path)
    (path,) = checkpoint.list_complete(run_dir)
    state = json.loads((path / "state.json").read_text())
    del state["workflow_fingerprint"]
    (path / "state.json").write_text(json.dumps(state))
    assert checkpoint.read_state(path, load(trained[0])).step == 1
    with pytest.raises(checkpoint.CheckpointError, match="earlier masdsl, which kept only the hash") as exc:
        checkpoint.read_state(path, load(workflow_copy(tmp_path / "src", commented)))
    assert "the run folder keeps it" in str(exc.value)


def test_dry_run_of_a_resume_checks_the_checkpoint(trained, tmp_path, capsys):
    """`--dry-run --resume` refuses what the resume would, and plans from the checkpoint's configuration."""
    wf = workflow_copy(tmp_path / "src", commented)
    capsys.readouterr()
    assert main(["run", str(wf), "--resume", str(trained[1]), "train.steps=2", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"# resuming from {trained[1] / 'checkpoints' / 'step_000001'}" in out and "steps: 2" in out
    assert not (trained[1] / "checkpoints" / "step_000002").exists()
    wf = workflow_copy(tmp_path / "changed", lambda t: t.replace(REWARD, "reward len(output)"))
    assert main(["run", str(wf), "--resume", str(trained[1]), "--dry-run"]) == 2
    assert "role namer's reward changed" in capsys.readouterr().err
