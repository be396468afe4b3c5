"""The source tree as data: masdsl's modules, their import graph and its layers.

`tests/test_architecture.py` checks the layout rules on it and `scripts/draw_architecture.py`
draws docs/img/architecture.png from it.

>>> layer_of("masdsl.errors") < layer_of("masdsl.lang.parse") < layer_of("masdsl.training.trainer")
True
>>> ("masdsl.training.trainer", "masdsl.config") in import_graph().edges
True
"""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path
from typing import Mapping

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent.parent
PKG = ROOT / "masdsl"

# Low to high: a module may import from its own layer and the layers before it, never after.
LAYERS = (
    ("masdsl.errors", "masdsl.startup", "masdsl.config_schema", "masdsl.config_aliases", "masdsl.config_overrides",
     "masdsl.config", "masdsl.config_file", "masdsl.version", "masdsl.models", "masdsl.precision", "masdsl.stats"),
    ("masdsl.sandbox",),
    ("masdsl.envs",),
    ("masdsl.lang",),
    ("masdsl.tracking",),
    ("masdsl.plan",),  # decides for the runtime and the learner, so it sits below both
    ("masdsl.runtime",),
    ("masdsl.learner",),
    ("masdsl.training",),
    ("masdsl.sweep",),
    ("masdsl.commands", "masdsl.lsp"),
    ("masdsl.cli", "masdsl.api", "masdsl.testing", "masdsl"),
)


@lru_cache(maxsize=1)
def modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the masdsl package."""
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def parsed(module: str) -> tuple[ast.Module, list[str]]:
    text = modules()[module].read_text()
    return ast.parse(text, filename=str(modules()[module])), text.splitlines()


def _target(module: str, node: ast.ImportFrom, is_package: bool | None = None) -> str:
    if not node.level:
        return node.module or ""
    if is_package is None:
        is_package = modules()[module].name == "__init__.py"
    parts = module.split(".")
    package = parts if is_package else parts[:-1]
    package = package[: len(package) - (node.level - 1)]
    return ".".join(package + ([node.module] if node.module else []))


def _type_checking_nodes(tree: ast.Module) -> set[int]:
    """Imports under `if TYPE_CHECKING:` are for annotations only and never run."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for n in ast.walk(node))
    return skip


def import_graph() -> nx.DiGraph:
    """Module -> imported masdsl module, for every import that runs (top level or in a function)."""
    graph = nx.DiGraph()
    known = modules()
    for module in known:
        tree, _ = parsed(module)
        graph.add_node(module)
        graph.add_edges_from((module, t) for t in imports_of(module, tree, known))
    return graph


def imports_of(module: str, tree: ast.Module, known: Mapping[str, Path]) -> set[str]:
    """The known modules that `module` (parsed as `tree`) imports when it runs.

    An import of a parent package counts: `import masdsl` runs `masdsl/__init__.py`, and what
    that reaches, so a module deep in the tree that imports its root package is an upward edge.

    >>> known = {"pkg": Path("pkg/__init__.py"), "pkg.low": Path("pkg/low/__init__.py"),
    ...          "pkg.low.mod": Path("pkg/low/mod.py")}
    >>> sorted(imports_of("pkg.low.mod", ast.parse("import pkg; from . import x"), known))
    ['pkg', 'pkg.low']
    """
    skip = _type_checking_nodes(tree)
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _target(module, node, known[module].name == "__init__.py")
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        found.update(t for t in targets if t in known and t != module)
    return found


def layer_of(module: str) -> int:
    """The index in LAYERS of the most specific prefix naming `module`."""
    best, depth = len(LAYERS) - 1, -1
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and prefix.count(".") > depth:
                best, depth = i, prefix.count(".")
    return best


def imported_names(module: str, tree: ast.Module, is_package: bool = False) -> list[tuple[int, str]]:
    """(line, dotted name) of every module that `module` imports anywhere: at its top, in a
    function, under `TYPE_CHECKING`, or by `importlib.import_module` / `__import__` with a literal
    name; third-party names too. A relative import is made absolute, and `from X import y` names
    both `X` and `X.y` (y may be a submodule).

    >>> src = "import torch.nn\\ndef f():\\n    from ..envs import base\\n    importlib.import_module('vllm')"
    >>> sorted({n for _, n in imported_names("masdsl.plan.x", ast.parse(src))})
    ['masdsl.envs', 'masdsl.envs.base', 'torch.nn', 'vllm']
    """
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _target(module, node, is_package)
            found += [(node.lineno, base)] + [(node.lineno, f"{base}.{a.name}") for a in node.names if a.name != "*"]
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and (node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", ""))
              in ("import_module", "__import__")):
            found.append((node.lineno, node.args[0].value))
    return found


def package_of(module: str) -> str:
    """`masdsl.training.trainer` -> `masdsl.learner`; top-level modules stand for themselves."""
    parts = module.split(".")
    return ".".join(parts[:2])


MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def unexplained_long_functions(tree: ast.Module, lines: list[str]) -> list[tuple[str, int]]:
    """(name, lines) of each function over `MAX_FUNCTION_LINES` with no `# long:` reason in its
    head (signature, docstring, up to its first statement): the size rule of masdsl/ and tests/.

    >>> src = "def f():\\n" + "    x = 1\\n" * 70
    >>> unexplained_long_functions(ast.parse(src), src.splitlines())
    [('f', 71)]
    >>> src = "def f():\\n    # long: a table\\n" + "    x = 1\\n" * 70
    >>> unexplained_long_functions(ast.parse(src), src.splitlines())
    []
    """
    out = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        n = (fn.end_lineno or fn.lineno) - fn.lineno + 1
        if n <= MAX_FUNCTION_LINES:
            continue
        body = fn.body[1:] if ast.get_docstring(fn) is not None and len(fn.body) > 1 else fn.body
        head = lines[fn.lineno - 1 : body[0].lineno]
        if not any(line.strip().startswith("# long:") for line in head):
            out.append((fn.name, n))
    return out


def unmirrored_test_folders(tests: Path, package: Path = PKG, beside: tuple[str, ...] = ("benchmarks",)) -> list[str]:
    """Folders of `tests` holding test modules that mirror no folder of `package` (tests/X/Y for
    masdsl/X/Y) or of the repository (`beside`: tests/benchmarks for benchmarks/). Folders of
    data and `tests/support` hold no test modules, so they are free."""
    out = []
    for folder in sorted({f.parent for f in tests.rglob("test_*.py")} - {tests}):
        rel = folder.relative_to(tests)
        if "__pycache__" in rel.parts or rel.parts[0] == "support":
            continue
        if not (package.joinpath(*rel.parts).is_dir() or (len(rel.parts) == 1 and rel.parts[0] in beside)):
            out.append(str(folder.relative_to(tests.parent)))
    return out
