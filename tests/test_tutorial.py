"""docs/tutorial.md, run as written: every ```sh block is a command, every block that opens with
`# file: NAME` is written to NAME, in the page's order, in one shell starting in an empty folder.

`masdsl` is this checkout's CLI; `masdsl run` and `masdsl eval` get overrides that put the tiny
test model in place of the real one (one training step, two eval tasks, no MLflow).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]
TUTORIAL = ROOT / "docs" / "tutorial.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)
FILE = re.compile(r"# file: (\S+)\n")


def blocks() -> list[tuple[str, str]]:
    return FENCE.findall(TUTORIAL.read_text())


def script(overrides: list[str]) -> str:
    o = " ".join(shlex.quote(x) for x in overrides)
    lines = ["set -euo pipefail",
             f'masdsl() {{ local c=$1; shift; case $c in'
             f' run) {shlex.quote(sys.executable)} -m masdsl.cli run "$@" {o};;'
             f' eval) {shlex.quote(sys.executable)} -m masdsl.cli eval "$1" {o} "${{@:2}}";;'
             f' *) {shlex.quote(sys.executable)} -m masdsl.cli "$c" "$@";; esac; }}']
    for lang, body in blocks():
        m = FILE.match(body)
        if m:
            lines.append(f"cat > {shlex.quote(m.group(1))} <<'TUTORIAL_EOF'\n{body}TUTORIAL_EOF")
        else:
            lines.append(f'echo "$ "{shlex.quote(body.strip())}')
            lines.append(body)
    return "\n".join(lines) + "\n"


def test_every_block_is_run():
    kinds = [(lang, bool(FILE.match(body))) for lang, body in blocks()]
    assert kinds and all(lang == "sh" or is_file for lang, is_file in kinds), kinds
    assert sum(lang == "sh" for lang, _ in kinds) >= 4
    text = " ".join(body for lang, body in blocks() if lang == "sh")
    for command in ("masdsl new", "masdsl check", "masdsl fmt", "masdsl run", "masdsl trace", "masdsl eval"):
        assert command in text


def test_the_tutorial_runs(tiny_model_dir, tmp_path):
    overrides = [f"policy.shared.model={tiny_model_dir}", "runtime.engine=hf", "tracking.enabled=false",
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
