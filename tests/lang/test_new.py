"""`masdsl new`: the files it writes check clean, are in fmt's layout, and train one step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from masdsl.cli import main as cli
from masdsl.lang import analyze
from masdsl.lang.errors import render_all
from masdsl.lang.format import format_text
from masdsl.lang.scaffold import scaffold
from tests.support.overrides import NO_TRACKING


@pytest.mark.parametrize("env, roles", [(None, "solver,checker"), (None, "only"), ("math", "a,b,c"), ("code", "coder,reviewer")])
def test_new_writes_files_that_check_clean(tmp_path, capsys, env, roles):
    name = f"w_{env or 'new'}"
    argv = ["new", str(tmp_path / name), "--roles", roles] + (["--env", env] if env else [])
    assert cli(argv) == 0
    assert f"wrote  {tmp_path / name}.mas" in capsys.readouterr().out
    mas = tmp_path / f"{name}.mas"
    text = mas.read_text()
    a = analyze(text, str(mas), tmp_path)
    assert a.workflow is not None and not a.diagnostics, render_all(a.diagnostics, a.sources)
    assert list(a.workflow.roles) == roles.split(",")
    assert [p.name for p in a.workflow.imports] == [f"{name}_env.py"]
    assert format_text(text) == text
    assert cli(["check", str(mas)]) == 0


def test_the_python_file_registers_an_env_a_reward_and_tasks(tmp_path):
    files = scaffold("quiz")
    for n, t in files.items():
        (tmp_path / n).write_text(t)
    a = analyze(files["quiz.mas"], str(tmp_path / "quiz.mas"), tmp_path)
    from masdsl.envs.registry import REGISTRY

    assert a.workflow.env == "quiz" and "quiz" in REGISTRY.envs
    reward = REGISTRY.functions["quiz_reward"].fn
    assert (reward("7", "7"), reward("8", "7")) == (1.0, 0.0)
    assert REGISTRY.functions["quiz_answer"].fn("It is 42.") == "42"
    assert REGISTRY.functions["quiz_answer"].fn("3 + 4 = 7") == "7"  # the result, not the first operand
    train, evals = (REGISTRY.data_sources["quiz_tasks"].fn(s) for s in ("train", "eval"))
    assert (len(train), len(evals)) == (65, 16) and train[1] == {"id": "train-1+2", "question": "What is 1 + 2?", "answer": "3"}
    assert not {r["question"] for r in train} & {r["question"] for r in evals}  # no eval question is trained on
    assert len(REGISTRY.data_sources["quiz_tasks"].fn("train", 4)) == 4


def test_new_refuses_to_overwrite_and_bad_names(tmp_path, capsys):
    (tmp_path / "quiz.mas").write_text("keep me")
    assert cli(["new", str(tmp_path / "quiz")]) == 2
    assert "already exist" in capsys.readouterr().err and (tmp_path / "quiz.mas").read_text() == "keep me"
    assert not (tmp_path / "quiz_env.py").exists()
    for argv, message in [(["new", str(tmp_path / "9lives")], "not a valid workflow name"),
                          (["new", str(tmp_path / "q"), "--roles", "a,end"], "cannot be a role name"),
                          (["new", str(tmp_path / "q"), "--roles", "a,a"], "different names"),
                          (["new", str(tmp_path / "q"), "--env", "sudoku"], "workflows/sudoku.mas")]:
        assert cli(argv) == 2
        assert message in capsys.readouterr().err


def test_new_workflow_trains_one_step(tiny_model_dir, tmp_path, capsys):
    import torch  # heavy: only this test trains

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert cli(["new", str(tmp_path / "quiz")]) == 0
        assert cli(["run", str(tmp_path / "quiz.mas"), f"policy.shared.model={tiny_model_dir}", "runtime.engine=hf",
                    NO_TRACKING, f"runtime.runs_dir={tmp_path / 'runs'}", "train.steps=1",
                    "train.samples=2", "train.batch=2", "train.eval_tasks=2"]) == 0
    finally:
        torch.set_num_threads(threads)
    (run_dir,) = (tmp_path / "runs" / "quiz").iterdir()
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 1
    records = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]
    assert {r["role"] for r in records} == {"solver", "checker"}


def test_the_math_prompt_shows_the_model_one_backslash(tmp_path):
    """`\\boxed{}` reaches the model as written in LaTeX: a `.mas` prompt is raw text, so the
    scaffold writes one backslash (it wrote two, and the model saw `\\\\boxed{}`)."""
    from masdsl.runtime.prompts import prompt_variables, render

    files = scaffold("m", env="math", roles=("solver",))
    for n, t in files.items():
        (tmp_path / n).write_text(t)
    assert "in \\boxed{}." in files["m.mas"] and "\\\\boxed" not in files["m.mas"]
    a = analyze(files["m.mas"], str(tmp_path / "m.mas"), tmp_path)
    assert a.workflow is not None, render_all(a.diagnostics, a.sources)
    shown = render(a.workflow.roles["solver"].prompt, prompt_variables({"question": "1 + 1?"}, {}, 0, "solver", {}, []))
    assert shown.endswith("Put the final answer in \\boxed{}.") and "\\\\" not in shown, shown
