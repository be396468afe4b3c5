"""The test tree's own rules: no test module imports another test module; its folders mirror
masdsl/ (tests/runtime/backends for masdsl/runtime/backends, tests/benchmarks for benchmarks/);
and the size rules of masdsl/ hold here too (no file over 400 lines, no function over 60 without
a `# long:` reason).

A test module (`tests/**/test_*.py`), a conftest or a support module reaches no other Python
file under `tests/` (a test module, a conftest, a helper beside it), whether by `import`, by a
relative import, by a bare name on a patched `sys.path`, or by loading its file with
`importlib.util.spec_from_file_location`. What tests share lives in the `tests.support` package
and is imported from there, so a test module can be moved, renamed or deleted without breaking
another one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from masdsl.testing.layout import (MAX_FUNCTION_LINES, MAX_MODULE_LINES, unexplained_long_functions,
                                   unmirrored_test_folders)
from tests.support.overrides import NO_TRACKING

ROOT = Path(__file__).resolve().parents[1]
FILE_LOADERS = {"spec_from_file_location", "run_path", "SourceFileLoader"}


def checked_files(tests: Path) -> list[Path]:
    """The test modules, the conftests and the support modules under `tests`."""
    files = {*tests.rglob("test_*.py"), *tests.rglob("conftest.py"), *(tests / "support").rglob("*.py")}
    return sorted(f for f in files if "__pycache__" not in f.parts)


def _resolve(base: Path, dotted: str) -> Path | None:
    """The .py file (module or package) that `dotted` names below `base`, if there is one."""
    target = base.joinpath(*dotted.split(".")) if dotted else base
    for candidate in (target.with_name(target.name + ".py"), target / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _import_targets(node: ast.AST, path: Path, root: Path) -> list[Path]:
    """The files under `root` that an import statement in `path` loads (the module and, for
    `from X import y`, a submodule `X.y`)."""
    if isinstance(node, ast.Import):
        names, base = [alias.name for alias in node.names], None
    elif isinstance(node, ast.ImportFrom):
        module = node.module or ""
        names = [module] + [f"{module}.{a.name}" if module else a.name for a in node.names]
        base = path.parent.parents[node.level - 2] if node.level > 1 else path.parent if node.level else None
    else:
        return []
    found = []
    for name in names:
        if base is not None:  # relative: below the importing package
            target = _resolve(base, name)
        elif name.split(".")[0] == root.name:  # absolute from the repository root: `tests....`
            target = _resolve(root.parent, name)
        else:  # a bare name reaches a file beside the importer only through a patched sys.path
            target = _resolve(path.parent, name)
        if target is not None:
            found.append(target)
    return found


def _loaded_files(node: ast.AST, path: Path) -> list[Path]:
    """Test modules and conftests loaded by file: `spec_from_file_location(name, ".../test_x.py")`."""
    if not isinstance(node, ast.Call):
        return []
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if called not in FILE_LOADERS:
        return []
    strings = [n.value for arg in node.args for n in ast.walk(arg) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    return [path.parent / s for s in strings if Path(s).name == "conftest.py" or
            (Path(s).name.startswith("test_") and s.endswith(".py"))]


def violations(path: Path, root: Path) -> list[str]:
    """`file:line reaches other` for each file under `root` (outside `root/support`) that `path` loads."""
    support, out = root / "support", []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        for target in _import_targets(node, path, root) + _loaded_files(node, path):
            target = target.resolve()
            if target.is_relative_to(root) and not target.is_relative_to(support) and target != path.resolve():
                out.append(f"{path.relative_to(root.parent)}:{node.lineno} reaches {target.relative_to(root.parent)}")
    return out


def test_no_test_module_imports_another_test_module():
    tests = ROOT / "tests"
    found = [v for f in checked_files(tests) for v in violations(f, tests)]
    assert not found, ("test modules must not import other test modules, conftests or helpers beside them; "
                       "move what they share into tests/support/ and import it from `tests.support`:\n  "
                       + "\n  ".join(found))


@pytest.mark.parametrize("source, reached", [
    ("from .test_b import helper", "test_b.py"),
    ("from .conftest import Server", "conftest.py"),
    ("from . import test_b", "test_b.py"),
    ("from .helpers import chat_ids", "helpers.py"),
    ("from tests.area.test_b import helper", "test_b.py"),
    ("from tests.area import test_b", "test_b.py"),
    ("import tests.area.test_b", "test_b.py"),
    ("from test_b import helper  # sys.path patched", "test_b.py"),
    ("from ..other.test_c import x", "test_c.py"),
    ('spec = importlib.util.spec_from_file_location("b", Path(__file__).parent / "test_b.py")', "test_b.py"),
    ("from tests.support.toy import TOY", None),
    ("from tests.support import toy", None),
    ("import masdsl.lang", None),
    ("from pathlib import Path", None),
])
def test_the_rule_sees_each_way_of_reaching_a_test_module(tmp_path, source, reached):
    tests = tmp_path / "tests"
    for rel in ("area/test_a.py", "area/test_b.py", "area/conftest.py", "area/helpers.py", "other/test_c.py",
                "support/__init__.py", "support/toy.py"):
        (tests / rel).parent.mkdir(parents=True, exist_ok=True)
        (tests / rel).write_text("")
    (tests / "area" / "test_a.py").write_text(source + "\n")
    found = violations(tests / "area" / "test_a.py", tests)
    if reached is None:
        assert found == []
    else:
        assert len(found) == 1 and found[0].startswith("tests/area/test_a.py:1 reaches tests/") and found[0].endswith(reached), found


def _python_files() -> list[Path]:
    return sorted(f for f in (ROOT / "tests").rglob("*.py") if "__pycache__" not in f.parts)


def test_the_test_folders_mirror_the_package():
    stray = unmirrored_test_folders(ROOT / "tests")
    assert not stray, (f"test folders that mirror no folder of masdsl/ (or benchmarks/): {stray}; put each test "
                       "module in the folder of the code it tests")


def test_the_mirror_rule_sees_a_stray_folder(tmp_path):
    (tmp_path / "masdsl" / "runtime" / "backends").mkdir(parents=True)
    for rel in ("runtime/backends/test_a.py", "reliability/test_b.py", "support/test_c.py", "runtime/data/x.mas",
                "benchmarks/test_d.py"):
        (tmp_path / "tests" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "tests" / rel).write_text("")
    assert unmirrored_test_folders(tmp_path / "tests", tmp_path / "masdsl") == ["tests/reliability"]


def test_no_test_file_over_the_line_limit():
    big = {str(f.relative_to(ROOT)): n for f in _python_files() if (n := len(f.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not big, f"test files over {MAX_MODULE_LINES} lines (split them, shared parts into tests/support): {big}"


def test_long_test_functions_say_why():
    unexplained = [f"{f.relative_to(ROOT)}::{name} ({n} lines)" for f in _python_files()
                   for name, n in unexplained_long_functions(ast.parse(f.read_text()), f.read_text().splitlines())]
    assert not unexplained, f"test functions over {MAX_FUNCTION_LINES} lines with no `# long:` reason: {unexplained}"


def test_the_no_tracking_override_is_written_once():
    """Tests turn tracking off with `tests.support.overrides.NO_TRACKING` (a child process's script,
    one string, may spell it out: it cannot import the tests)."""
    spelled = [f"{f.relative_to(ROOT)}:{node.lineno}" for f in _python_files() if f.name != "overrides.py"
               for node in ast.walk(ast.parse(f.read_text())) if isinstance(node, ast.Constant)
               and node.value == NO_TRACKING]
    assert not spelled, f"write `NO_TRACKING` (tests/support/overrides.py) instead of the override: {spelled}"
