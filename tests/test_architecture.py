"""The layout rules of docs/architecture.md, checked on the source tree.

- no module under `masdsl/` over 400 lines;
- no function over 60 lines unless its body opens with a `# long: <reason>` comment;
- imports at the top of modules: an import inside a function carries a comment (on its line or
  the line above) saying why, e.g. `# heavy: torch` or `# optional: vllm`;
- no import circles between masdsl modules, and no arrow from a lower layer up to a higher one;
- docstrings and comments point only at `.md` files that exist.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "masdsl"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60

# Low to high: a module may import from its own layer and the layers before it, never after.
LAYERS = (
    ("masdsl.errors", "masdsl.config"),
    ("masdsl.sandbox",),
    ("masdsl.envs",),
    ("masdsl.lang",),
    ("masdsl.runtime",),
    ("masdsl.tracking",),
    ("masdsl.learner",),
    ("masdsl.commands",),
    ("masdsl.cli", "masdsl.testing", "masdsl"),
)


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def _trees() -> dict[str, tuple[ast.Module, list[str]]]:
    return {m: (ast.parse(p.read_text(), filename=str(p)), p.read_text().splitlines()) for m, p in MODULES.items()}


TREES = _trees()


def _target(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    package = parts if MODULES[module].name == "__init__.py" else parts[:-1]
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
    for module, (tree, _) in TREES.items():
        graph.add_node(module)
        skip = _type_checking_nodes(tree)
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _target(module, node)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
            for t in targets:
                if t in MODULES and t != module and not module.startswith(t + "."):
                    graph.add_edge(module, t)
    return graph


def layer_of(module: str) -> int:
    best, depth = len(LAYERS) - 1, -1
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and prefix.count(".") > depth:
                best, depth = i, prefix.count(".")
    return best


def test_no_module_over_the_line_limit():
    big = {m: len(lines) for m, (_, lines) in TREES.items() if len(lines) > MAX_MODULE_LINES}
    assert not big, f"modules over {MAX_MODULE_LINES} lines: {big}"


def test_long_functions_say_why():
    unexplained = []
    for module, (tree, lines) in TREES.items():
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if fn.end_lineno - fn.lineno + 1 <= MAX_FUNCTION_LINES:
                continue
            body = fn.body[1:] if ast.get_docstring(fn) is not None and len(fn.body) > 1 else fn.body
            head = lines[fn.lineno - 1 : body[0].lineno]  # signature, docstring, up to the first statement
            if not any(line.strip().startswith("# long:") for line in head):
                unexplained.append(f"{module}.{fn.name} ({fn.end_lineno - fn.lineno + 1} lines)")
    assert not unexplained, f"functions over {MAX_FUNCTION_LINES} lines with no `# long:` reason: {unexplained}"


def test_imports_inside_functions_say_why():
    silent = []
    for module, (tree, lines) in TREES.items():
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    here = lines[node.lineno - 1]
                    above = lines[node.lineno - 2].strip() if node.lineno > 1 else ""
                    if "#" not in here and not above.startswith("#"):
                        silent.append(f"{MODULES[module].relative_to(ROOT)}:{node.lineno}")
    assert not silent, f"imports inside functions with no comment saying why: {silent}"


def test_no_import_circles():
    cycles = [c for c in nx.simple_cycles(import_graph())]
    assert not cycles, f"import circles: {cycles[:10]}"


def test_no_arrow_back_up():
    upward = [(a, b) for a, b in import_graph().edges if layer_of(b) > layer_of(a)]
    assert not upward, f"imports from a lower layer into a higher one: {upward}"


@pytest.mark.parametrize("module", ["masdsl.envs.registry", "masdsl.runtime.executor", "masdsl.commands.run"])
def test_layer_of_places_known_modules(module):
    assert 0 <= layer_of(module) < len(LAYERS)
    assert layer_of("masdsl.errors") < layer_of("masdsl.lang.parse") < layer_of("masdsl.learner.trainer")


def test_doc_references_exist():
    missing = []
    for module, (_, lines) in TREES.items():
        for lineno, line in enumerate(lines, 1):
            for ref in re.findall(r"([\w./-]+\.md)\b", line):
                name = ref.lstrip("./")
                if "/" in name and not name.startswith("docs/"):
                    continue  # a path inside a run folder, not a repository file
                if not any((ROOT / base / name).is_file() for base in ("", "docs")):
                    missing.append(f"{MODULES[module].relative_to(ROOT)}:{lineno} {ref}")
    assert not missing, f"references to files that are not in the repository: {missing}"
