"""What the three grid games (sudoku, sokoban, plan_path) share.

**Action protocol.** `apply(state, role, fields)` reads field *names*, never role names; the
first of these present is the action:

- `grid` (sudoku) or `moves` (sokoban, plan_path): the planner's action, applied to the board.
  A value of the wrong kind for the game (a `moves` list sent to sudoku) is invalid.
- `code`: a tool program. It runs in the sandbox with the board text on stdin; its stdout
  (plus a short note when it fails) becomes `env.tool_output`. The board does not change. Its
  reward is the reward the planner *would* get by submitting that stdout (parsed with the same
  parser a planner's output goes through: `grid` for sudoku, `actions` for the moves games), so
  a tool that prints a correct plan is rewarded like a planner that plays it.

An empty value (what the runtime stores after a failed parse, `fields["ok"]` False) or a value
of the wrong type is an **invalid action**: the board is unchanged, the reward is
`INVALID_PENALTY` and `valid()` is False. A role with none of these fields is a no-op (reward 0).

**Env-bound functions.** `step_reward()`, `valid()`, `solved()` and `progress()` are registered
once here, bound to all three envs (`FunctionSpec.envs`), and dispatch on the state they get:
every game state is a `GameState`, which records the last action's reward and legality and
implements `solved()` and `progress()`.

**Splits.** Train and eval are disjoint by construction twice over: train rows use even seeds
and eval rows odd ones, and a puzzle is kept for a split only if the SHA-256 of its content
falls in that split's half (`content_split`), so two seeds that happen to generate the same
puzzle can never put it in both splits. Rows are deterministic given (split, n), and
`rows(split, n)` is a prefix of `rows(split, m)` for n <= m.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Mapping

from masdsl.envs.registry import function
from masdsl.errors import DataError, UserError

GAMES = ("sudoku", "sokoban", "plan_path")
INVALID_PENALTY = -0.5
SPLITS = ("train", "eval")
DIRS = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}
TOOL_OUTPUT_CHARS = 2000  # the tool's stdout shown to the planner is cut to this many characters
ACTION_FIELDS = ("grid", "moves", "code")

Cell = tuple[int, int]


@dataclass(frozen=True, kw_only=True)
class GameState:
    """Fields every game state has; game states subclass this and add their board.

    `moves` counts planner moves applied so far (sudoku: grid submissions); `last_*` describe
    the most recent action (of any role), `feedback` says in words what happened to it.
    """

    moves: int = 0
    last_role: str = ""
    last_valid: bool = True
    last_reward: float = 0.0
    tool_code: str = ""
    tool_output: str = ""
    feedback: str = ""

    def solved(self) -> bool:  # pragma: no cover - every game overrides it
        raise NotImplementedError

    def progress(self) -> float:  # pragma: no cover - every game overrides it
        raise NotImplementedError


def pick_action(fields: Mapping[str, Any]) -> tuple[str | None, Any]:
    """The action a role's parsed fields carry: `(field name, value)`, or `(None, None)`.

    >>> pick_action({"output": "...", "ok": True, "moves": ["U"]})
    ('moves', ['U'])
    >>> pick_action({"output": "...", "ok": False})
    (None, None)
    """
    for name in ACTION_FIELDS:
        if name in fields:
            return name, fields[name]
    return None, None


def invalid(state: GameState, role: str, why: str) -> GameState:
    """`state` after an invalid action by `role`: board unchanged, penalty, `valid()` False."""
    return replace(state, last_role=role, last_valid=False, last_reward=INVALID_PENALTY,
                   feedback=f"invalid action: {why}")


def noop(state: GameState, role: str) -> GameState:
    """`state` after a role whose fields carry no game action (reward 0, still valid)."""
    return replace(state, last_role=role, last_valid=True, last_reward=0.0,
                   feedback="no action (no `grid`, `moves` or `code` field)")


def normalise_moves(moves: Any) -> list[str] | None:
    """Moves as a list of "U"/"D"/"L"/"R", or None when any item is not a direction.

    >>> normalise_moves(["u", "Right", "D"])
    ['U', 'R', 'D']
    >>> normalise_moves(["U", "jump"]) is None, normalise_moves("UD") is None
    (True, True)
    """
    if not isinstance(moves, (list, tuple)):
        return None
    words = {"UP": "U", "DOWN": "D", "LEFT": "L", "RIGHT": "R"}
    out = []
    for m in moves:
        if not isinstance(m, str):
            return None
        key = m.strip().upper()
        key = words.get(key, key)
        if key not in DIRS:
            return None
        out.append(key)
    return out


def run_tool(code: str, stdin: str, limits: Any = None) -> tuple[str, str | None]:
    """Run a tool program in the sandbox: `(text for the planner, raw stdout or None)`.

    The raw stdout is None when the program failed (non-zero exit, timeout, memory limit);
    the text then ends with a short note and the tail of its stderr.
    """
    from masdsl.envs.sandbox import run_python  # the only place generated code runs

    result = run_python(code, stdin, limits=limits)
    text = result.stdout[:TOOL_OUTPUT_CHARS]
    if result.ok:
        return text, result.stdout
    if result.timed_out:
        why = "timed out"
    elif result.memory_error:
        why = "ran out of memory"
    else:
        why = f"exited with status {result.returncode}"
    tail = result.stderr.strip().splitlines()[-3:]
    note = f"[the program {why}]" + ("\n" + "\n".join(tail) if tail else "")
    return (text + "\n" + note).strip(), None


def tool_step(state: GameState, role: str, code: Any, *, stdin: str, limits: Any,
              score: Callable[[str], GameState]) -> GameState:
    """`state` after a tool program: output recorded, board unchanged, reward from `score`.

    `score(stdout)` returns the state a planner would reach by submitting `stdout`; only its
    `last_valid`, `last_reward` and `feedback` are kept.
    """
    if not isinstance(code, str) or not code.strip():
        return replace(invalid(state, role, "no program"), tool_code="", tool_output="")
    text, stdout = run_tool(code, stdin, limits)
    if stdout is None:
        return replace(invalid(state, role, "the program failed"), tool_code=code, tool_output=text)
    would = score(stdout)
    return replace(state, last_role=role, tool_code=code, tool_output=text,
                   last_valid=would.last_valid, last_reward=would.last_reward,
                   feedback=f"tool output scored as a plan: {would.feedback}")


def parse_tool_output(parser_name: str, stdout: str) -> Any:
    """Parse a tool's stdout with the registered parser a planner's output goes through."""
    from masdsl.envs import parsers

    try:
        return getattr(parsers, parser_name)(stdout)
    except Exception:  # parsers should return None, but a model's stdout is hostile input
        return None


# ---- splits -----------------------------------------------------------------------------


def check_split(split: Any, n: Any, source: str) -> None:
    """Reject a bad split or count with a `UserError` naming the data source."""
    if split not in SPLITS:
        raise UserError(f"{source}: split must be \"train\" or \"eval\", got {split!r}")
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise UserError(f"{source}: n must be a non-negative integer, got {n!r}")


def content_split(key: str) -> str:
    """The split a puzzle's content belongs to: half of all contents each, by SHA-256.

    >>> content_split("#####") in SPLITS
    True
    """
    return SPLITS[hashlib.sha256(key.encode()).digest()[0] & 1]


def split_seeds(split: str) -> Iterator[int]:
    """Seeds for a split: even for train, odd for eval."""
    seed = SPLITS.index(split)
    while True:
        yield seed
        seed += 2


def split_rows(split: str, n: int, make: Callable[[int], tuple[str, dict] | None],
               *, max_seeds: int = 1_000_000) -> list[dict]:
    """The first `n` distinct puzzles of `split`: `make(seed)` gives `(content key, row)`.

    Rows whose content belongs to the other split, or repeats an earlier row, are skipped.
    """
    rows: list[dict] = []
    seen: set[str] = set()
    for count, seed in enumerate(split_seeds(split)):
        if len(rows) >= n:
            break
        if count >= max_seeds:
            raise DataError(f"could not generate {n} distinct {split} puzzles from {max_seeds} seeds")
        made = make(seed)
        if made is None:
            continue
        key, row = made
        if key in seen or content_split(key) != split:
            continue
        seen.add(key)
        rows.append(row)
    return rows


def task_field(task: Mapping[str, Any], name: str, env_name: str) -> Any:
    """`task[name]`, or a `DataError` naming the env, the row id and the missing field."""
    try:
        return task[name]
    except (KeyError, TypeError):
        row = task.get("id", "?") if isinstance(task, Mapping) else "?"
        raise DataError(f"{env_name}: task row {row!r} has no field `{name}`") from None


# ---- env-bound functions (one per name, for all three games) -----------------------------


def _game_state(state: Any, name: str) -> GameState:
    if not isinstance(state, GameState):
        raise UserError(f"`{name}()` reads a game env's state ({', '.join(GAMES)}), "
                        f"not a {type(state).__name__}")
    return state


@function("step_reward", returns="number", env=GAMES)
def step_reward(state: Any) -> float:
    """The paper's shaped reward of the last action (see each game module for its shape)."""
    return float(_game_state(state, "step_reward").last_reward)


@function("valid", returns="bool", env=GAMES)
def valid(state: Any) -> bool:
    """Whether the last action was legal (parsed, right shape, no illegal move)."""
    return bool(_game_state(state, "valid").last_valid)


@function("solved", returns="bool", env=GAMES)
def solved(state: Any) -> bool:
    """Whether the puzzle is solved (sudoku filled correctly, all boxes on goals, goal reached)."""
    return bool(_game_state(state, "solved").solved())


@function("progress", returns="number", env=GAMES)
def progress(state: Any) -> float:
    """How far the puzzle is solved, a fraction in [0, 1] (each game documents its measure)."""
    return float(_game_state(state, "progress").progress())
