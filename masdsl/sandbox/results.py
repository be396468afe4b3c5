"""What a sandboxed run reports: `SandboxResult` (a program) and `TestReport` (tests).

>>> TestReport([TestResult(True, "pass"), TestResult(False, "timeout", "timed out")]).pass_rate
0.5
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SandboxResult:
    """The outcome of `run_python`. `ok`: exit status 0, within every limit."""

    stdout: str
    stderr: str
    returncode: int
    timed_out: bool
    memory_error: bool
    wall_s: float
    output_truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not (self.timed_out or self.memory_error or self.output_truncated)


@dataclass(frozen=True)
class TestResult:
    """One test: `status` is pass, fail (wrong answer/assert), error, timeout, memory or crash."""

    __test__ = False  # not a pytest test class

    passed: bool
    status: str
    error: str = ""
    output: str | None = None  # what the program printed (stdin/stdout tests)


@dataclass(frozen=True)
class TestReport:
    """All tests of one `run_tests` call, in order; `setup_error` when the code itself failed."""

    __test__ = False

    results: list[TestResult]
    setup_error: str = ""
    stderr_tail: str = ""
    wall_s: float = 0.0

    @property
    def passed(self) -> list[bool]:
        return [r.passed for r in self.results]

    @property
    def pass_rate(self) -> float:
        return sum(self.passed) / len(self.results) if self.results else 0.0

    @property
    def timed_out(self) -> bool:
        return any(r.status == "timeout" for r in self.results)

    @property
    def memory_error(self) -> bool:
        return any(r.status == "memory" for r in self.results)


__all__ = ["SandboxResult", "TestReport", "TestResult"]
