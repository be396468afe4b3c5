"""What a process masdsl starts itself does first: defer an import masdsl does not need at start-up.

transformers imports scikit-learn whenever it is installed, for one name: `roc_curve`, which only
assisted generation (a draft model with a confidence threshold) calls. masdsl never runs assisted
generation, yet scikit-learn is installed wherever masdsl trains (MLflow requires it), so every
process that loads a model paid for it: about 1 CPU-s of `import transformers.models.llama` (7.6
instead of 8.6 CPU-s, means of four runs) and of a one-step `masdsl run` on the tiny model (14.3
instead of 16.8, three noisy pairs; docs/performance.md `## test suite`).

`start_owned_process()` makes scikit-learn look absent *only while that one transformers module
runs* (`sys.modules["sklearn"] = None`: its `is_sklearn_available()` asks `find_spec`, which then
answers None), and gives the module a `roc_curve` that imports scikit-learn's on its first call.
Nothing else changes: a reward function or env that imports scikit-learn gets it, and assisted
generation still works. It is called only where masdsl owns the process (the `masdsl` command and
the Ray actors and tasks masdsl starts: engine hosts, learner workers, sweep trials), never by
`import masdsl` or the Python API.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from typing import Any, NamedTuple


class Deferral(NamedTuple):
    module: str  # a module that imports `package` at its top when `package` is installed
    package: str  # made to look absent while `module` runs
    source: str  # where the names `module` would have taken live
    names: tuple[str, ...]


DEFERRALS = (Deferral("transformers.generation.candidate_generator", "sklearn", "sklearn.metrics", ("roc_curve",)),)


def start_owned_process() -> None:
    """In a process masdsl started itself: install `DEFERRALS` (idempotent; a module already
    imported is left as it is)."""
    waiting = {f.deferral.module for f in sys.meta_path if isinstance(f, DeferImports)}
    for deferral in DEFERRALS:
        if deferral.module not in sys.modules and deferral.module not in waiting:
            sys.meta_path.insert(0, DeferImports(deferral))


class DeferImports(importlib.abc.MetaPathFinder):
    """Finds the deferral's module through the other finders and runs it with the package
    looking absent, then binds each name it would have taken to a function importing it on first call."""

    def __init__(self, deferral: Deferral):
        self.deferral = deferral

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != self.deferral.module:
            return None
        sys.meta_path.remove(self)  # one module, once
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _HidingLoader(spec.loader, self.deferral)
        return spec


class _HidingLoader(importlib.abc.Loader):
    def __init__(self, loader: Any, deferral: Deferral):
        self.loader, self.deferral = loader, deferral

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, ...: the real loader's
        return getattr(self.loader, name)

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        package = self.deferral.package
        if package in sys.modules:  # already imported: nothing to save
            self.loader.exec_module(module)
            return
        sys.modules[package] = None  # type: ignore[assignment]
        try:
            self.loader.exec_module(module)
        finally:
            if sys.modules.get(package, 0) is None:
                del sys.modules[package]
        for name in self.deferral.names:
            if not hasattr(module, name):
                setattr(module, name, _on_first_call(self.deferral.source, name))


def _on_first_call(source: str, name: str) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(source), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    return call
