"""Write a learner benchmark's result into docs/performance.md under `## learner`.

Each benchmark owns one block between `<!-- learner:NAME -->` markers inside the section, so
rerunning a benchmark replaces its own numbers and leaves everything else alone.
"""

from __future__ import annotations

from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "performance.md"
SECTION = "## learner"


def replace_block(name: str, title: str, body: str, doc: Path = DOC) -> None:
    text = doc.read_text() if doc.exists() else "# Performance\n"
    begin, end = f"<!-- learner:{name} -->", f"<!-- /learner:{name} -->"
    block = f"{begin}\n{title}\n\n{body.rstrip()}\n{end}"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    elif SECTION in text:
        head, rest = text.split(SECTION, 1)
        nxt = rest.find("\n## ")
        if nxt < 0:
            text = head + SECTION + rest.rstrip() + "\n\n" + block + "\n"
        else:
            text = head + SECTION + rest[:nxt].rstrip() + "\n\n" + block + "\n" + rest[nxt:]
    else:
        text = text.rstrip() + f"\n\n{SECTION}\n\n{block}\n"
    doc.write_text(text)
