"""Imports of masdsl modules made inside functions, counted on the source tree.

An import inside a function hides a dependency from the module's top; masdsl keeps them for
start-up time only (docs/architecture.md, "Light and body modules"). `tests/test_architecture.py`
fails when their number grows past its bound.

    python -m masdsl.testing.lazy_imports        # the count per file, then the total
    python -m masdsl.testing.lazy_imports -v     # each import with its line
"""

from __future__ import annotations

import argparse
import ast
from collections import Counter

from masdsl.testing.layout import ROOT, _target, _type_checking_nodes, modules, parsed


def _in_functions(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """The import statements nested in a function body (at any depth), each once."""
    seen: dict[int, ast.Import | ast.ImportFrom] = {}
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    seen[id(node)] = node
    return sorted(seen.values(), key=lambda n: n.lineno)


def masdsl_imports_in_functions(module: str, tree: ast.Module) -> list[tuple[int, str]]:
    r"""(line, imported module) for each import statement of a masdsl module inside a function of
    `module`'s `tree`; imports under `if TYPE_CHECKING:` never run and are left out.

    >>> code = "import json\ndef f():\n    from . import output\n    import torch\n    import masdsl.lang"
    >>> masdsl_imports_in_functions("masdsl.commands.run", ast.parse(code))
    [(3, 'masdsl.commands'), (5, 'masdsl.lang')]
    """
    skip = _type_checking_nodes(tree)
    found = []
    for node in _in_functions(tree):
        if id(node) in skip:
            continue
        targets = [a.name for a in node.names] if isinstance(node, ast.Import) else [_target(module, node)]
        masdsl = [t for t in targets if t == "masdsl" or t.startswith("masdsl.")]
        if masdsl:
            found.append((node.lineno, masdsl[0]))
    return found


def function_level_imports() -> list[tuple[str, int, str]]:
    """(file relative to the repository, line, imported module) for every import of a masdsl
    module inside a function, over the whole package."""
    return [(str(path.relative_to(ROOT)), line, target) for module, path in modules().items()
            for line, target in masdsl_imports_in_functions(module, parsed(module)[0])]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="list each import with its line")
    args = parser.parse_args(argv)
    found = function_level_imports()
    if args.verbose:
        for path, line, target in found:
            print(f"{path}:{line}: {target}")
    for path, n in sorted(Counter(p for p, _, _ in found).items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"{n:4d}  {path}")
    print(f"{len(found):4d}  total")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
