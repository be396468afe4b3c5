"""Guard, reward, `team` and `success` expressions: a closed evaluator over the AST.

No Python `eval`/`exec`: an expression is its AST plus a `Span`, and `evaluate(ctx)` walks the
tree. Names mean (see `masdsl.lang.workflow.EvalContext`): `task.x`, `env.x`, `ROLE.FIELD`, a
bare `FIELD` of the expression's own role, `output`, `turn`; calls go to the functions the
compiler bound from the checker's registry (env-bound ones receive `ctx.state` first).

>>> from masdsl.lang.parse import parse_text
>>> from masdsl.lang.workflow import EvalContext
>>> module, _ = parse_text("team (task.n + 2) * 3 > 10 and not false", "w.mas")
>>> e = CompiledExpr(module.teams[0].expr, "(task.n + 2) * 3 > 10 and not false")
>>> e.evaluate(EvalContext(task={"n": 2}))
True
>>> e.evaluate(EvalContext(task={"n": 1}))
False
>>> e.evaluate(EvalContext(task={}))
Traceback (most recent call last):
...
masdsl.lang.exprs.EvalError: w.mas:1:12: error: task has no field `n` (fields: none)
"""

from __future__ import annotations

import inspect
import operator
from typing import Any, Callable, Iterator, Mapping

from masdsl.envs import registry
from masdsl.envs.registry import FunctionSpec
from masdsl.errors import UserError
from masdsl.lang import ast as A
from masdsl.lang.imports import import_file
from masdsl.lang.workflow import EvalContext, Span


class EvalError(UserError):
    """An expression failed at run time; the message points at its `.mas` line."""

    def __init__(self, message: str, span: Span | None):
        self.message, self.span = message, span
        super().__init__(f"{span}: error: {message}" if span else message)

    def __reduce__(self):
        return (EvalError, (self.message, self.span))


class NotLiteral(Exception):
    """Raised by `literal()` for an expression that reads names or calls functions."""

    def __init__(self, node: A.Expr):
        self.node = node


_ARITH: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv, "%": operator.mod,
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
}


def literal(node: A.Expr) -> Any:
    """The value of a constant expression (numbers, strings, lists, `-`, arithmetic).

    >>> from masdsl.lang.parse import parse_text
    >>> literal(parse_text("alpha -2 * 0.5", "w")[0].alphas[0].expr)
    -1.0
    """
    if isinstance(node, A.Const):
        return node.value
    if isinstance(node, A.ListExpr):
        return [literal(i) for i in node.items]
    if isinstance(node, A.Unary) and node.op == "-":
        value = literal(node.operand)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return -value
    if isinstance(node, A.BinOp) and node.op in "+-*/":
        left, right = literal(node.left), literal(node.right)
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (left, right)):
            try:
                return _ARITH[node.op](left, right)
            except ZeroDivisionError:
                raise NotLiteral(node) from None
    raise NotLiteral(node)


def resolve_function(name: str, imports: tuple[str, ...] = ()):
    """The registered `FunctionSpec` for `name`, importing built-ins and user files if needed.
    With `imports`, built-ins load first and the files after (a file's name wins over a built-in
    it replaces, in every process, as the checker's `shadowed-builtin` warning says)."""
    spec = registry.REGISTRY.functions.get(name)
    if spec is None or imports:
        registry.load_builtins()
        for path in imports:
            import_file(path)
        spec = registry.REGISTRY.functions.get(name)
    return spec


def called_names(node: A.Expr) -> list[str]:
    """The names of the functions an expression calls, outermost first.

    >>> from masdsl.lang.parse import parse_text
    >>> called_names(parse_text("team f(g(1), 2 * h(task.x)) > 0", "w")[0].teams[0].expr)
    ['f', 'g', 'h']
    """
    return [n.func.name for n in subexpressions(node) if isinstance(n, A.Call)]


