"""What the three grid games (sudoku, sokoban, plan_path) share: their state, the reward terms,
the tool step and the splits. Their env classes share `masdsl.envs.games.GameEnv`, which
implements the action protocol below with the helpers here.

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
of the wrong type is **no action**: the board is unchanged, `valid()` is False and the reward is
`no_action_penalty()` = `NO_ACTION_PENALTY` (-2, the reference's penalty for a planner with no
action). A role with none of these fields is a no-op (reward 0).

**Reward terms.** Every action's reward is a sum of named terms (PettingLLMs' reward shapes;
docs/concepts.md "Rewards of the game workflows"), recorded in `GameState.last_terms`. Each term
is a registered env-bound function a `.mas` reward adds up, for example
`reward step_penalty() + invalid_penalty() + push_shaping() + ...`; a term the last action did
not produce reads 0. `step_reward()` is the sum of all of them. The shared terms live here:
`step_penalty()`, `invalid_penalty()`, `no_action_penalty()`, `tool_penalty()`, `win_bonus()`,
`optimal_bonus()` and `step_limit_penalty()`; each game module registers its own shaping terms.

**Env-bound functions.** `step_reward()`, `valid()`, `solved()` and `progress()` are registered
once here, bound to all three envs (`FunctionSpec.envs`), and dispatch on the state they get:
every game state is a `GameState`, which records the last action's reward terms and legality
and implements `solved()` and `progress()`.

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

from masdsl.envs import parsers
from masdsl.envs.registry import function
from masdsl.sandbox import Limits, run_python  # the only place generated code runs
from masdsl.errors import DataError, UserError

GAMES = ("sudoku", "sokoban", "plan_path")
MOVE_GAMES = ("sokoban", "plan_path")
STEP_PENALTY = -0.01  # every move played (sudoku: every grid scored), as in the reference
NO_ACTION_PENALTY = -2.0  # the reference's planner with no (or an empty) action
TOOL_NO_CODE_PENALTY = -1.0  # the reference's tool agent with no code block
TOOL_FAILED_PENALTY = -2.0  # ... whose program failed (no output)
# In the reference's move games a tool reply without code ends at -2 as well (its missing
# action is scored as the planner's no-action); writing no program must not beat trying one.
MOVE_TOOL_NO_CODE_PENALTY = -2.0
SPLITS = ("train", "eval")
DIRS = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}
TOOL_OUTPUT_CHARS = 2000  # the tool's stdout shown to the planner is cut to this many characters
ACTION_FIELDS = ("grid", "moves", "code")

Cell = tuple[int, int]


@dataclass(frozen=True, kw_only=True)
class GameState:
    """Fields every game state has; game states subclass this and add their board.

    `moves` counts planner moves applied so far (sudoku: grid submissions); `last_*` describe
    the most recent action (of any role), `feedback` says in words what happened to it;
    `last_terms` holds its reward split into named terms (`last_reward` is their sum).
    """

    moves: int = 0
    last_role: str = ""
    last_valid: bool = True
    last_reward: float = 0.0
    last_terms: tuple[tuple[str, float], ...] = ()  # (term, value) pairs; they sum to last_reward
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


def add_terms(terms: dict[str, float], name: str, value: float) -> None:
    """Add `value` to `terms[name]` (terms that never fire stay absent)."""
    terms[name] = terms.get(name, 0.0) + value


def scored(state: GameState, role: str, terms: Mapping[str, float], *, valid: bool, feedback: str,
           **changes: Any) -> GameState:
    """`state` after an action by `role` whose reward is the sum of `terms`.

    >>> s = scored(GameState(), "planner", {"step_penalty": -0.02, "win_bonus": 10.0},
    ...            valid=True, feedback="won")
    >>> round(s.last_reward, 2), term(s, "win_bonus"), term(s, "push_shaping")
    (9.98, 10.0, 0.0)
    """
    clean = tuple((name, float(value)) for name, value in terms.items())
    return replace(state, last_role=role, last_valid=valid, last_terms=clean,
                   last_reward=float(sum(v for _, v in clean)), feedback=feedback, **changes)


def term(state: GameState, name: str) -> float:
    """The value of reward term `name` in the last action (0.0 when it did not fire)."""
    return float(dict(state.last_terms).get(name, 0.0))


def no_action(state: GameState, role: str, why: str) -> GameState:
    """`state` after an action that carries nothing to play (failed parse, empty or not a list
    of moves/rows): board unchanged, `NO_ACTION_PENALTY`, `valid()` False."""
    return scored(state, role, {"no_action_penalty": NO_ACTION_PENALTY}, valid=False,
                  feedback=f"invalid action: {why}")


def invalid(state: GameState, role: str, why: str, penalty: float) -> GameState:
    """`state` after an illegal action by `role`: board unchanged, `invalid_penalty` = `penalty`."""
    return scored(state, role, {"invalid_penalty": penalty}, valid=False,
                  feedback=f"invalid action: {why}")


def finished(state: GameState, role: str, why: str) -> GameState:
    """`state` after an action on a finished episode (solved, or out of steps): nothing is
    played and the reward is 0 (the reference's `if self.done: reward = 0`)."""
    return scored(state, role, {}, valid=True, feedback=f"nothing played: {why}")


def noop(state: GameState, role: str) -> GameState:
    """`state` after a role whose fields carry no game action (reward 0, still valid)."""
    return scored(state, role, {}, valid=True, feedback="no action (no `grid`, `moves` or `code` field)")


def normalise_moves(moves: object) -> list[str] | None:
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


def run_tool(code: str, stdin: str, limits: Limits | None = None,
             modules: Mapping[str, str] | None = None) -> tuple[str, str | None]:
    """Run a tool program in the sandbox: `(text for the planner, raw stdout or None)`.

    The raw stdout is None when the program failed (non-zero exit, timeout, memory limit);
    the text then ends with a short note and the tail of its stderr. `modules` are the helper
    modules the env offers (`{name: source}`, importable by the program).
    """
    result = run_python(code, stdin, limits=limits, modules=modules)
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


def tool_step(state: GameState, role: str, code: object, *, stdin: str, limits: Limits | None,
              score: Callable[[str], GameState], no_code_penalty: float = TOOL_NO_CODE_PENALTY,
              modules: Mapping[str, str] | None = None) -> GameState:
    """`state` after a tool program: output recorded, board unchanged, reward from `score`.

    No program: `tool_penalty()` = `no_code_penalty` (sudoku -1; the move games -2, see
    `MOVE_TOOL_NO_CODE_PENALTY`); a program that fails (non-zero exit, timeout, memory):
    `TOOL_FAILED_PENALTY` (-2). Otherwise `score(stdout)` returns the state a planner would reach
    by submitting `stdout`; only its `last_valid`, `last_terms` (so `last_reward`) and `feedback`
    are kept. `modules`: helper modules the program may import.
    """
    if not isinstance(code, str) or not code.strip():
        return scored(state, role, {"tool_penalty": no_code_penalty}, valid=False,
                      feedback="invalid action: no program", tool_code="", tool_output="")
    text, stdout = run_tool(code, stdin, limits, modules)
    if stdout is None:
        return scored(state, role, {"tool_penalty": TOOL_FAILED_PENALTY}, valid=False,
                      feedback="invalid action: the program failed", tool_code=code, tool_output=text)
    would = score(stdout)
    return scored(state, role, dict(would.last_terms), valid=would.last_valid,
                  feedback=f"tool output scored as a plan: {would.feedback}",
                  tool_code=code, tool_output=text)


def parse_tool_output(parser_name: str, stdout: str) -> Any:
    """Parse a tool's stdout with the registered parser a planner's output goes through."""
    try:
        return getattr(parsers, parser_name)(stdout)
    except Exception:  # parsers should return None, but a model's stdout is hostile input
        return None


# ---- splits -----------------------------------------------------------------------------


def check_split(split: object, n: object, source: str) -> None:
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


def _game_state(state: object, name: str) -> GameState:
    if not isinstance(state, GameState):
        raise UserError(f"`{name}()` reads a game env's state ({', '.join(GAMES)}), "
                        f"not a {type(state).__name__}")
    return state


@function("step_reward", returns="number", env=GAMES)
def step_reward(state: object) -> float:
    """The whole reward of the last action: the sum of all its terms (`step_penalty()`,
    `invalid_penalty()`, the game's shaping, bonuses and penalties)."""
    return float(_game_state(state, "step_reward").last_reward)


def register_term(name: str, envs: tuple[str, ...], doc: str) -> None:
    """Register `name()`: an env-bound function reading reward term `name` of the last action
    (0.0 when that action did not produce it)."""

    def read(state: object) -> float:
        return term(_game_state(state, name), name)

    read.__name__ = read.__qualname__ = name
    read.__doc__ = doc
    function(name, returns="number", env=envs)(read)


register_term("step_penalty", GAMES,
              "-0.01 for every move played (sokoban, plan_path) or grid scored (sudoku).")
register_term("invalid_penalty", GAMES,
              "Illegal actions: sokoban -0.05 and plan_path -0.1 per blocked move (the other moves "
              "still run); sudoku -1 for a malformed grid (shape, a value out of range, a given changed).")
register_term("no_action_penalty", GAMES,
              "-2 when the action carries nothing to play (the parse failed, an empty list).")
register_term("tool_penalty", GAMES,
              "The tool role: -2 when its program fails; with no program -2 in sokoban and "
              "plan_path (as the reference ends), -1 in sudoku.")
register_term("win_bonus", GAMES,
              "Solving: sudoku +2, sokoban +10 (all boxes on goals), plan_path +1 (goal reached).")
register_term("optimal_bonus", ("sudoku", "plan_path"),
              "+0.5 for an optimal solve: plan_path in a shortest number of moves, sudoku "
              "within as many submissions as empty cells.")
register_term("step_limit_penalty", MOVE_GAMES,
              "The move that reaches the step limit unsolved: sokoban -5, plan_path -1.")


@function("valid", returns="bool", env=GAMES)
def valid(state: object) -> bool:
    """Whether the last action was legal (parsed, right shape, no illegal move)."""
    return bool(_game_state(state, "valid").last_valid)


@function("solved", returns="bool", env=GAMES)
def solved(state: object) -> bool:
    """Whether the puzzle is solved (sudoku filled correctly, all boxes on goals, goal reached)."""
    return bool(_game_state(state, "solved").solved())


@function("progress", returns="number", env=GAMES)
def progress(state: object) -> float:
    """How far the puzzle is solved, a fraction in [0, 1] (each game documents its measure)."""
    return float(_game_state(state, "progress").progress())
