"""Benchmark: a keystroke's diagnostics latency of `masdsl lsp` on the 1,000-edge workflow.

Run: .venv/bin/python benchmarks/lsp.py [--roles 200] [--keys 60] [--no-write]
Starts `python -m masdsl lsp`, opens the file `benchmarks/check_large.py` generates (200 roles,
1,001 edges), then types characters one at a time at three places (inside a prompt, a guard's
number, and a `}` deleted and typed again, which breaks and mends the syntax) and times each
`didChange` until the `publishDiagnostics` for that version arrives, through a real LSP client
over stdio. Appends the figures to docs/performance.md under `## lsp`. Goal: under 100 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

from lsprotocol import types as T
from pygls.lsp.client import LanguageClient

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from check_large import large_workflow  # noqa: E402  (the checker benchmark's generated file)
from perf_doc import DOC, append_line, machine, update  # noqa: E402


def _pos(text: str, i: int) -> T.Position:
    return T.Position(text.count("\n", 0, i), i - (text.rfind("\n", 0, i) + 1))


def keystrokes(text: str, n: int) -> list[tuple[int, int, str]]:
    """(start, end, new text) edits, applied in order: typing, a guard edit, a brace removed and re-added."""
    edits, t = [], text
    i = t.index("Improve this solution (step 100)") + len("Improve this")
    for ch in " carefully"[: max(1, n // 3)]:
        edits.append((i, i, ch)); i += 1
    t = t[:i - len(" carefully"[: max(1, n // 3)])] + " carefully"[: max(1, n // 3)] + t[i - len(" carefully"[: max(1, n // 3)]):]
    j = t.index("len(r150.code) > 20") + len("len(r150.code) > 20")
    for ch in "0505050505"[: max(1, n // 3)]:
        edits.append((j, j, ch)); j += 1
    k = t.index("}", t.index("role r50 {"))
    for _ in range(max(1, n // 6)):
        edits += [(k, k + 1, ""), (k, k, "}")]
    return edits


async def measure(text: str, path: Path, n: int) -> tuple[float, list[float]]:
    client, got = LanguageClient("bench", "1"), {}

    @client.feature(T.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def published(params):
        got[params.version] = time.perf_counter()

    await client.start_io(sys.executable, "-m", "masdsl", "lsp", cwd=str(ROOT))
    await client.initialize_async(T.InitializeParams(capabilities=T.ClientCapabilities()))
    client.initialized(T.InitializedParams())
    uri = path.as_uri()
    t0 = time.perf_counter()
    client.text_document_did_open(T.DidOpenTextDocumentParams(T.TextDocumentItem(uri, "mas", 1, text)))
    while 1 not in got:
        await asyncio.sleep(0.001)
    opened = got[1] - t0
    lat, version = [], 1
    for a, b, new in keystrokes(text, n):
        version += 1
        rng = T.Range(_pos(text, a), _pos(text, b))
        text = text[:a] + new + text[b:]
        t0 = time.perf_counter()
        client.text_document_did_change(T.DidChangeTextDocumentParams(
            T.VersionedTextDocumentIdentifier(uri=uri, version=version), [T.TextDocumentContentChangePartial(range=rng, text=new)]))
        while version not in got:
            await asyncio.sleep(0.0005)
        lat.append(got[version] - t0)
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    return opened, lat


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--roles", type=int, default=200)
    ap.add_argument("--keys", type=int, default=60, help="about how many keystrokes")
    ap.add_argument("--no-write", action="store_true", help="do not append to docs/performance.md")
    args = ap.parse_args()
    with large_workflow(args.roles) as (text, path, n_edges):
        opened, lat = asyncio.run(measure(text, path, args.keys))
    ms = sorted(x * 1000 for x in lat)
    p95 = ms[min(len(ms) - 1, int(0.95 * len(ms)))]
    summary = (f"- {machine()}: `masdsl lsp` on {args.roles} roles, "
               f"{n_edges} edges ({len(text.splitlines())} lines): a keystroke's diagnostics (didChange -> publishDiagnostics, "
               f"through a real client over stdio, incremental reparse + full check) median {statistics.median(ms):.0f} ms, "
               f"p95 {p95:.0f} ms, min {ms[0]:.0f} ms (n={len(ms)}); opening the file (full parse + check) {opened * 1000:.0f} ms. "
               f"Goal < 100 ms. Command: `.venv/bin/python benchmarks/lsp.py`")
    print(summary)
    if not args.no_write:
        update(DOC, append_line, "lsp", summary)


if __name__ == "__main__":
    main()
