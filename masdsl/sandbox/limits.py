"""The resource limits of a sandboxed run, and the one converter from a config's `sandbox` block.

>>> Limits().max_procs == SandboxConfig().max_procs
True
>>> limits_from_config({"timeout_s": 2, "max_procs": 8}).max_procs
8
"""

from __future__ import annotations

from dataclasses import dataclass, fields, is_dataclass
from typing import Any, Literal, Mapping

from masdsl.config import SandboxConfig
from masdsl.errors import UserError, did_you_mean

Isolation = Literal["auto", "bwrap", "unshare", "none"]


@dataclass(frozen=True)
class Limits:
    """Resource limits of one sandboxed run.

    `timeout_s` is the wall-clock limit of *each* test in `run_tests` (a timer in the child); a
    `run_python` call is stopped by the parent's watchdog after `timeout_s` plus one second of
    start-up allowance (`masdsl.sandbox.process.START_UP_GRACE_S`); CPU time is limited to the
    same budget (rounded up, plus one second).

    Defaults: those of the config's `sandbox` block (`masdsl.config.SandboxConfig`), read from it,
    so a directly constructed `Limits()` limits a run exactly as a run made through the default
    config does (64 processes, 64 KB of output, ...). `max_open_files`, which the config does not
    set, is 64.
    """

    timeout_s: float = SandboxConfig.timeout_s
    memory_mb: int = SandboxConfig.memory_mb  # address space (RLIMIT_AS) of every process
    max_procs: int = SandboxConfig.max_procs  # processes/threads the code may have at once (RLIMIT_NPROC)
    max_file_mb: int = SandboxConfig.max_file_mb  # largest file it may write (RLIMIT_FSIZE)
    max_output_kb: int = SandboxConfig.max_output_kb  # stdout + stderr read before the run is killed
    max_open_files: int = 64  # RLIMIT_NOFILE
    isolation: Isolation = SandboxConfig.isolation  # type: ignore[assignment]
    # third-party packages a program may import (the workflow's `sandbox { packages: [...] }`);
    # none by default: the standard library only
    packages: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "packages", tuple(sorted(set(self.packages))))
        bad = [p for p in self.packages if not isinstance(p, str) or not p.isidentifier()]
        if bad:
            raise UserError(f"sandbox packages must be importable names such as \"numpy\"; got {bad[0]!r}")
        if self.timeout_s <= 0 or self.memory_mb < 64 or self.max_procs < 1:
            raise UserError(f"sandbox limits out of range: {self}")
        if self.isolation not in ("auto", "bwrap", "unshare", "none"):
            raise UserError(f"unknown sandbox isolation {self.isolation!r}: use auto, bwrap, unshare or none")


_NAMES = tuple(f.name for f in fields(Limits))


def _values(cfg: object) -> dict[str, Any]:
    """The limits' fields set in `cfg` (a mapping, or an object such as `SandboxConfig`), None
    where it does not set them."""
    if isinstance(cfg, Mapping) or (hasattr(cfg, "keys") and hasattr(cfg, "get")):  # OmegaConf nodes too
        if "sandbox" in cfg and not any(k in cfg for k in _NAMES):
            return _values(cfg["sandbox"])  # a whole config as a mapping: its `sandbox` block
        unknown = [str(k) for k in cfg.keys() if k not in _NAMES]
        if unknown:
            hint = did_you_mean(unknown[0], _NAMES)
            raise UserError(f"unknown sandbox limit `{unknown[0]}`" + (f" ({hint})" if hint else "")
                            + f": use {', '.join(_NAMES)}")
        return {k: cfg.get(k) for k in _NAMES}
    if is_dataclass(cfg) and not hasattr(cfg, "timeout_s") and hasattr(cfg, "sandbox"):
        return _values(cfg.sandbox)  # a whole `masdsl.config.Config`: its `sandbox` block
    return {k: getattr(cfg, k, None) for k in _NAMES}


def limits_from_config(cfg: object) -> Limits:
    """The one converter to `Limits`: from a config's `sandbox` block (`SandboxConfig`, or any
    object with those attributes), a whole `Config` or config mapping (its `sandbox` block), a
    mapping or an OmegaConf node of limits (unknown keys are a `UserError`), a `Limits`
    (returned as is) or None (the defaults). Fields it does not set keep their defaults; values are converted to the field's
    type.

    >>> limits_from_config(SandboxConfig(timeout_s=2)) == Limits(timeout_s=2.0)
    True
    >>> limits_from_config(None) == Limits()
    True
    >>> limits_from_config({"timeot_s": 2})
    Traceback (most recent call last):
    ...
    masdsl.errors.UserError: unknown sandbox limit `timeot_s` (did you mean `timeout_s`?): use timeout_s, memory_mb, max_procs, max_file_mb, max_output_kb, max_open_files, isolation, packages
    """
    if cfg is None:
        return Limits()
    if isinstance(cfg, Limits):
        return cfg
    defaults = Limits()
    try:
        values = {k: _converted(k, v, getattr(defaults, k)) for k, v in _values(cfg).items() if v is not None}
    except (TypeError, ValueError) as exc:
        raise UserError(f"bad sandbox limits {cfg!r}: {exc}") from None
    return Limits(**values)


def _converted(key: str, value: object, default: object) -> object:
    if key == "isolation":
        return str(value)
    if key == "packages":  # a list (or one name) of importable names
        return (str(value),) if isinstance(value, str) else tuple(str(v) for v in value)  # type: ignore[attr-defined]
    return type(default)(value)  # type: ignore[call-arg]


__all__ = ["Isolation", "Limits", "limits_from_config"]
