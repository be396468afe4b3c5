"""A script of benchmarks/ imported as a module, with benchmarks/ on the path for its neighbours."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Iterator

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def benchmark_module(name: str) -> Iterator[ModuleType]:
    """Yield benchmarks/<name>.py as a module (for a fixture); the path is restored after."""
    sys.path.insert(0, str(BENCH))  # scripts import their neighbours (`perf_doc`, `step_memory`)
    try:
        spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(BENCH))
