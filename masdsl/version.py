"""masdsl's version, in the lowest layer so that any module may say it (`masdsl env`, `--version`)
without importing the root package, whose lazy API reaches the trainer."""

__version__ = "0.1.0"  # as pyproject.toml's `version`