def subexpressions(node: object) -> Iterator[A.Expr]:
    """`node` and every expression inside it, outermost first (pre-order, arguments in order)."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, A.Call):
            stack.extend(reversed([*n.args, *(k.value for k in n.kwargs)]))
        elif isinstance(n, A.BinOp):
            stack.extend((n.right, n.left))
        elif isinstance(n, A.Unary):
            stack.append(n.operand)
        elif isinstance(n, A.ListExpr):
            stack.extend(reversed(n.items))
        elif not isinstance(n, (A.Const, A.Name, A.Attr)):
            continue  # None (no expression) or not an expression
        yield n


class CompiledExpr:
    """A checked expression (`masdsl.lang.workflow.Expr`): AST + span + source text.

    `role` is the role whose `reward`/`parse` holds the expression (bare field names read its
    fields). `functions` are the specs the compiler bound from the checker's registry: they are
    what `evaluate` calls. Pickled, an expression keeps the names only (a user file's function
    may not pickle); the receiving process binds them again from the built-ins and the
    workflow's `imports`, the sources the checker read.
    """

    def __init__(self, node: A.Expr, source: str, role: str | None = None, imports: tuple[str, ...] = (),
                 functions: Mapping[str, FunctionSpec] | None = None):
        self.node, self.source, self.role, self.imports = node, source, role, tuple(imports)
        self.span: Span = node.span
        self._fns: dict[str, tuple[Callable[..., Any], bool, bool]] = {
            n: _callable(spec) for n, spec in (functions or {}).items()}

    def __repr__(self) -> str:
        return f"CompiledExpr({self.source!r} at {self.span})"

    def __getstate__(self):
        return {"node": self.node, "source": self.source, "role": self.role, "imports": self.imports, "span": self.span}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._fns = {}

    def evaluate(self, ctx: EvalContext) -> Any:
        return self._eval(self.node, ctx)

    # ---- one function per node kind ----
    def _eval(self, node: A.Expr, ctx: EvalContext) -> Any:
        if isinstance(node, A.Const):
            return node.value
        if isinstance(node, A.Name):
            return self._name(node, ctx)
        if isinstance(node, A.Attr):
            return self._attr(node, ctx)
        if isinstance(node, A.Call):
            return self._call(node, ctx)
        if isinstance(node, A.BinOp):
            return self._binop(node, ctx)
        if isinstance(node, A.Unary):
            value = self._eval(node.operand, ctx)
            if node.op == "not":
                return not value
            return self._apply("-", operator.neg, (value,), node)
        if isinstance(node, A.ListExpr):
            return [self._eval(i, ctx) for i in node.items]
        raise EvalError(f"cannot evaluate {type(node).__name__}", getattr(node, "span", None))

    def _own_role(self, ctx: EvalContext) -> str | None:
        return self.role or ctx.role

    def _name(self, node: A.Name, ctx: EvalContext) -> Any:
        if node.name == "turn":
            return ctx.turn
        role = self._own_role(ctx)
        if node.name == "output" and ctx.output is not None:
            return ctx.output
        fields = ctx.fields.get(role, {}) if role else {}
        if node.name in fields:
            return fields[node.name]
        raise EvalError(f"`{node.name}` has no value here" + (f" (role `{role}` has not produced it yet)" if role else ""), node.span)

    def _attr(self, node: A.Attr, ctx: EvalContext) -> Any:
        obj, key = node.obj.name, node.attr.name
        if obj == "task":
            source, what = ctx.task, "task"
        elif obj == "env":
            source, what = ctx.env_view, "env"
        elif obj in ctx.fields:
            source, what = ctx.fields[obj], f"role `{obj}`"
        else:
            raise EvalError(f"role `{obj}` has not acted yet, so `{obj}.{key}` has no value", node.span)
        if key not in source:
            known = ", ".join(f"`{k}`" for k in sorted(source)) or "none"
            raise EvalError(f"{what} has no field `{key}` (fields: {known})", node.attr.span)
        return source[key]

    def _call(self, node: A.Call, ctx: EvalContext) -> Any:
        name = node.func.name
        if name == "judge":  # scored before the reward runs (masdsl.runtime.judge): read, never called
            if node.span.start not in ctx.judged:
                raise EvalError("`judge(...)` has no score here: a judge runs only in a role's `reward`", node.span)
            return ctx.judged[node.span.start]
        fn = self._fns.get(name)
        if fn is None:  # unpickled in another process: bind the name from the checker's sources
            spec = resolve_function(name, self.imports)
            if spec is None:
                raise EvalError(f"function `{name}` is not registered", node.func.span)
            self._fns[name] = fn = _callable(spec)
        args = [self._eval(a, ctx) for a in node.args]
        kwargs = {k.name.name: self._eval(k.value, ctx) for k in node.kwargs}
        call = fn[0]
        if fn[1]:
            remote = getattr(ctx.state, "call_bound", None)
            if callable(remote):  # a state held by an env server (`env http(...)`): computed there
                call = lambda *a, **k: remote(name, a, k)  # noqa: E731
            else:
                args.insert(0, ctx.state)
        if fn[2] and ctx.limits is not None and "limits" not in kwargs:
            kwargs["limits"] = ctx.limits  # code runs under the env's sandbox limits, as the env's own runs do
        try:
            return call(*args, **kwargs)
        except UserError:
            raise
        except Exception as exc:  # noqa: BLE001 - a user or env function failed: point at the call
            raise EvalError(f"`{name}(...)` raised {type(exc).__name__}: {exc}", node.span) from exc

    def _binop(self, node: A.BinOp, ctx: EvalContext) -> Any:
        if node.op == "and":
            return bool(self._eval(node.left, ctx)) and bool(self._eval(node.right, ctx))
        if node.op == "or":
            return bool(self._eval(node.left, ctx)) or bool(self._eval(node.right, ctx))
        left, right = self._eval(node.left, ctx), self._eval(node.right, ctx)
        return self._apply(node.op, _ARITH[node.op], (left, right), node)

    @staticmethod
    def _apply(op: str, fn: Callable[..., Any], values: tuple, node) -> Any:
        try:
            return fn(*values)
        except ZeroDivisionError:
            raise EvalError("division by zero", node.span) from None
        except TypeError:
            kinds = " and ".join(type(v).__name__ for v in values)
            raise EvalError(f"`{op}` cannot be applied to {kinds}", getattr(node, "op_span", node.span)) from None


def _callable(spec: FunctionSpec) -> tuple[Callable[..., Any], bool, bool]:
    """(the function, whether it takes the state first, whether it takes `limits=`)."""
    return spec.fn, spec.env is not None, _takes_limits(spec.fn)


def _takes_limits(fn: Callable[..., Any]) -> bool:
    """Whether `fn` has a `limits` parameter (the reward functions that run code in the sandbox).

    >>> _takes_limits(lambda code, *, limits=None: 0), _takes_limits(len)
    (True, False)
    """
    try:
        return "limits" in inspect.signature(fn).parameters
    except (TypeError, ValueError):  # builtins without a signature
        return False


def source_of(node: A.Expr, text: str) -> str:
    """The expression as written in the source text."""
    return text[node.span.start : node.span.end]
