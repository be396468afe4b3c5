"""What a program in the bubblewrap sandbox can see: the interpreter, its standard library, the
shared libraries they load, and the third-party packages a workflow declares. Nothing else.

The sandbox's `/` is an empty tmpfs; `View.args()` builds it with bubblewrap arguments:

- the interpreter binary, at its own path (its RUNPATH names its own `lib`), and the shared
  libraries it and the standard library's extension modules load (`ldd`): a system library
  folder (`/usr/lib/x86_64-linux-gnu`) whole, any other library (a pyenv's `libpython3.11.so`)
  file by file; the top-level links of a merged `/usr` (`/lib -> usr/lib`) and `/etc/ld.so.cache`;
- the standard library folder (`lib/pythonX.Y`, `lib-dynload` inside), with an empty tmpfs over
  its `site-packages`/`dist-packages`, so no third-party package is even readable;
- each declared package by itself (its folder or module, its `.dist-info`, and a wheel's
  `<name>.libs` of bundled shared libraries) under `PACKAGES_DIR`, the one folder added to the
  program's `sys.path`.

No project tree, no virtualenv, no home, no run folder, no dataset is bound: they do not exist in
the sandbox. The interpreter runs with `-I -S` (`process.command`), so no `.pth` file, no
`site`/`sitecustomize` and no editable-install hook runs. Helper modules an env offers (Plan-Path's
`grid`) travel as source text in the job (`child.py`, `_install_modules`), so they need no bind.

>>> view = interpreter_view()
>>> any(dest == view.stdlib for _, dest in view.binds)
True
>>> find_package("no_such_package_x")
"package `no_such_package_x` is not installed in masdsl's Python"
"""

from __future__ import annotations

import atexit
import functools
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from masdsl.errors import UserError

PACKAGES_DIR = "/opt/masdsl/packages"  # inside the sandbox: where declared packages are bound
_SYSTEM_LIB_DIRS = ("/usr/lib", "/lib", "/usr/lib64", "/lib64", "/usr/lib32", "/lib32")
_THIRD_PARTY_DIRS = ("site-packages", "dist-packages")


@dataclass(frozen=True)
class View:
    """The paths bound read-only into the sandbox, and the folders masked inside them."""

    interpreter: str  # the binary run inside (the base interpreter, not a virtualenv's link)
    stdlib: str
    binds: tuple[tuple[str, str], ...]  # (source on the host, destination in the sandbox)
    masks: tuple[str, ...] = ()  # empty tmpfs over these (third-party folders of the stdlib)
    links: tuple[tuple[str, str], ...] = ()  # (target, link): `/lib -> usr/lib`
    packages: tuple[str, ...] = ()  # declared packages, bound under PACKAGES_DIR

    def args(self) -> list[str]:
        """bubblewrap arguments building this view on an empty root; every folder made on the way
        is 0755, so a run's own uid can enter it."""
        out: list[str] = []
        made: set[str] = {"/"}
        for target, link in self.links:
            out += ["--symlink", target, link]
            made.add(link)
        for source, dest in sorted(self.binds, key=lambda b: b[1]):
            for parent in reversed(Path(dest).parents):
                if str(parent) not in made and not _inside_bind(str(parent), self.binds):
                    out += ["--perms", "0755", "--dir", str(parent)]
                    made.add(str(parent))
            out += ["--ro-bind", source, dest]
        for mask in self.masks:
            out += ["--perms", "0755", "--tmpfs", mask]
        return out

    def with_packages(self, names: tuple[str, ...]) -> "View":
        """This view plus the declared packages `names` (a `UserError` names one not installed)."""
        if not names:
            return self
        binds = list(self.binds)
        for name in names:
            found = find_package(name)
            if isinstance(found, str):
                raise UserError(found + " (declared in the workflow's `sandbox { packages: [...] }`)")
            binds += [(path, f"{PACKAGES_DIR}/{os.path.basename(path)}") for path in found]
            own = [os.path.realpath(path) for path in found]  # its bundled `.libs`: bound above
            libs = {lib for lib in _ldd(_extensions(found)) if not _bound(os.path.realpath(lib), [(p, p) for p in own])}
            binds += [b for b in _lib_binds(libs) if not _bound(b[1], binds)]
        return View(self.interpreter, self.stdlib, tuple(dict.fromkeys(binds)), self.masks, self.links,
                    self.packages + names)

    def lines(self) -> list[str]:
        """What a program sees, one path a line (for `masdsl env` and the docs)."""
        shown = [f"{dest} (read-only)" if src == dest else f"{dest} (read-only, from {src})"
                 for src, dest in sorted(self.binds, key=lambda b: b[1])]
        return shown + [f"{mask} (empty: third-party packages hidden)" for mask in self.masks] + [
            "/tmp (private, empty)", "the run's working directory (fresh, the only writable folder)",
            "/dev (a minimal set)", "/proc (the sandbox's own processes)"]


