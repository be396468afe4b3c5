"""The root of every user-facing error. The CLI prints these without a traceback (exit 2).

Subclasses: `masdsl.lang.errors.MasError` (a .mas file), `masdsl.config.ConfigError`,
`DataError` (a data file or row), `ModelError` (a model that cannot be resolved or loaded),
`CheckpointError`. Anything else reaching the CLI is a bug in masdsl (exit 3).
"""

from __future__ import annotations


class UserError(Exception):
    """A mistake the user can fix. `render()` may give a richer, multi-line form."""

    def render(self, color: bool = False) -> str:
        return str(self)


class DataError(UserError):
    """A data file or row is missing or malformed; the message names the file and row."""


class ModelError(UserError):
    """A model name or folder cannot be resolved or loaded."""


class CheckpointError(UserError):
    """A checkpoint is missing, incomplete, or belongs to another workflow."""
