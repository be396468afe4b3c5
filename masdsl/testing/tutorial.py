"""docs/tutorial.md as a shell script: every ```sh block is a command, every block that opens
with `# file: NAME` is written to NAME, in the page's order, in one shell that starts in an empty
folder; a ```text block is output the page shows, not run. `tests/benchmarks/test_tutorial.py` runs it with a tiny model; `benchmarks/tutorial_run.py` runs it
as written, with the real one, and records what the page states.

>>> kinds = [(lang, bool(FILE.match(body))) for lang, body in blocks()]
>>> all(lang in ("sh", "text") or is_file for lang, is_file in kinds)
True
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

TUTORIAL = Path(__file__).parents[2] / "docs" / "tutorial.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)
FILE = re.compile(r"# file: (\S+)\n")


def blocks(text: str | None = None) -> list[tuple[str, str]]:
    """(language, body) of each fenced block of the page."""
    return FENCE.findall(TUTORIAL.read_text() if text is None else text)


def script(overrides: list[str], python: str = sys.executable) -> str:
    """The page as a bash script; `masdsl run` and `masdsl eval` get `overrides` appended."""
    o = " ".join(shlex.quote(x) for x in overrides)
    py = shlex.quote(python)
    lines = ["set -euo pipefail",
             f'masdsl() {{ local c=$1; shift; case $c in'
             f' run) {py} -m masdsl.cli run "$@" {o};;'
             f' eval) {py} -m masdsl.cli eval "$1" {o} "${{@:2}}";;'
             f' *) {py} -m masdsl.cli "$c" "$@";; esac; }}']
    for lang, body in blocks():
        m = FILE.match(body)
        if lang == "text":
            continue
        if m:
            lines.append(f"cat > {shlex.quote(m.group(1))} <<'TUTORIAL_EOF'\n{body}TUTORIAL_EOF")
        else:
            lines.append(f'echo "$ "{shlex.quote(body.strip())}')
            lines.append(body)
    return "\n".join(lines) + "\n"
