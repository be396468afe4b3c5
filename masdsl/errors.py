"""The root of every user-facing error. The CLI prints these without a traceback (exit 2).

Subclasses: `masdsl.lang.errors.MasError` (a .mas file), `ConfigError` (also `masdsl.config.ConfigError`),
`DataError` (a data file or row), `ModelError` (a model that cannot be resolved or loaded),
`CheckpointError`, `StepFailed` (a rollout step whose env or engine kept failing). Anything
else reaching the CLI is a bug in masdsl (exit 3).
"""

from __future__ import annotations

import difflib
from typing import Iterable


def suggest(name: str, candidates: Iterable[str]) -> str | None:
    """The closest candidate, for a "did you mean" hint (or None). The one spelling checker of
    masdsl: the checker, the config, the registries and the CLI all ask it.

    >>> suggest("testr", ["coder", "tester"]), suggest("zzz", ["coder"])
    ('tester', None)
    """
    matches = difflib.get_close_matches(name, sorted(set(candidates)), n=1, cutoff=0.6)
    return matches[0] if matches else None


def did_you_mean(name: str, candidates: Iterable[str], fmt: str = "`{}`") -> str | None:
    """`did you mean `x`?` for the closest candidate, or None.

    >>> did_you_mean("policy.sharde", ["policy.shared"])
    'did you mean `policy.shared`?'
    """
    near = suggest(name, candidates)
    return f"did you mean {fmt.format(near)}?" if near else None


class UserError(Exception):
    """A mistake the user can fix. `render()` may give a richer, multi-line form."""

    def render(self, color: bool = False) -> str:
        return str(self)


class ConfigError(UserError, ValueError):
    """A user mistake in configuration (also `masdsl.config.ConfigError`). `key`: the dotted key
    it is about (None: no one key); `file`, `line`, `col`: where in a `--config` file, if known.

    >>> e = ConfigError("`train.steps` must be at least 1; got 0", key="train.steps")
    >>> e.key, e.file
    ('train.steps', None)
    """

    def __init__(self, message: str, *, key: str | None = None, file: str | None = None,
                 line: int | None = None, col: int | None = None):
        super().__init__(message)
        self.key, self.file, self.line, self.col = key, file, line, col


class DataError(UserError):
    """A data file or row is missing or malformed; the message names the file and row."""


class ModelError(UserError):
    """A model name or folder cannot be resolved or loaded."""


class CheckpointError(UserError):
    """A checkpoint is missing, incomplete, or belongs to another workflow."""


class StepFailed(UserError):
    """A rollout step whose infrastructure still failed after its retries: an env call that
    kept raising (or whose Ray worker kept dying), or an inference engine that died too often.

    A malformed model output is never this (it scores 0 or the parser's penalty). `masdsl run`
    stops on it after saving a checkpoint of the last completed step (`checkpoint`), from which
    `--resume` continues; `masdsl eval` stops with its message.

    >>> e = StepFailed("env step failed", role="tester", task_id="t3", turn=1, error="OSError: gone")
    >>> str(e), e.role, e.checkpoint is None
    ('env step failed', 'tester', True)
    """

    def __init__(self, message: str, *, role: str | None = None, task_id: str | None = None,
                 turn: int | None = None, error: str = "", checkpoint: object = None):
        super().__init__(message)
        self.role, self.task_id, self.turn, self.error = role, task_id, turn, error
        self.checkpoint = checkpoint  # the saved checkpoint folder (a Path), once train() saved one
