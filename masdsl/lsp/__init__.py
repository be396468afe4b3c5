"""`masdsl lsp`: a language server for `.mas` files (pygls, over stdio), and the Pygments lexer.

`server.py` wires the features to pygls; each feature is a module of plain functions over a
`state.DocState` (the document's text, its incremental parse and its last check): diagnostics,
hover, definition, completion, symbols, rename. `index.py` finds what a position names.
Nothing here is imported by `masdsl --help`: `masdsl.commands.lsp` imports the server when run.
See docs/editors.md.
"""
