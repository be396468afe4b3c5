"""The `code` environment: a coder writes a program, a tester writes tests, both refine.

State holds the task's real tests, the latest `code` and the latest generated `tests`. A role
acts through its parsed fields: a non-empty `code` string replaces the code, a non-empty
`tests` list replaces the generated tests; anything else (a failed parse) changes nothing.
`env.failures` reports the code on the *generated* tests (what the coder may see next turn);
the real tests are used only by `success` and the rewards that name `task.tests`.

>>> env = CodeEnv()
>>> s0 = env.reset({"id": "t", "tests": ["assert inc(1) == 2"]})
>>> s1 = env.apply(s0, "tester", {"tests": ["assert inc(0) == 1", "assert inc(2) == 4"], "ok": True})
>>> s2 = env.apply(s1, "coder", {"code": "def inc(x):\\n    return x + 1", "ok": True})
>>> print(env.view(s2)["failures"])
1/2 generated tests pass. Failing:
- assert inc(2) == 4  -> AssertionError
>>> env.success(s2), env.success(s1), s0.code
(True, False, '')
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from masdsl.envs.registry import env
from masdsl.sandbox import Limits, TestReport, limits_from_config, run_tests

MAX_FAILURES_SHOWN = 5
MAX_LINE = 240


@dataclass(frozen=True)
class CodeState:
    """One episode. `real_tests` come from the task; `tests` are the tester's."""

    task_id: str
    real_tests: tuple[Any, ...]
    code: str = ""
    tests: tuple[Any, ...] = ()
    last_role: str = ""
    history: tuple[str, ...] = field(default=(), repr=False)  # roles in the order they acted


def _clip(text: str, n: int = MAX_LINE) -> str:
    text = " ".join(str(text).split()) if "\n" not in str(text) else str(text).replace("\n", "\\n")
    return text if len(text) <= n else text[: n - 3] + "..."


def _describe_test(test: Any) -> str:
    if isinstance(test, str):
        return _clip(test)
    pair = test if isinstance(test, Mapping) else {"input": test[0], "output": test[1]}
    return f"input {_clip(pair['input'], 80)!s} expected {_clip(pair['output'], 80)!s}"


def failure_report(code: str, tests: tuple[Any, ...] | list[Any], report: TestReport | None = None,
                   *, limits: Limits | None = None) -> str:
    """A short text for a prompt: how many tests pass and the first few failures with reasons.

    >>> failure_report("", ["assert f() == 1"])
    'no code yet'
    >>> failure_report("def f():\\n    return 1", [])
    'no generated tests yet'
    >>> failure_report("def f(:", ["assert f() == 1"])
    'the code does not run: SyntaxError: invalid syntax (solution.py, line 1)'
    """
    if not code.strip():
        return "no code yet"
    if not tests:
        return "no generated tests yet"
    try:
        report = report or run_tests(code, list(tests), limits=limits)
    except Exception as exc:  # noqa: BLE001 - malformed tests are reported, not raised
        return f"the tests could not run: {exc}"
    if report.setup_error:
        return f"the code does not run: {_clip(report.setup_error)}"
    failing = [(t, r) for t, r in zip(tests, report.results) if not r.passed]
    head = f"{len(tests) - len(failing)}/{len(tests)} generated tests pass."
    if not failing:
        return head
    lines = [head + " Failing:"]
    for test, result in failing[:MAX_FAILURES_SHOWN]:
        why = result.error or result.status
        if result.output is not None and result.status == "fail":
            why = f"got {_clip(result.output, 80)}"
        lines.append(f"- {_describe_test(test)}  -> {_clip(why, 160)}")
    if len(failing) > MAX_FAILURES_SHOWN:
        lines.append(f"- ... and {len(failing) - MAX_FAILURES_SHOWN} more")
    return "\n".join(lines)


def _valid_tests(value: Any) -> tuple[Any, ...] | None:
    if not isinstance(value, (list, tuple)) or not value:
        return None
    if all(isinstance(t, str) and t.strip() for t in value):
        return tuple(value)
    if all(isinstance(t, Mapping) and "input" in t and "output" in t for t in value):
        return tuple({"input": str(t["input"]), "output": str(t["output"])} for t in value)
    return None


class LazyView(Mapping):
    """A read-only mapping whose values are computed on first access (the failure report runs
    the sandbox, so a prompt that never shows it costs nothing).

    >>> v = LazyView(a=lambda: 1)
    >>> v["a"], dict(v), "b" in v
    (1, {'a': 1}, False)
    """

    def __init__(self, **getters: Any) -> None:
        self._getters, self._values = getters, {}

    def __getitem__(self, key: str) -> Any:
        if key not in self._values:
            self._values[key] = self._getters[key]()
        return self._values[key]

    def __iter__(self):
        return iter(self._getters)

    def __len__(self) -> int:
        return len(self._getters)


@env("code", fields=("failures", "code", "tests"))
class CodeEnv:
    """Sandboxed Python: `code` from a coder, `tests` from a tester (asserts or stdin/stdout pairs).

    Fields: `env.code` (latest code), `env.tests` (latest generated tests), `env.failures` (a
    report of the code on the generated tests). Success: the code passes all the task's tests.
    Every sandbox run uses the env's own `limits` (a `Limits` or a config mapping; None: the
    defaults).
    """

    def __init__(self, limits: Limits | Mapping[str, Any] | None = None) -> None:
        self.limits = limits_from_config(limits)

    def reset(self, task: Mapping[str, Any]) -> CodeState:
        tests = task.get("tests") or ()
        return CodeState(task_id=str(task.get("id", "")), real_tests=tuple(tests))

    def apply(self, state: CodeState, role: str, fields: Mapping[str, Any]) -> CodeState:
        changes: dict[str, Any] = {"last_role": role, "history": state.history + (role,)}
        code = fields.get("code")
        if isinstance(code, str) and code.strip():
            changes["code"] = code
        tests = _valid_tests(fields.get("tests"))
        if tests is not None:
            changes["tests"] = tests
        return replace(state, **changes)

    def view(self, state: CodeState) -> Mapping[str, Any]:
        return LazyView(
            code=lambda: state.code,
            tests=lambda: list(state.tests),
            failures=lambda: failure_report(state.code, state.tests, limits=self.limits),
        )

    def success(self, state: CodeState) -> bool:
        if not state.code.strip() or not state.real_tests:
            return False
        report = run_tests(state.code, list(state.real_tests), limits=self.limits)
        return bool(report.results) and all(report.passed)
