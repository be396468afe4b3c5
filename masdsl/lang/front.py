"""The language's front end: text -> AST -> diagnostics -> `Workflow` (`parse`, `check`,
`compile_workflow`, `analyze`, `loads`, `load`). `masdsl.lang` hands these out on first use, so that
importing another `masdsl.lang` module (a worker unpickling a `Workflow`, the runtime reading one)
does not import the parser, the checker and the compiler; see `masdsl/lang/__init__.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from masdsl.errors import UserError
from masdsl.lang.check import check as _check
from masdsl.lang.check import run_checks, summary_of
from masdsl.lang.compile import build_workflow
from masdsl.lang.errors import Diagnostic, MasError
from masdsl.lang.parse import parse_text
from masdsl.lang.workflow import Workflow


def parse(text: str, path: str = "<string>"):
    """Text -> (`Module` or None, syntax diagnostics). See `masdsl.lang.parse.parse_text`."""
    return parse_text(text, path)


def check(module, text: str, base_dir: str | Path | None = None, registry=None) -> list[Diagnostic]:
    """Every diagnostic of a parsed module. See `masdsl.lang.check.check`."""
    return _check(module, text, Path(base_dir) if base_dir is not None else None, registry)


def compile_workflow(module, text: str, base_dir: str | Path | None = None, registry=None, name: str = "workflow"):
    """A checked module -> `Workflow` (raises `MasError` if it has errors)."""
    c = run_checks(module, text, Path(base_dir) if base_dir is not None else None, registry)
    if any(d.is_error for d in c.diags):
        raise MasError(c.diags, {module.file: text, **c.sources})
    return build_workflow(c, name)


@dataclass
class Analysis:
    """The outcome of checking one file: a workflow when there are no errors."""

    path: str
    workflow: Workflow | None  # None with errors, or when not asked for (`analyze(build=False)`)
    diagnostics: list[Diagnostic]
    sources: dict[str, str] = field(default_factory=dict)
    summary: dict | None = None  # {"roles", "edges", "max_turns"} when there are no errors

    @property
    def ok(self) -> bool:
        return self.summary is not None

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.is_error]

    @property
    def warnings(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if not d.is_error]


def analyze(text: str, path: str = "<string>", base_dir: str | Path | None = None, registry=None,
            name: str | None = None, build: bool = True) -> Analysis:
    """Parse, check and (when clean and `build`) compile; never raises for a user mistake.
    `masdsl check` passes `build=False`: the diagnostics and the summary need no `Workflow`."""
    module, diags = parse_text(text, path)
    sources = {path: text}
    if module is None:
        return Analysis(path, None, diags, sources)
    c = run_checks(module, text, Path(base_dir) if base_dir is not None else None, registry)
    sources.update(c.sources)
    if any(d.is_error for d in c.diags):
        return Analysis(path, None, c.diags, sources)
    if not build:
        return Analysis(path, None, c.diags, sources, summary_of(c))
    stem = name or Path(path).stem
    wf = build_workflow(c, stem, Path(path) if base_dir is not None and path != "<string>" else None)
    return Analysis(path, wf, c.diags, sources, summary_of(c))


def loads(text: str, name: str = "<string>", base_dir: str | Path | None = None) -> Workflow:
    """Compile `.mas` text; `name` is the file name shown in errors; relative paths (data,
    prompt files, imports) resolve against `base_dir` (default: the current directory)."""
    a = analyze(text, name, base_dir if base_dir is not None else Path.cwd(),
                name=Path(name).stem if name != "<string>" else "workflow")
    if a.workflow is None:
        raise MasError(a.diagnostics, a.sources)
    if name == "<string>":
        a.workflow.path = None
    return a.workflow


def load(path: str | Path) -> Workflow:
    """Compile a `.mas` file; paths inside it resolve relative to the file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _FileError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise _FileError(f"{path}: cannot read: {exc}") from None
    a = analyze(text, str(path), p.parent)
    if a.workflow is None:
        raise MasError(a.diagnostics, a.sources)
    a.workflow.path = p
    return a.workflow


class _FileError(UserError):
    """A `.mas` file that cannot be read."""
