"""What a process masdsl starts itself does first: leave out imports masdsl never uses.

transformers imports scikit-learn whenever it is installed, for one thing: `roc_curve`, which
assisted generation (a draft model with a confidence threshold) calls. masdsl never runs assisted
generation, yet scikit-learn is installed wherever masdsl trains (MLflow requires it), so every
process that loads a model paid for it: 1.2-1.5 CPU-s of `import transformers.models.llama` (6.9
instead of 8.2 CPU-s) and 2-3 CPU-s of a one-step `masdsl run` on the tiny model (14.0 instead of
16.5, both measured here; docs/performance.md `## test suite`).

`start_owned_process()` marks such modules absent (`sys.modules[name] = None`: `import` raises
ImportError and `importlib.util.find_spec` answers None, which is how transformers asks). It is
called only where masdsl owns the whole process (the `masdsl` command and the Ray actors and
tasks masdsl starts: engine hosts, learner workers, sweep trials), never by `import masdsl` or
the Python API: a user's own process may well want scikit-learn, or assisted generation.

>>> import sys
>>> saved = {name: sys.modules.pop(name) for name in UNUSED if name in sys.modules}
>>> start_owned_process()
>>> import importlib.util; importlib.util.find_spec("sklearn") is None
True
>>> for name in UNUSED: del sys.modules[name]
>>> sys.modules.update(saved)
"""

from __future__ import annotations

import sys

UNUSED = ("sklearn",)  # imported by transformers only for assisted generation (see the module docstring)


def start_owned_process() -> None:
    """In a process masdsl started itself: mark `UNUSED` modules absent, unless already imported."""
    for name in UNUSED:
        if name not in sys.modules:
            sys.modules[name] = None  # type: ignore[assignment]
