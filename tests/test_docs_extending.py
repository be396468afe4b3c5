"""docs/extending.md, run as written (issue 43, item 3): every block that opens with `# file: NAME`
is written to NAME, every ```sh block is run, in the page's order, in one empty folder; a
```text block is the output of the ```sh block before it, compared line by line (the rendered
`masdsl check` messages the page shows are the real ones). A command whose shown output holds an
`error[` must exit 2, every other one 0.

`masdsl` and `python` are this checkout's CLI and interpreter; the page builds its own tiny model
(`python -m masdsl.testing tiny-model`), so its two-minute experiment runs as it stands.

To refresh a shown output after changing a message: `SHOW_OUTPUT=1 .venv/bin/python -m pytest
tests/test_docs_extending.py -s` prints what each command printed.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from masdsl.testing.tutorial import FILE, blocks

ROOT = Path(__file__).parents[1]
PAGE = ROOT / "docs" / "extending.md"
TEXT = PAGE.read_text(encoding="utf-8")
PRELUDE = (f"set -euo pipefail\npython() {{ {shlex.quote(sys.executable)} \"$@\"; }}\n"
           f"masdsl() {{ {shlex.quote(sys.executable)} -m masdsl.cli \"$@\"; }}\n")


def steps() -> list[tuple[str, str, str | None]]:
    """(kind, body, shown output) in the page's order: kind `file` (body: the block, written to
    the name on its first line) or `sh` (body: the commands; shown: the ```text block after it)."""
    out: list[tuple[str, str, str | None]] = []
    found = blocks(TEXT)
    for i, (lang, body) in enumerate(found):
        if FILE.match(body):
            out.append(("file", body, None))
        elif lang == "sh":
            after = found[i + 1] if i + 1 < len(found) else ("", "")
            out.append(("sh", body, after[1] if after[0] == "text" else None))
        else:
            assert lang == "text", f"a ```{lang} block that is neither a file, a command nor an output:\n{body}"
    return out


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.strip("\n").splitlines()]


def test_the_page_covers_each_piece_of_the_python_side():
    for needed in ('@data_source("', "fields=", '@parser("', "empty=", "returns=", '@function("', 'env="counter"',
                   '@env("', "def reset(", "def apply(", "def view(", "def success(", "judge(critic",
                   "python -m masdsl.testing tiny-model", "masdsl check mistakes.mas"):
        assert needed in TEXT, needed
    kinds = [kind for kind, _, _ in steps()]
    assert kinds.count("file") >= 8 and kinds.count("sh") >= 4, kinds
    shown = [s for _, _, s in steps() if s]
    assert any("error[wrong-arity]" in s for s in shown) and any("error[import-error]" in s for s in shown)


def test_the_guide_is_linked_from_the_readme_and_the_tutorial():
    assert "docs/extending.md" in (ROOT / "README.md").read_text(encoding="utf-8")
    assert "(extending.md)" in (ROOT / "docs" / "tutorial.md").read_text(encoding="utf-8")


def test_every_block_of_the_page_runs_as_shown(tmp_path):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(ROOT), "COLUMNS": "120", "NO_COLOR": "1"}
    for kind, body, shown in steps():
        if kind == "file":
            target = tmp_path / FILE.match(body).group(1)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(body)
            continue
        r = subprocess.run(["bash", "-c", PRELUDE + body], cwd=tmp_path, capture_output=True, text=True,
                           timeout=600, env=env)
        printed = r.stderr + r.stdout
        if os.environ.get("SHOW_OUTPUT"):
            print(f"$ {body}{printed}")
        want = 2 if shown is not None and "error[" in shown else 0
        assert r.returncode == want, f"$ {body}exit {r.returncode}\n{printed[-4000:]}"
        if shown is not None:
            assert _lines(printed) == _lines(shown), f"$ {body}printed:\n{printed}"
    runs = [d for d in (tmp_path / "runs" / "count").iterdir() if (d / "summary.json").is_file()]
    assert runs, "the two-minute experiment wrote no run"
    assert re.search(r'"steps": 3\b', (runs[0] / "summary.json").read_text())
