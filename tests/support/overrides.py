"""Override lists the tests repeat.

>>> tiny_hf("/m", ["a", "b"])
['policy.a.model=/m', 'policy.b.model=/m', 'runtime.engine=hf', 'tracking.enabled=false']
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

NO_TRACKING = "tracking.enabled=false"  # tests never write to an MLflow store unless they test tracking


def tiny_hf(model_dir: str | Path, policies: Iterable[str] = ("shared",)) -> list[str]:
    """Every policy on the model folder `model_dir` (the tiny test model), the hf engine, no tracking."""
    return [*(f"policy.{p}.model={model_dir}" for p in policies), "runtime.engine=hf", NO_TRACKING]
