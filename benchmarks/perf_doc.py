"""Write a benchmark's results into its part of a Markdown document (docs/performance.md by default).

A benchmark owns one of three things, and rerunning it replaces only that:

- a whole section `## name` (up to the next `## ` heading): `replace_section`;
- lines it appends to a section, one per run, so the history stays: `append_line`;
- a block between two marker comments inside a section: `replace_block`.

Each function takes and returns the document's text; `update(path, fn, ...)` reads, applies and
writes (a missing document starts as `# Performance`).

>>> doc = "# Performance\\n\\n## a\\n\\nold\\n\\n## b\\n\\nkeep\\n"
>>> print(replace_section(doc, "a", "## a\\n\\nnew\\n"))
# Performance
<BLANKLINE>
## a
<BLANKLINE>
new
<BLANKLINE>
## b
<BLANKLINE>
keep
<BLANKLINE>
>>> print(append_line(doc, "a", "- run 2"))
# Performance
<BLANKLINE>
## a
<BLANKLINE>
old
- run 2
<BLANKLINE>
## b
<BLANKLINE>
keep
<BLANKLINE>
>>> once = replace_block(doc, "b", "<!-- x -->", "<!-- /x -->", "### x\\n\\n1")
>>> print(replace_block(once, "b", "<!-- x -->", "<!-- /x -->", "### x\\n\\n2"))
# Performance
<BLANKLINE>
## a
<BLANKLINE>
old
<BLANKLINE>
## b
<BLANKLINE>
keep
<BLANKLINE>
<!-- x -->
### x
<BLANKLINE>
2
<!-- /x -->
<BLANKLINE>
>>> replace_section("# Performance\\n", "c", "## c\\n\\nfirst\\n")
'# Performance\\n\\n## c\\n\\nfirst\\n'
"""

from __future__ import annotations

import os
import platform
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

DOC = Path(__file__).resolve().parents[1] / "docs" / "performance.md"


def section_bounds(text: str, name: str) -> tuple[int, int] | None:
    """Where `## name` starts and where its section ends (the next `## ` heading, or the end)."""
    m = re.search(rf"^## {re.escape(name)}\n.*?(?=^## |\Z)", text, re.S | re.M)
    return None if m is None else (m.start(), m.end())


def replace_section(text: str, name: str, section: str) -> str:
    """`text` with section `## name` replaced by `section` (which starts with that heading), or
    with `section` appended."""
    section = section.rstrip("\n") + "\n"
    where = section_bounds(text, name)
    if where is None:
        return text.rstrip("\n") + "\n\n" + section
    start, end = where
    return text[:start] + section + ("\n" + text[end:] if end < len(text) else "")


def append_line(text: str, name: str, line: str) -> str:
    """`text` with `line` added at the end of section `## name` (created at the end if missing)."""
    where = section_bounds(text, name)
    if where is None:
        return replace_section(text, name, f"## {name}\n\n{line}\n")
    start, end = where
    body = text[start:end].rstrip("\n") + "\n" + line + "\n"
    return text[:start] + body + ("\n" + text[end:] if end < len(text) else "")


def replace_block(text: str, name: str, begin: str, end: str, block: str) -> str:
    """`text` with the part between the markers `begin` and `end` replaced by `block`, or, when
    they are missing, `begin`, `block`, `end` added at the end of section `## name`."""
    wrapped = f"{begin}\n{block.rstrip()}\n{end}"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        return head + wrapped + rest.split(end, 1)[1]
    return append_line(text, name, "\n" + wrapped)


def machine() -> str:
    """When and where a measurement ran, for the start of its line: date, CPU, load, Python."""
    return (f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.machine()}, {os.cpu_count()} CPUs "
            f"(load average {os.getloadavg()[0]:.1f}), Python {platform.python_version()}")


def update(path: Path, change: Callable[..., str], *args: str) -> None:
    """Apply `change(text, *args)` to the document at `path`."""
    text = path.read_text(encoding="utf-8") if path.exists() else "# Performance\n"
    path.write_text(change(text, *args), encoding="utf-8")
