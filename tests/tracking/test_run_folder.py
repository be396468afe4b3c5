"""docs/tracking.md, "The run folder", matches what a tracked `masdsl run` writes (issue 31,
item 9: the page described a `metrics.jsonl` that runs do not write): every entry of the folder
is documented, every documented entry is there, and `metrics.jsonl` (only written when tracking
calls could not be sent) is absent from a run whose tracking worked."""

from __future__ import annotations

import re
from pathlib import Path

from masdsl.cli import main
from tests.support.toy import TOY

ROOT = Path(__file__).parents[2]


def documented() -> dict[str, str]:
    """Entry name (a folder without its `/`) -> its row's text, from the section's table."""
    doc = (ROOT / "docs" / "tracking.md").read_text(encoding="utf-8")
    section = re.search(r"^### The run folder\n(.*?)(?=^### )", doc, re.M | re.S)
    assert section, "docs/tracking.md has no `### The run folder` section"
    rows = {}
    for line in section.group(1).splitlines():
        cells = line.split(" | ")
        if line.startswith("| `") and len(cells) >= 2:
            for name in re.findall(r"`([^`]+)`", cells[0]):
                rows[name.rstrip("/")] = line
    return rows


def test_the_documented_run_folder_is_what_a_run_writes(mlflow_server, tiny_model_dir, tmp_path, capsys):
    args = ["runtime.engine=hf", f"policy.shared.model={tiny_model_dir}", f"runtime.runs_dir={tmp_path / 'runs'}",
            "train.steps=1", "train.samples=2", "train.batch=2", "train.eval_tasks=1", f"tracking.uri={mlflow_server.uri}",
            f"tracking.experiment=run_folder_{tmp_path.name}"]
    assert main(["run", str(TOY), *args]) == 0, capsys.readouterr().err
    (run_dir,) = (tmp_path / "runs" / "toy_digits").iterdir()
    written = {p.name for p in run_dir.iterdir()}
    rows = documented()
    always = {name for name, row in rows.items() if "only when" not in row}
    assert written - set(rows) == set(), "written but not in docs/tracking.md"
    assert always - written == set(), "in docs/tracking.md but not written"
    assert "metrics.jsonl" in rows and "metrics.jsonl" not in written
