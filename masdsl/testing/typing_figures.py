"""How loosely typed masdsl's function signatures are: the figures issue 30 tracks.

`tests/test_architecture.py` keeps `bare_any_params()` from growing; `python -m
masdsl.testing.typing_figures` prints the figures and the files with the most bare `Any`.

>>> bare_any_params() > 0
True
>>> seam_any_params()["env"] >= 0
True
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent
# Parameters that name a seam between packages: each has a real type (`Env`, `Config`, `Workflow`).
SEAMS = ("env", "cfg", "workflow")


def _params(tree: ast.Module):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = node.args
            yield from a.posonlyargs + a.args + a.kwonlyargs
            yield from (p for p in (a.vararg, a.kwarg) if p is not None)


def _files(below: Path = PKG) -> list[Path]:
    return sorted(below.rglob("*.py"))


def bare_any_args(source: str, filename: str = "<source>") -> list[ast.arg]:
    """The parameters of `source`'s functions annotated exactly `Any` (`*args` and `**kwargs` too).

    >>> [p.arg for p in bare_any_args("def f(a: Any, b: Mapping[str, Any], *c: Any, d=1, e: object = 2): ...")]
    ['a', 'c']
    """
    tree = ast.parse(source, filename=filename)
    return [p for p in _params(tree) if p.annotation is not None and ast.unparse(p.annotation) == "Any"]


def _bare_any(path: Path) -> list[ast.arg]:
    return bare_any_args(path.read_text(), str(path))


def bare_any_by_file() -> Counter[str]:
    """masdsl-relative file -> its parameters annotated exactly `Any` (not `Mapping[str, Any]`)."""
    return Counter({str(p.relative_to(PKG.parent)): n for p in _files() if (n := len(_bare_any(p)))})


def bare_any_params() -> int:
    """Function parameters in masdsl/ whose annotation is exactly `Any`."""
    return sum(bare_any_by_file().values())


def seam_any_params() -> dict[str, int]:
    """`env: Any`, `cfg: Any`, `workflow: Any` below masdsl/commands (the commands may hold a Config)."""
    counts = dict.fromkeys(SEAMS, 0)
    for path in _files():
        if path.is_relative_to(PKG / "commands"):
            continue
        for p in _bare_any(path):
            if p.arg in counts:
                counts[p.arg] += 1
    return counts


if __name__ == "__main__":
    print(f"bare Any parameters: {bare_any_params()}")
    print("seams typed Any below the commands: " + ", ".join(f"{k}: {v}" for k, v in seam_any_params().items()))
    for file, n in bare_any_by_file().most_common(15):
        print(f"{n:5d}  {file}")
