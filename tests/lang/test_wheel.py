"""The grammar ships inside the wheel (`masdsl/lang/mas.lark`, a link to `grammar/mas.lark` in
the source tree) and the parser loads it from an installed wheel."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


@pytest.mark.slow
def test_wheel_contains_and_loads_the_grammar(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "grammar", src / "grammar")
    shutil.copytree(ROOT / "masdsl", src / "masdsl", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    assert (src / "masdsl" / "lang" / "mas.lark").is_symlink()
    out = tmp_path / "whl"
    pip = [sys.executable, "-m", "pip"]
    r = subprocess.run(pip + ["wheel", ".", "--no-deps", "--no-build-isolation", "-q", "-w", str(out)], cwd=src,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    (wheel,) = out.glob("masdsl-*.whl")
    with zipfile.ZipFile(wheel) as z:
        assert z.read("masdsl/lang/mas.lark").decode() == (ROOT / "grammar" / "mas.lark").read_text()
    site = tmp_path / "site"
    r = subprocess.run(pip + ["install", "--no-deps", "-q", "--target", str(site), str(wheel)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    probe = ("import masdsl, masdsl.lang.parse as p; "
             "m, d = p.parse_text('flow { start -> a -> end }', 'w.mas'); "
             "print(masdsl.__file__); print(len(m.flows[0].edges), d)")
    r = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    where, result = r.stdout.splitlines()
    assert where.startswith(str(site)) and result == "1 []"
