"""docs/tutorial.md, run as written: every ```sh block is a command, every block that opens with
`# file: NAME` is written to NAME, in the page's order, in one shell starting in an empty folder.

`masdsl` is this checkout's CLI; `masdsl run` and `masdsl eval` get overrides that put the tiny
test model in place of the real one (one training step, two eval tasks, no MLflow).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from masdsl.testing.tutorial import FILE, blocks, script
from tests.support.overrides import NO_TRACKING

ROOT = Path(__file__).parents[2]


def test_every_block_is_run():
    kinds = [(lang, bool(FILE.match(body))) for lang, body in blocks()]
    assert kinds and all(lang in ("sh", "text") or is_file for lang, is_file in kinds), kinds
    assert sum(lang == "sh" for lang, _ in kinds) >= 4
    text = " ".join(body for lang, body in blocks() if lang == "sh")
    for command in ("masdsl new", "masdsl check", "masdsl fmt", "masdsl run", "masdsl trace", "masdsl eval"):
        assert command in text


def test_the_tutorial_runs(tiny_model_dir, tmp_path):
    overrides = [f"policy.shared.model={tiny_model_dir}", "runtime.engine=hf", NO_TRACKING,
                 "train.steps=1", "train.eval_tasks=2"]
    r = subprocess.run(["bash", "-c", script(overrides)], cwd=tmp_path, capture_output=True, text=True, timeout=900,
                       env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "OMP_NUM_THREADS": "1",
                            "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    quiz = tmp_path / "quiz"
    assert {"quiz.mas", "quiz_env.py", "shaped.py"} <= {p.name for p in quiz.iterdir()}
    assert "ok  quiz.mas  roles=2 edges=3 max_turns=-" in r.stdout  # as the page says
    assert "near(answer, task.answer)" in (quiz / "quiz.mas").read_text()
    (run_dir,) = [d for d in (quiz / "runs" / "quiz").iterdir() if (d / "checkpoints").is_dir()]  # eval adds one
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 1
    assert "checker" in r.stdout


def test_the_page_states_what_the_measured_run_showed():
    """The numbers of "What to expect" are benchmarks/results/tutorial.json's (re-measure with
    benchmarks/tutorial_run.py, then update the page)."""
    page = (ROOT / "docs" / "tutorial.md").read_text()
    runs = json.loads((ROOT / "benchmarks" / "results" / "tutorial.json").read_text())
    first = runs["0"]
    shown = "\n".join(body for lang, body in blocks() if lang == "text")
    assert f"success/eval (before -> after)   {first['success_before']:.3f} -> {first['success_after']:.3f}" in shown
    assert f"reward/eval (before -> after)    {first['reward_before']:.3f} -> {first['reward_after']:.3f}" in shown
    for seed, run in runs.items():
        solved = f"{sum(run['before'].values())} -> {sum(run['after'].values())}"
        assert run["tasks"] == 16 and f"{run['run_s']:.0f} s" in page and f"{run['page_s']:.0f} s" in page
        assert f"p = {run['mcnemar']['p']:.3g}" in page or f"and {run['mcnemar']['p']:.3g}" in page, seed
        assert seed == "0" or (f"{run['success_before']:.3f} ->\n{run['success_after']:.3f}" in page
                               or f"{run['success_before']:.3f} -> {run['success_after']:.3f}" in page), seed
        assert solved in page or f"{sum(run['before'].values())} of the 16" in page, seed
