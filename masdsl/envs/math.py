"""The `math` environment: a reasoner answers, a tool agent writes Python that runs in the sandbox.

A role acts through its parsed fields: a non-empty `code` string is run in the sandbox and its
stdout becomes `env.tool_output` (with a note and the stderr tail when it fails); a non-empty
`answer` is recorded as that role's answer. Success: the answer of the answering role (by
default `reasoner`; else the last answer given) is equivalent to the task's answer, judged by
math-verify (`masdsl.envs.rewards.correct`).

>>> env = MathEnv()
>>> s = env.reset({"id": "q1", "question": "6 * 7?", "answer": "42"})
>>> s = env.apply(s, "tool", {"code": "print(6 * 7)", "ok": True})
>>> env.view(s)["tool_output"]
'42'
>>> env.success(env.apply(s, "reasoner", {"answer": "42", "ok": True}))
True
>>> env.success(env.apply(s, "reasoner", {"answer": "", "ok": False}))
False
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

from masdsl.envs.registry import env
from masdsl.envs.rewards import equivalent
from masdsl.sandbox import Limits, limits_from_config, run_python

# What a prompt shows of a program's output: its head and its tail (the answer is on the last line).
# A model's program can print anything up to the sandbox's output limit; a digit is a token to
# Qwen's tokenizer, so 2,000 characters of digits once made a reasoner's prompt longer than
# `runtime.max_prompt_tokens` and stopped a training run.
TOOL_OUTPUT_HEAD, TOOL_OUTPUT_TAIL = 300, 700


@dataclass(frozen=True)
class MathState:
    task_id: str
    reference: str
    tool_code: str = ""
    tool_output: str = ""
    answers: tuple[tuple[str, str], ...] = ()  # (role, answer) in the order given
    last_role: str = ""

    def answer_of(self, role: str | None) -> str:
        """The latest answer of `role` (None: of anyone), "" when there is none."""
        for who, answer in reversed(self.answers):
            if role is None or who == role:
                return answer
        return ""


def clipped(text: str, head: int = TOOL_OUTPUT_HEAD, tail: int = TOOL_OUTPUT_TAIL) -> str:
    """`text` whole when short, else its first `head` and last `tail` characters around a note.

    >>> clipped("0123456789", head=2, tail=3)
    '01\\n[... 5 characters not shown ...]\\n789'
    >>> clipped("short")
    'short'
    """
    if len(text) <= head + tail:
        return text
    return f"{text[:head]}\n[... {len(text) - head - tail} characters not shown ...]\n{text[-tail:]}"


def tool_output(code: str, limits: Limits | None = None) -> str:
    """What a tool program printed, clipped; when it failed, a note and the tail of its stderr.

    >>> tool_output("print('a')\\nraise ValueError('bad')").splitlines()[-1]
    'ValueError: bad'
    """
    result = run_python(code, limits=limits)
    text = clipped(result.stdout.strip())
    if result.ok:
        return text
    why = "timed out" if result.timed_out else "ran out of memory" if result.memory_error else \
        "printed too much" if result.output_truncated else f"exited with status {result.returncode}"
    tail = [ln for ln in result.stderr.strip().splitlines() if ln.strip()][-3:]
    return "\n".join([text, f"[the program {why}]", *tail]).strip()


@env("math", fields=("tool_output", "tool_code"))
class MathEnv:
    """Math word problems with a Python tool. Fields: `env.tool_output` (stdout of the tool
    role's last program, or its error), `env.tool_code` (that program).
    Success: the reasoner's answer equals the task's `answer`. Tool programs run under the env's
    own `limits` (a `Limits` or a config mapping; None: the defaults)."""

    def __init__(self, limits: Limits | Mapping[str, Any] | None = None, answer_role: str = "reasoner") -> None:
        self.limits = limits_from_config(limits)
        self.answer_role = answer_role

    def reset(self, task: Mapping[str, Any]) -> MathState:
        return MathState(task_id=str(task.get("id", "")), reference=str(task.get("answer", "")))

    def apply(self, state: MathState, role: str, fields: Mapping[str, Any]) -> MathState:
        changes: dict[str, Any] = {"last_role": role}
        code = fields.get("code")
        if isinstance(code, str) and code.strip():
            changes["tool_code"] = code
            changes["tool_output"] = tool_output(code, self.limits)
        answer = fields.get("answer")
        if isinstance(answer, (str, int, float)) and not isinstance(answer, bool) and str(answer).strip():
            changes["answers"] = state.answers + ((role, str(answer).strip()),)
        return replace(state, **changes)

    def view(self, state: MathState) -> dict[str, Any]:
        return {"tool_output": state.tool_output, "tool_code": state.tool_code}

    def success(self, state: MathState) -> bool:
        answer = state.answer_of(self.answer_role) or state.answer_of(None)
        return equivalent(answer, state.reference)

    def wrong_number(self, state: MathState) -> str:  # `train.eval_probe=wrong_number` (masdsl.runtime.probes)
        return wrong_number(state.reference)


def wrong_number(reference: str) -> str:
    """A number a program could have printed that is not `reference`: about 10 % off it (at least
    1), so that a reader who copies it is wrong and one who checks the problem can tell. A
    reference that is no plain number (a fraction, an expression) gets "0" unless it means zero,
    then "1". Deterministic in the reference.

    >>> wrong_number("42"), wrong_number("3"), wrong_number("-250"), wrong_number("0")
    ('46', '4', '-275', '1')
    >>> wrong_number("12.5"), wrong_number("1,200"), wrong_number("3/4"), wrong_number("0/5")
    ('13.75', '1320', '0', '1')
    """
    text = reference.strip().replace(",", "")
    try:
        value = float(text)
    except ValueError:
        return "1" if equivalent("0", reference) else "0"
    if value.is_integer() and "." not in text:
        whole = int(value)
        return str(whole + (1 if whole >= 0 else -1) * max(1, round(abs(whole) / 10)))
    return f"{value * 1.1:.10g}" if value else "1"