def _inside_bind(path: str, binds: tuple[tuple[str, str], ...]) -> bool:
    return any(path != dest and Path(path).is_relative_to(dest) for _, dest in binds)


def _bound(path: str, binds: list[tuple[str, str]]) -> bool:
    return any(Path(path).is_relative_to(dest) for _, dest in binds)


def _base_interpreter() -> str:
    """The real binary: a virtualenv's `python` is a link to it (or, with `--copies`, a copy
    that finds its prefix through `pyvenv.cfg`, which the sandbox does not have)."""
    real = os.path.realpath(sys.executable)
    base = os.path.realpath(sys.base_prefix)
    if Path(real).is_relative_to(base):
        return real
    for name in (os.path.basename(real), f"python{sys.version_info[0]}.{sys.version_info[1]}"):
        candidate = os.path.join(base, "bin", name)
        if os.path.exists(candidate):
            return os.path.realpath(candidate)
    return real


def _stdlib() -> tuple[str, str]:
    """The standard library folder and its `lib-dynload` (the base interpreter's, not a venv's)."""
    paths = sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_prefix,
                                      "installed_base": sys.base_prefix, "installed_platbase": sys.base_prefix})
    stdlib = os.path.realpath(paths["stdlib"])
    dynload = next((os.path.realpath(p) for p in sys.path if p.endswith("lib-dynload")),
                   os.path.join(os.path.realpath(paths["platstdlib"]), "lib-dynload"))
    return stdlib, dynload


def _ldd(files: list[str]) -> set[str]:
    """Shared libraries `files` load, as the loader finds them (paths ldd prints)."""
    if not files or not shutil.which("ldd"):
        return set()
    found: set[str] = set()
    for start in range(0, len(files), 200):
        try:
            out = subprocess.run(["ldd", *files[start:start + 200]], capture_output=True, text=True, timeout=60).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        for line in out.splitlines():
            words = line.replace("=>", " ").split()
            found.update(w for w in words if w.startswith("/") and not w.endswith(":"))
    return {f for f in found if os.path.exists(f)}


def _lib_binds(libs: set[str]) -> list[tuple[str, str]]:
    """Binds for the shared libraries `libs` (as ldd names them): a system library folder whole
    (e.g. `/usr/lib/x86_64-linux-gnu`) unless it also holds Python packages, else the file alone
    at the path the loader looks in (a pyenv's `lib/libpython3.11.so.1.0`, named by RUNPATH)."""
    binds = []
    for lib in sorted(libs):
        real = os.path.realpath(lib)
        # the folder the loader looks in (`/lib64`, a link to `/usr/lib64` holding a link to the
        # loader) and the folder the file really is in
        for folder in dict.fromkeys((os.path.realpath(os.path.dirname(lib)), os.path.dirname(real))):
            system = any(Path(folder).is_relative_to(d) for d in _SYSTEM_LIB_DIRS)
            if system and not any(n.startswith("python") or n in _THIRD_PARTY_DIRS for n in _listdir(folder)) \
                    and not any(p.startswith("python") for p in Path(folder).parts):
                binds.append((folder, folder))
            elif folder == os.path.dirname(real):
                binds.append((real, lib))
    return list(dict.fromkeys(binds))


def _listdir(folder: str) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


def _extensions(paths: list[str]) -> list[str]:
    out = []
    for path in paths:
        if os.path.isfile(path) and path.endswith(".so"):
            out.append(path)
        for root, _dirs, names in os.walk(path):
            out += [os.path.join(root, n) for n in names if n.endswith(".so") or ".so." in n]
    return out


