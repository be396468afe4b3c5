"""A real LSP client (pygls's `LanguageClient`) talking to `python -m masdsl lsp` over stdio."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

pytest.importorskip("pygls", reason="the `lsp` extra is not installed")

from lsprotocol import types as T  # noqa: E402  (after the skip: pygls brings lsprotocol)
from pygls.lsp.client import LanguageClient  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


class Client:
    """Synchronous driver: each call runs the client's coroutine on its own event loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.lc = LanguageClient("masdsl-tests", "1")
        self.diagnostics: dict[str, list[T.PublishDiagnosticsParams]] = {}
        self.versions: dict[str, int] = {}

        @self.lc.feature(T.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def _published(params: T.PublishDiagnosticsParams) -> None:
            self.diagnostics.setdefault(params.uri, []).append(params)

        self.run(self.lc.start_io(sys.executable, "-m", "masdsl", "lsp", cwd=str(ROOT)))
        self.run(self.lc.initialize_async(T.InitializeParams(capabilities=T.ClientCapabilities(), root_uri=ROOT.as_uri())))
        self.lc.initialized(T.InitializedParams())

    def run(self, coro, timeout: float = 60):
        return self.loop.run_until_complete(asyncio.wait_for(coro, timeout))

    def wait_diagnostics(self, uri: str, version: int | None = None, timeout: float = 60) -> list[T.Diagnostic]:
        async def until():
            while True:
                got = [p for p in self.diagnostics.get(uri, []) if version is None or p.version == version]
                if got:
                    return list(got[-1].diagnostics)
                await asyncio.sleep(0.01)

        return self.run(until(), timeout)

    def open(self, path: Path, text: str | None = None) -> str:
        uri = path.resolve().as_uri()
        self.diagnostics.pop(uri, None)
        self.versions[uri] = 1
        text = path.read_text() if text is None else text
        self.lc.text_document_did_open(T.DidOpenTextDocumentParams(T.TextDocumentItem(uri, "mas", 1, text)))
        return uri

    def change(self, uri: str, text: str, rng: T.Range | None = None) -> int:
        """Replace `rng` (or the whole text) with `text`; returns the new version."""
        self.versions[uri] += 1
        change = (T.TextDocumentContentChangePartial(range=rng, text=text) if rng is not None
                  else T.TextDocumentContentChangeWholeDocument(text=text))
        self.lc.text_document_did_change(T.DidChangeTextDocumentParams(
            T.VersionedTextDocumentIdentifier(uri=uri, version=self.versions[uri]), [change]))
        return self.versions[uri]

    def close(self, uri: str) -> None:
        self.lc.text_document_did_close(T.DidCloseTextDocumentParams(T.TextDocumentIdentifier(uri)))

    def stop(self) -> None:
        self.run(self.lc.shutdown_async(None))
        self.lc.exit(None)
        self.run(self.lc.stop())
        self.loop.close()


@pytest.fixture(scope="module")
def client():
    c = Client()
    yield c
    c.stop()
