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

>>> finder = DeferImports("masdsl_doc_absent", {"sklearn": ("sklearn.metrics", ("roc_curve",))})
>>> finder.find_spec("another.module", None) is None
True
"""

from __future__ import annotations

import importlib
import importlib.abc
import sys
from typing import Any, Mapping

# module -> {package made to look absent while it runs: (the module to import later, the names it took)}
DEFERRED: dict[str, dict[str, tuple[str, tuple[str, ...]]]] = {
    "transformers.generation.candidate_generator": {"sklearn": ("sklearn.metrics", ("roc_curve",))},
}


def start_owned_process() -> None:
    """In a process masdsl started itself: defer `DEFERRED` (idempotent; a module already imported
    is left as it is)."""
    for module, packages in DEFERRED.items():
        if module not in sys.modules and not any(getattr(f, "module", None) == module for f in sys.meta_path):
            sys.meta_path.insert(0, DeferImports(module, packages))


class DeferImports(importlib.abc.MetaPathFinder):
    """Finds `module` through the other finders and runs it with `packages` looking absent, then
    binds each name it would have imported from them to a function importing it on first call."""

    def __init__(self, module: str, packages: Mapping[str, tuple[str, tuple[str, ...]]]):
        self.module, self.packages = module, dict(packages)

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != self.module:
            return None
        sys.meta_path.remove(self)  # one module, once
        spec = next((s for f in sys.meta_path if hasattr(f, "find_spec")
                     for s in [f.find_spec(name, path, target)] if s is not None), None)
        if spec is not None and spec.loader is not None:
            spec.loader = _HidingLoader(spec.loader, self.packages)
        return spec


class _HidingLoader(importlib.abc.Loader):
    def __init__(self, loader: Any, packages: Mapping[str, tuple[str, tuple[str, ...]]]):
        self.loader, self.packages = loader, packages

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, ...: the real loader's
        return getattr(self.loader, name)

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        hidden = [p for p in self.packages if p not in sys.modules]
        for package in hidden:
            sys.modules[package] = None  # type: ignore[assignment]
        try:
            self.loader.exec_module(module)
        finally:
            for package in hidden:
                if sys.modules.get(package, 0) is None:
                    del sys.modules[package]
        for package in hidden:
            source, names = self.packages[package]
            for name in names:
                if not hasattr(module, name):
                    setattr(module, name, _on_first_call(source, name))


def _on_first_call(source: str, name: str) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(source), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    return call