@functools.cache
def interpreter_view() -> View:
    """The interpreter and what it needs, computed once per process (it runs `ldd` once)."""
    binary = _base_interpreter()
    stdlib, dynload = _stdlib()
    binds = [(binary, binary), (stdlib, stdlib)]
    if not Path(dynload).is_relative_to(stdlib):
        binds.append((dynload, dynload))
    binds += [b for b in _lib_binds(_ldd([binary, *_extensions([dynload])])) if not _bound(b[1], binds)]
    if os.path.exists("/etc/ld.so.cache"):
        binds.append(("/etc/ld.so.cache", "/etc/ld.so.cache"))
    links = tuple((os.readlink(f"/{name}"), f"/{name}") for name in sorted(os.listdir("/"))
                  if os.path.islink(f"/{name}") and os.readlink(f"/{name}").lstrip("/").startswith("usr/"))
    masks = tuple(os.path.join(stdlib, d) for d in _THIRD_PARTY_DIRS if os.path.isdir(os.path.join(stdlib, d)))
    unique = tuple(dict.fromkeys(b for b in binds if not _bound(b[1], [x for x in binds if x[1] != b[1]])))
    return View(binary, stdlib, unique, masks, links)


def _top_level(name: str) -> str:
    return name.split(".", 1)[0]


def package_problem(name: str) -> str | None:
    """Why `name` cannot be a declared package (not an importable name, the standard library,
    not installed), or None; cheap: it reads no package metadata (what `masdsl check` asks).

    >>> package_problem("numpy") is None, package_problem("nump")
    (True, "package `nump` is not installed in masdsl's Python")
    """
    return _spec(name)[0]


def _spec(name: str) -> tuple[str | None, Any]:
    if not name.isidentifier():
        return f"package `{name}` is not an importable name (write the name `import` takes, e.g. `numpy`)", None
    if name in sys.stdlib_module_names:
        return f"package `{name}` is in the standard library: programs can always import it", None
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    if spec is None or spec.origin in (None, "built-in", "frozen") and not spec.submodule_search_locations:
        return f"package `{name}` is not installed in masdsl's Python", None
    return None, spec


def find_package(name: str) -> list[str] | str:
    """The paths to bind for the importable package `name` (its folder or module file, its
    `.dist-info`, its `<name>.libs`), or why it cannot be declared.

    >>> find_package("json")
    'package `json` is in the standard library: programs can always import it'
    """
    problem, spec = _spec(name)
    if spec is None:
        return problem
    locations = list(spec.submodule_search_locations or [])
    main = locations[0] if locations else str(spec.origin)
    site = os.path.dirname(main)
    paths = [main]
    for dist in importlib.metadata.packages_distributions().get(name, []):
        try:
            info = importlib.metadata.distribution(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        path = getattr(info, "_path", None)  # the .dist-info folder (PathDistribution)
        if path is not None and os.path.dirname(str(path)) == site:
            paths.append(str(path))
        for libs in {f"{name}.libs", f"{dist}.libs", f"{dist.replace('-', '_')}.libs"}:
            if os.path.isdir(os.path.join(site, libs)):
                paths.append(os.path.join(site, libs))
    return list(dict.fromkeys(paths))


@functools.cache
def linked_packages(names: tuple[str, ...]) -> str:
    """A folder of links to the declared packages `names`, for the modes without bubblewrap
    (their programs run with `-S` too, so they import what a workflow declares and nothing else;
    the files stay readable there: those modes do not confine reads)."""
    folder = tempfile.mkdtemp(prefix="masdsl-sbx-packages-")
    os.chmod(folder, 0o755)  # a run's own uid reads through it
    atexit.register(shutil.rmtree, folder, True)
    for name in names:
        found = find_package(name)
        if isinstance(found, str):
            raise UserError(found + " (declared in the workflow's `sandbox { packages: [...] }`)")
        for path in found:
            os.symlink(path, os.path.join(folder, os.path.basename(path)))
    return folder


__all__ = ["PACKAGES_DIR", "View", "find_package", "interpreter_view", "linked_packages", "package_problem"]
