"""A user file that fails on import."""

LIMIT = 3
raise RuntimeError("cannot reach the scoring service")
