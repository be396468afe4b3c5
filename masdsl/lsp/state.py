"""One open document: its text, incremental parse, last check and position helpers.

`DocState.update(text)` reparses only what changed (`masdsl.lsp.incremental`) and runs the
checker (`masdsl.lang.check.run_checks`) when the text parses; `module` is always the part
of the file that parses, so hover and completion work while a statement is half typed.
"""

from __future__ import annotations

import bisect
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from masdsl.envs.registry import Registry, load_builtins
from masdsl.lang import ast as A
from masdsl.lang.check import run_checks
from masdsl.lang.context import Ctx
from masdsl.lang.errors import Diagnostic
from masdsl.lsp.incremental import IncrementalParser, build_module


class Lines:
    """Offsets <-> (0-based line, UTF-16 column), the units LSP positions count in."""

    def __init__(self, text: str):
        self.text = text
        self.starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def line_col(self, offset: int) -> tuple[int, int]:
        offset = max(0, min(offset, len(self.text)))
        line = bisect.bisect_right(self.starts, offset) - 1
        prefix = self.text[self.starts[line] : offset]
        return line, len(prefix) + sum(1 for ch in prefix if ord(ch) > 0xFFFF)

    def offset(self, line: int, col16: int) -> int:
        if line >= len(self.starts):
            return len(self.text)
        start = self.starts[line]
        end = self.starts[line + 1] - 1 if line + 1 < len(self.starts) else len(self.text)
        i, units = start, 0
        while i < end and units < col16:
            units += 2 if ord(self.text[i]) > 0xFFFF else 1
            i += 1
        return i


@dataclass
class DocState:
    path: str  # the file system path: what spans and diagnostics name
    text: str = ""
    registry: Registry = field(default_factory=load_builtins)
    parser: IncrementalParser | None = None
    module: A.Module | None = None  # what parses of the current text
    ctx: Ctx | None = None  # the last check of a text that parsed (facts for completion and hover)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)
    parsed_ok: bool = False
    good: A.Module | None = None  # the last module of a text that parsed whole (its spans may be stale)
    seconds: float = 0.0  # how long the last update took
    _lines: Lines | None = None

    def __post_init__(self) -> None:
        self.parser = IncrementalParser(self.path)

    @property
    def base_dir(self) -> Path:
        return Path(self.path).parent

    @property
    def lines(self) -> Lines:
        if self._lines is None or self._lines.text is not self.text:
            self._lines = Lines(self.text)
        return self._lines

    def update(self, text: str) -> list[Diagnostic]:
        t0 = time.perf_counter()
        self.text = text
        module, syntax = self.parser.update(text)
        self.parsed_ok = module is not None
        if module is None:
            self.module = build_module(self.path, self.parser.stmts, text)
            self.diagnostics = syntax
            self.sources = {self.path: text}
        else:
            self.module = self.good = module
            self.ctx = run_checks(module, text, self.base_dir, self.registry)
            self.diagnostics = list(self.ctx.diags)
            self.sources = {self.path: text, **self.ctx.sources}
        self.seconds = time.perf_counter() - t0
        return self.diagnostics

    def roles(self) -> dict[str, A.RoleDecl]:
        return {r.name.name: r for r in self.module.roles} if self.module else {}

    def policies(self) -> dict[str, A.PolicyDecl]:
        return {p.name.name: p for p in self.module.policies} if self.module else {}

    def env_name(self) -> str | None:
        return self.module.envs[0].name.name if self.module and self.module.envs else None

    def known_roles(self) -> dict[str, A.RoleDecl]:
        """Roles now, and those of the last text that parsed (the one being typed may be broken);
        names and fields only: the spans of the older ones may be stale."""
        old = {r.name.name: r for r in self.good.roles} if self.good else {}
        return {**old, **self.roles()}

    def role_fields(self, role: str) -> list[str]:
        r = self.known_roles().get(role)
        return ([p.name.name for p in r.of(A.RoleParse)] if r else []) + ["output", "ok"]

    def task_fields(self) -> list[str]:
        if self.ctx and self.ctx.task_fields:
            return sorted(self.ctx.task_fields)
        fields: set[str] = {"id"}
        for d in self.module.data if self.module else ():
            spec = self.registry.data_sources.get(d.call.func.name) if d.call else None
            fields |= set(spec.fields) if spec else set()
        return sorted(fields)

    def env_fields(self) -> list[str]:
        """The env's fields as the checker knew them (an `env http(..., fields=[...])` declares its
        own), else the registered env's."""
        if self.ctx and self.ctx.env_fields:
            return sorted(self.ctx.env_fields)
        spec = self.registry.envs.get(self.env_name() or "")
        return sorted(spec.fields) if spec else []
