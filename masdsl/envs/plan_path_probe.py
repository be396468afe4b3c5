"""A wrong plan for Plan-Path: what `train.eval_probe=wrong_plan` prints in place of the tool's
output (`masdsl.runtime.probes`), to see whether a trained planner follows what it is shown.

The plan must look like a real one (a JSON list of legal moves a planning program could have
printed) and must not reach the goal. `wrong_path` walks, never over the goal, to the reachable
cell farthest from the goal (Manhattan distance; ties: the first a breadth-first search in
U, D, L, R order reaches, so the fewest moves away) by a shortest such walk. Deterministic in
the board and the position.

>>> from types import SimpleNamespace
>>> free = lambda cell: 0 <= cell[0] < 2 and 0 <= cell[1] < 3
>>> maze = SimpleNamespace(goal=(0, 2), free=free)
>>> wrong_path(maze, (0, 1))   # the goal is one move right: walk to the far corner instead
['D', 'L']
>>> wrong_path(SimpleNamespace(goal=(0, 1), free=lambda c: c in {(0, 0), (0, 1)}), (0, 0))   # walled in
['U']
"""

from __future__ import annotations

from collections import deque
from typing import Any

from masdsl.envs.games_common import DIRS, Cell


def wrong_path(maze: Any, start: Cell) -> list[str]:
    """Legal moves from `start` that never touch `maze.goal` and end as far from it as the board
    allows; a single blocked move when no other cell can be reached without the goal.
    `maze`: anything with `goal` and `free(cell)` (a `plan_path.Maze`)."""
    parent: dict[Cell, tuple[Cell, str] | None] = {start: None}
    order, queue = [start], deque([start])
    while queue:
        cell = queue.popleft()
        for move, (dr, dc) in DIRS.items():
            nxt = (cell[0] + dr, cell[1] + dc)
            if nxt != maze.goal and nxt not in parent and maze.free(nxt):
                parent[nxt] = (cell, move)
                order.append(nxt)
                queue.append(nxt)
    away = [c for c in order if c != start]
    if not away:  # boxed in next to the goal: bump into a wall, which does not move the agent
        return [next(m for m, (dr, dc) in DIRS.items() if (start[0] + dr, start[1] + dc) != maze.goal)]
    far = [abs(c[0] - maze.goal[0]) + abs(c[1] - maze.goal[1]) for c in away]
    target = away[far.index(max(far))]  # the first of the farthest in search order
    moves, cell = [], target
    while parent[cell] is not None:
        cell, move = parent[cell]
        moves.append(move)
    return moves[::-1]
