"""The pygls wiring of `masdsl lsp`: one `DocState` per open `.mas` document, features from
the sibling modules. Run with `masdsl lsp` (stdio).

Diagnostics are published after every change, for the latest version only: a change that
arrives while an earlier one waits to be checked replaces it (one check per burst of typing).
"""

from __future__ import annotations

import asyncio
import logging

from lsprotocol import types as T
from pygls.lsp.server import LanguageServer
from pygls.uris import from_fs_path, to_fs_path

from masdsl.lang import tree  # noqa: F401 - lark's parser, loaded with the server (see `main`)
from masdsl.lang.grammar import parser
from masdsl.lang.templates import environment
from masdsl.lsp import completion, definition, diagnostics, hover, rename, symbols
from masdsl.lsp.index import Index
from masdsl.lsp.state import DocState

VERSION = "0.1.0"
log = logging.getLogger(__name__)


class MasServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("masdsl", VERSION, text_document_sync_kind=T.TextDocumentSyncKind.Incremental)
        self.docs: dict[str, DocState] = {}
        self.published: dict[str, set[str]] = {}  # document uri -> uris it published diagnostics for
        self._indexes: dict[str, tuple[str, Index]] = {}

    def state(self, uri: str) -> DocState:
        doc = self.workspace.get_text_document(uri)
        st = self.docs.get(uri)
        if st is None:
            st = self.docs[uri] = DocState(to_fs_path(uri) or uri)
        if st.text != doc.source or st.parser.text is None:
            st.update(doc.source)
        return st

    def index(self, uri: str) -> tuple[DocState, Index]:
        st = self.state(uri)
        cached = self._indexes.get(uri)
        if cached is None or cached[0] is not st.text:
            cached = self._indexes[uri] = (st.text, Index(st.module, st.text))
        return st, cached[1]

    def offset(self, uri: str, pos: T.Position) -> tuple[DocState, Index, int]:
        st, ix = self.index(uri)
        return st, ix, st.lines.offset(pos.line, pos.character)

    def publish(self, uri: str, version: int | None) -> None:
        st = self.state(uri)
        files = diagnostics.by_file(st)
        uris = {(uri if path == st.path else from_fs_path(path) or path): diags for path, diags in files.items()}
        for gone in self.published.get(uri, set()) - set(uris):
            self.text_document_publish_diagnostics(T.PublishDiagnosticsParams(uri=gone, diagnostics=[]))
        for u, diags in uris.items():
            self.text_document_publish_diagnostics(
                T.PublishDiagnosticsParams(uri=u, diagnostics=diags, version=version if u == uri else None))
        self.published[uri] = set(uris)
        log.debug("%s v%s: %d diagnostics in %.1f ms", uri, version, len(st.diagnostics), st.seconds * 1000)


server = MasServer()


@server.feature(T.TEXT_DOCUMENT_DID_OPEN)
def did_open(ls: MasServer, params: T.DidOpenTextDocumentParams) -> None:
    ls.publish(params.text_document.uri, params.text_document.version)


@server.feature(T.TEXT_DOCUMENT_DID_CHANGE)
async def did_change(ls: MasServer, params: T.DidChangeTextDocumentParams) -> None:
    uri, version = params.text_document.uri, params.text_document.version
    await asyncio.sleep(0)  # let changes already received land first: check only the newest
    if ls.workspace.get_text_document(uri).version == version:
        ls.publish(uri, version)


@server.feature(T.TEXT_DOCUMENT_DID_CLOSE)
def did_close(ls: MasServer, params: T.DidCloseTextDocumentParams) -> None:
    uri = params.text_document.uri
    for u in ls.published.pop(uri, set()):
        ls.text_document_publish_diagnostics(T.PublishDiagnosticsParams(uri=u, diagnostics=[]))
    ls.docs.pop(uri, None)
    ls._indexes.pop(uri, None)


@server.feature(T.TEXT_DOCUMENT_HOVER)
def on_hover(ls: MasServer, params: T.HoverParams) -> T.Hover | None:
    st, ix, off = ls.offset(params.text_document.uri, params.position)
    found = hover.hover_text(st, ix, off)
    if found is None:
        return None
    text, occ = found
    (l0, c0), (l1, c1) = st.lines.line_col(occ.start), st.lines.line_col(occ.end)
    return T.Hover(T.MarkupContent(T.MarkupKind.Markdown, text), T.Range(T.Position(l0, c0), T.Position(l1, c1)))


@server.feature(T.TEXT_DOCUMENT_DEFINITION)
def on_definition(ls: MasServer, params: T.DefinitionParams) -> T.Location | None:
    st, ix, off = ls.offset(params.text_document.uri, params.position)
    return definition.definition(st, ix, off, params.text_document.uri)


@server.feature(T.TEXT_DOCUMENT_COMPLETION, T.CompletionOptions(trigger_characters=[".", "{", " "]))
def on_completion(ls: MasServer, params: T.CompletionParams) -> T.CompletionList:
    st, _, off = ls.offset(params.text_document.uri, params.position)
    return T.CompletionList(is_incomplete=False, items=completion.complete(st, off))


@server.feature(T.TEXT_DOCUMENT_DOCUMENT_SYMBOL)
def on_symbols(ls: MasServer, params: T.DocumentSymbolParams) -> list[T.DocumentSymbol]:
    return symbols.document_symbols(ls.state(params.text_document.uri))


@server.feature(T.TEXT_DOCUMENT_PREPARE_RENAME)
def on_prepare_rename(ls: MasServer, params: T.PrepareRenameParams) -> T.Range | None:
    st, ix, off = ls.offset(params.text_document.uri, params.position)
    return rename.prepare(st, ix, off)


@server.feature(T.TEXT_DOCUMENT_RENAME)
def on_rename(ls: MasServer, params: T.RenameParams) -> T.WorkspaceEdit:
    st, ix, off = ls.offset(params.text_document.uri, params.position)
    try:
        return rename.rename(st, ix, off, params.new_name, params.text_document.uri)
    except rename.RenameError as exc:
        raise ValueError(str(exc)) from None


def main() -> None:
    parser(), environment()  # built before the first keystroke needs them: a syntax error (lark), a `{% %}` (jinja2)
    server.start_io()
