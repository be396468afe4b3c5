"""The `.mas` abstract syntax tree: frozen dataclasses, each with a `Span`. No behaviour.

Built by `masdsl.lang.parse`, judged by `masdsl.lang.check`, turned into a `Workflow` by
`masdsl.lang.compile`. Statements that may appear once (`workflow`, `env`, `flow`, ...) are
kept as tuples so the checker can point at duplicates.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Union

from masdsl.lang.workflow import Span


@dataclass(frozen=True)
class Ident:
    name: str
    span: Span


# ---- expressions -------------------------------------------------------------------------

@dataclass(frozen=True)
class Const:
    value: Any  # int | float | str | bool
    span: Span


@dataclass(frozen=True)
class ListExpr:
    items: tuple["Expr", ...]
    span: Span


@dataclass(frozen=True)
class Name:
    name: str
    span: Span


@dataclass(frozen=True)
class Attr:
    obj: Ident  # `task`, `env` or a role name
    attr: Ident
    span: Span


@dataclass(frozen=True)
class Kwarg:
    name: Ident
    value: "Expr"
    span: Span


@dataclass(frozen=True)
class Call:
    func: Ident
    args: tuple["Expr", ...]
    kwargs: tuple[Kwarg, ...]
    span: Span


@dataclass(frozen=True)
class BinOp:
    op: str  # + - * / % == != < <= > >= and or
    left: "Expr"
    right: "Expr"
    span: Span
    op_span: Span


@dataclass(frozen=True)
class Unary:
    op: str  # "-" | "not"
    operand: "Expr"
    span: Span


Expr = Union[Const, ListExpr, Name, Attr, Call, BinOp, Unary]

# ---- literal values (policy, sample and train blocks) ------------------------------------


@dataclass(frozen=True)
class Value:
    value: Any  # int | float | str | bool
    span: Span


@dataclass(frozen=True)
class ListValue:
    items: tuple["AnyValue", ...]
    span: Span


@dataclass(frozen=True)
class Entry:
    key: Ident
    value: "AnyValue"
    span: Span


@dataclass(frozen=True)
class Block:
    entries: tuple[Entry, ...]
    span: Span

    def get(self, key: str) -> Entry | None:
        for e in self.entries:
            if e.key.name == key:
                return e
        return None


AnyValue = Union[Value, ListValue, Block]


def to_python(v: AnyValue) -> Any:
    """A literal value as plain Python (blocks become dicts, later keys win)."""
    if isinstance(v, Value):
        return v.value
    if isinstance(v, ListValue):
        return [to_python(i) for i in v.items]
    return {e.key.name: to_python(e.value) for e in v.entries}


# ---- statements --------------------------------------------------------------------------


@dataclass(frozen=True)
class StrLit:
    value: str
    span: Span
    long: bool = False  # written """...""": the value is the raw text between the quotes


@dataclass(frozen=True)
class WorkflowDecl:
    name: Ident
    description: StrLit | None
    span: Span


@dataclass(frozen=True)
class EnvDecl:
    name: Ident
    call: Call | None  # `env sudoku(size=4)`: the arguments, func == name
    span: Span


@dataclass(frozen=True)
class DataDecl:
    split: Ident
    call: Call | None  # a registered data source
    path: StrLit | None  # or a JSONL file
    span: Span


@dataclass(frozen=True)
class PolicyDecl:
    name: Ident
    block: Block
    span: Span


@dataclass(frozen=True)
class RolePolicy:
    name: Ident
    span: Span


@dataclass(frozen=True)
class RoleSystem:
    text: StrLit
    span: Span


@dataclass(frozen=True)
class RolePrompt:
    text: StrLit
    span: Span
    file: bool = False  # `prompt file "x.j2"`: text is the path


@dataclass(frozen=True)
class RoleSample:
    block: Block
    span: Span


@dataclass(frozen=True)
class RoleParse:
    name: Ident
    expr: Expr
    span: Span


@dataclass(frozen=True)
class RoleReward:
    expr: Expr
    span: Span


@dataclass(frozen=True)
class RoleAdvantage:
    name: Ident  # the estimator: one of masdsl.config_schema.ADVANTAGES
    span: Span


@dataclass(frozen=True)
class RoleMetric:
    name: Ident  # reported as `skill/<split>/<role>/<name>`; never a reward
    expr: Expr
    span: Span


RoleItem = Union[RolePolicy, RoleSystem, RolePrompt, RoleSample, RoleParse, RoleReward, RoleAdvantage, RoleMetric]


@dataclass(frozen=True)
class RoleDecl:
    name: Ident
    items: tuple[RoleItem, ...]
    span: Span

    def of(self, kind: type) -> list:
        return [i for i in self.items if isinstance(i, kind)]


@dataclass(frozen=True)
class Node:
    roles: tuple[Ident, ...]  # one name, or a parallel group `a & b`
    span: Span

    @cached_property  # read thousands of times per check of a large flow; the names never change
    def key(self) -> str:
        return "&".join(r.name for r in self.roles)


@dataclass(frozen=True)
class Edge:
    nodes: tuple[Node, ...]  # a chain a -> b -> c; the guard belongs to its last edge
    guard: Expr | None
    span: Span


@dataclass(frozen=True)
class MaxTurns:
    expr: Expr
    span: Span


@dataclass(frozen=True)
class FlowDecl:
    items: tuple[Union[Edge, MaxTurns], ...]
    span: Span

    @property
    def edges(self) -> list[Edge]:
        return [i for i in self.items if isinstance(i, Edge)]


@dataclass(frozen=True)
class ExprStmt:
    kind: str  # "team" | "alpha" | "success"
    expr: Expr
    span: Span


@dataclass(frozen=True)
class TrainDecl:
    block: Block
    span: Span


@dataclass(frozen=True)
class SandboxDecl:
    """`sandbox { packages: ["numpy"] }`: what generated programs may use (masdsl.sandbox)."""

    block: Block
    span: Span


@dataclass(frozen=True)
class ImportDecl:
    path: StrLit
    span: Span


@dataclass(frozen=True)
class Module:
    file: str
    workflows: tuple[WorkflowDecl, ...] = ()
    envs: tuple[EnvDecl, ...] = ()
    data: tuple[DataDecl, ...] = ()
    policies: tuple[PolicyDecl, ...] = ()
    roles: tuple[RoleDecl, ...] = ()
    flows: tuple[FlowDecl, ...] = ()
    teams: tuple[ExprStmt, ...] = ()
    alphas: tuple[ExprStmt, ...] = ()
    successes: tuple[ExprStmt, ...] = ()
    trains: tuple[TrainDecl, ...] = ()
    imports: tuple[ImportDecl, ...] = ()
    sandboxes: tuple[SandboxDecl, ...] = ()
    span: Span | None = None
