"""The Python API (masdsl/api.py): the examples of docs/api.md run as written (a tiny random model in
place of the embedded one), `import masdsl` stays light, and mistakes are UserErrors before any model loads."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import masdsl
from masdsl.errors import UserError

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "api.md"
MODEL_LINE = 'MODEL = "smollm2-135m-instruct"'


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)


def test_docs_examples_run(tiny_model_dir, tmp_path, monkeypatch, capsys):
    import torch

    code = blocks()
    assert len(code) == 4 and MODEL_LINE in code[0]
    code[0] = code[0].replace(MODEL_LINE, f'MODEL = "{tiny_model_dir}"')
    (tmp_path / "workflows").symlink_to(ROOT / "workflows")
    monkeypatch.chdir(tmp_path)  # runs/ land here
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: one thread is fastest on a shared machine
    try:
        namespace: dict = {}
        for i, block in enumerate(code):
            exec(compile(block, f"{DOC}:block{i + 1}", "exec"), namespace)
    finally:
        torch.set_num_threads(before)
    run_dir = namespace["result"].run_dir
    assert run_dir.parent == Path("runs") / "plan_path_single"
    assert (run_dir / "workflow.mas").is_file()
    assert "planner" in capsys.readouterr().out


def test_import_masdsl_stays_light():
    probe = ("import sys, masdsl; heavy = [m for m in ('torch', 'transformers', 'masdsl.api') if m in sys.modules];"
             "print(heavy); assert not heavy; assert callable(masdsl.train) and 'masdsl.api' in sys.modules")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr


def test_lazy_names_and_unknown_attribute():
    from masdsl import api

    assert masdsl.evaluate is api.evaluate and masdsl.EvalResult is api.EvalResult
    with pytest.raises(AttributeError, match="no attribute 'trian'"):
        masdsl.trian  # noqa: B018


@pytest.mark.parametrize("call, message", [
    (lambda wf: masdsl.train(wf, ["train.sampels=2"]), "did you mean `train.samples`"),
    (lambda wf: masdsl.evaluate(wf, ["policy.sharde.model=x"]), "no policy `sharde`"),
    (lambda wf: masdsl.evaluate(wf, checkpoint="/nonexistent/run"), "is not a run folder"),
    (lambda wf: masdsl.rollout(wf, split="test"), "no `data test ...` line"),
    (lambda wf: masdsl.train(wf, resume="/nonexistent/run"), "is not a run folder"),
])
def test_mistakes_are_user_errors(call, message):
    wf = masdsl.load(ROOT / "workflows" / "plan_path_single.mas")  # a Workflow object is accepted too
    with pytest.raises(UserError, match=re.escape(message)):
        call(wf)
