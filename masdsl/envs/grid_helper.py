"""The planning helper a Plan-Path tool program may `import grid` (`env plan_path(helper=true)`).

It is sent as source text into the sandbox (`masdsl.sandbox.run_python(modules=...)`), so it uses
the standard library only. A board is the text the tool reads on stdin (`env.board`): one row
per line, `#` blocked, `.` free, `A` the agent, `G` the goal.

The helper shrinks the tool's step from "write a breadth-first search and its I/O" to "call it
and print the result": at CPU scale no built-in model writes the whole program (docs/concepts.md,
"The tool agent's contract"). It is a documented deviation from the paper's setup.

>>> board = "A.#\\n..G"
>>> find(board, "A"), find(board, "G")
((0, 0), (1, 2))
>>> shortest_path(board)
['D', 'R', 'R']
>>> shortest_path("A#G") is None
True
"""

from collections import deque

MOVES = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}


def rows(board):
    """The board's rows, without blank lines or surrounding spaces."""
    return [line.strip() for line in board.strip().splitlines() if line.strip()]


def find(board, mark):
    """`(row, column)` of the first cell holding `mark` ("A" or "G"), or None."""
    for r, line in enumerate(rows(board)):
        c = line.find(mark)
        if c >= 0:
            return (r, c)
    return None


def shortest_path(board):
    """A shortest list of moves ("U", "D", "L", "R") from `A` to `G`, or None if none exists."""
    grid = rows(board)
    start, goal = find(board, "A"), find(board, "G")
    if start is None or goal is None:
        return None
    came = {start: None}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if cell == goal:
            break
        for move, (dr, dc) in MOVES.items():
            r, c = cell[0] + dr, cell[1] + dc
            if 0 <= r < len(grid) and 0 <= c < len(grid[r]) and grid[r][c] != "#" and (r, c) not in came:
                came[(r, c)] = (cell, move)
                queue.append((r, c))
    if goal not in came:
        return None
    path, cell = [], goal
    while came[cell] is not None:
        cell, move = came[cell]
        path.append(move)
    return path[::-1]
