"""The env classes of the three grid games: what `sudoku`, `sokoban` and `plan_path` share.

`GameEnv` is the whole `Env` contract (`masdsl.envs.base.Env`) for a game whose state is a
`GameState`: `apply` picks the action out of a role's fields and dispatches it (the action
protocol of `games_common`), `view` builds the `env.NAME` values, `success` asks the state.
A game subclass says only what differs: its action field, the parser a tool's stdout goes
through, `reset`, `act` (the rules and reward of one action) and `board` (the board text).

`MoveGameEnv` adds what the two games played with a list of U/D/L/R moves share (sokoban and
plan_path): the `max_steps` and `gamma` arguments and `act` itself, down to the feedback text;
such a game supplies `play_moves` (its rules for a clean list of moves), which returns a `Played`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar, Mapping

from masdsl.envs import games_common as gc
from masdsl.errors import UserError
from masdsl.sandbox import Limits

SHOWN_BLOCKED = 8  # the feedback names at most this many blocked moves


@dataclass(frozen=True)
class Played:
    """What a game's `play` did with a list of moves: the board after (`after`: a sokoban
    `Level`, a plan_path cell), the reward terms, the legal moves played, the (1-based)
    positions of the blocked moves and the step count after."""

    after: Any
    terms: dict[str, float]
    executed: int
    blocked: tuple[int, ...]
    steps: int

    @property
    def reward(self) -> float:
        return sum(self.terms.values())


class GameEnv:
    """A grid game's env; subclasses set the class attributes and implement `reset`, `act`
    and `board`."""

    name: ClassVar[str]  # the registered env name, for messages
    action: ClassVar[str]  # the planner's action field: "grid" or "moves"
    takes: ClassVar[str]  # that field in words, for "sudoku takes a `grid`, not `moves`"
    tool_parser: ClassVar[str]  # the parser a tool program's stdout is scored through
    legend: ClassVar[str]  # `env.legend`: how to read `env.board`

    def __init__(self, *, limits: Limits | None = None) -> None:
        self.limits = limits

    def reset(self, task: Mapping[str, Any]) -> gc.GameState:  # pragma: no cover - every game overrides it
        raise NotImplementedError

    def act(self, state: gc.GameState, role: str, value: object) -> gc.GameState:  # pragma: no cover - as above
        """The state after `role` plays `value`, the (parsed) value of its action field."""
        raise NotImplementedError

    def board(self, state: gc.GameState) -> str:  # pragma: no cover - as above
        """`env.board`: the board text."""
        raise NotImplementedError

    tool_no_code_penalty: ClassVar[float] = gc.TOOL_NO_CODE_PENALTY  # a tool reply without a program

    def tool_modules(self, state: gc.GameState) -> dict[str, str]:
        """Helper modules a tool program may import (`{name: source}`); none by default."""
        return {}

    def tool_stdin(self, state: gc.GameState) -> str:
        """What a tool program reads on stdin (the board text, then a newline)."""
        return self.board(state) + "\n"

    def size(self, state: gc.GameState) -> int:  # pragma: no cover - every game overrides it
        """`env.size`: the side of the board."""
        raise NotImplementedError

    def extra_view(self, state: gc.GameState) -> dict[str, Any]:
        """`env.NAME` values a game adds to the shared ones (placed before `feedback`)."""
        return {}

    def apply(self, state: gc.GameState, role: str, fields: Mapping[str, Any]) -> gc.GameState:
        kind, value = gc.pick_action(fields)
        if kind is None:
            return gc.noop(state, role)
        if kind == self.action:
            return self.act(state, role, value)
        if kind == "code":
            return gc.tool_step(state, role, value, stdin=self.tool_stdin(state), limits=self.limits,
                                score=lambda out: self.act(state, role, gc.parse_tool_output(self.tool_parser, out)),
                                no_code_penalty=self.tool_no_code_penalty, modules=self.tool_modules(state))
        return gc.no_action(state, role, f"{self.name} takes {self.takes}, not `{kind}`")

    def view(self, state: gc.GameState) -> Mapping[str, Any]:
        return {"board": self.board(state), "tool_output": state.tool_output, "moves": state.moves,
                **self.extra_view(state), "feedback": state.feedback, "legend": self.legend,
                "size": self.size(state)}

    def success(self, state: gc.GameState) -> bool:
        return state.solved()


class MoveGameEnv(GameEnv):
    """A game played with lists of U/D/L/R moves. Its state has `steps` and `max_steps` and
    the field `board_field`, which a list of moves changes to `Played.after`."""

    action = "moves"
    takes = "`moves`"
    tool_parser = "actions"
    tool_no_code_penalty = gc.MOVE_TOOL_NO_CODE_PENALTY
    board_field: ClassVar[str]  # "level" (sokoban) or "position" (plan_path)
    solved_note: ClassVar[str]  # the feedback once solved: "all boxes on goals", "reached the goal"
    was_solved_note: ClassVar[str]  # ... and for an action after that

    def __init__(self, *, limits: Limits | None = None, max_steps: int, gamma: float) -> None:
        if not isinstance(max_steps, int) or isinstance(max_steps, bool) or max_steps < 1:
            raise UserError(f"{self.name}: max_steps must be a positive integer, got {max_steps!r}")
        if not isinstance(gamma, (int, float)) or isinstance(gamma, bool) or not 0 < gamma <= 1:
            raise UserError(f"{self.name}: gamma must be a number in (0, 1], got {gamma!r}")
        super().__init__(limits=limits)
        self.max_steps = max_steps
        self.gamma = float(gamma)

    def play_moves(self, state: gc.GameState, moves: list[str]) -> Played:  # pragma: no cover - every game overrides it
        """Play a clean list of moves from `state` (the game's rules and reward terms)."""
        raise NotImplementedError

    def act(self, state: Any, role: str, moves: object) -> gc.GameState:
        """The state after `role` plays `moves` (the game's module doc gives legality and reward)."""
        limit = f"the step limit ({state.max_steps} moves) was reached"
        if state.solved():
            return gc.finished(state, role, self.was_solved_note)
        if state.steps >= state.max_steps:
            return gc.finished(state, role, limit)
        if not moves:
            return gc.no_action(state, role, "no moves")
        clean = gc.normalise_moves(moves)
        if clean is None:
            return gc.no_action(state, role, f"moves must be a list of U/D/L/R, got {moves!r:.80}")
        p = self.play_moves(state, clean)
        moved = replace(state, **{self.board_field: p.after}, moves=state.moves + p.executed, steps=p.steps)
        notes = [f"played {p.executed} moves"]
        if p.blocked:
            notes.append("blocked (you did not move): " + ", ".join(
                f"move {i} ({clean[i - 1]})" for i in p.blocked[:SHOWN_BLOCKED])
                + (" ..." if len(p.blocked) > SHOWN_BLOCKED else ""))
        if moved.solved():
            notes.append(self.solved_note)
        elif p.steps >= state.max_steps:
            notes.append(limit)
        return gc.scored(moved, role, p.terms, valid=not p.blocked, feedback="; ".join(notes))
