"""The Sudoku solver and generator (4x4 and 9x9): a backtracking search over every completion
of a grid, which counts solutions, solves, and draws the puzzles of the `sudoku` data source
(exactly one solution each). The rules, the reward and the env are in `masdsl.envs.sudoku`.

A grid is a tuple of rows of ints, 0 marking an empty cell; the search works on it flattened
row-major (`flatten`, and back with `unflatten`).
"""

from __future__ import annotations

import random
from itertools import islice
from typing import Iterator

BOX = {4: 2, 9: 3}  # supported sizes -> side of a box
EMPTY_CELLS = {4: 10, 9: 50}  # the generator empties up to this many cells, keeping uniqueness

Grid = tuple[tuple[int, ...], ...]


def solutions(flat: list[int], size: int, rng: random.Random | None = None) -> Iterator[list[int]]:
    """Every completion of a flat grid (row-major, 0 = empty), by backtracking on bitmasks with
    the most-constrained cell first; `rng` shuffles the values tried (to draw random grids)."""
    b = BOX[size]
    full = (1 << size) - 1
    rows, cols, boxes = [0] * size, [0] * size, [0] * size
    cells = list(flat)
    empties = []
    for i, v in enumerate(cells):
        r, c = divmod(i, size)
        k = (r // b) * b + c // b
        if not v:
            empties.append((i, r, c, k))
            continue
        bit = 1 << (v - 1)
        if (rows[r] | cols[c] | boxes[k]) & bit:
            return  # the givens already clash
        rows[r] |= bit
        cols[c] |= bit
        boxes[k] |= bit

    def search(todo: list[tuple[int, int, int, int]]) -> Iterator[list[int]]:
        if not todo:
            yield list(cells)
            return
        best, best_mask, best_n = 0, 0, size + 1
        for idx, (_, r, c, k) in enumerate(todo):
            mask = full & ~(rows[r] | cols[c] | boxes[k])
            n = mask.bit_count()
            if n < best_n:
                best, best_mask, best_n = idx, mask, n
                if n <= 1:
                    break
        if best_n == 0:
            return
        i, r, c, k = todo[best]
        rest = todo[:best] + todo[best + 1:]
        values = [v for v in range(1, size + 1) if best_mask >> (v - 1) & 1]
        if rng is not None:
            rng.shuffle(values)
        for v in values:
            bit = 1 << (v - 1)
            rows[r] |= bit
            cols[c] |= bit
            boxes[k] |= bit
            cells[i] = v
            yield from search(rest)
            rows[r] ^= bit
            cols[c] ^= bit
            boxes[k] ^= bit
            cells[i] = 0

    yield from search(empties)


def flatten(grid: Grid) -> list[int]:
    return [v for row in grid for v in row]


def unflatten(flat: list[int], size: int) -> Grid:
    return tuple(tuple(flat[r * size:(r + 1) * size]) for r in range(size))


def count_solutions(grid: Grid, limit: int = 2) -> int:
    """How many solutions `grid` has, counting no further than `limit`.

    >>> count_solutions(((1, 2, 3, 4), (3, 4, 1, 2), (2, 1, 4, 3), (4, 3, 2, 0)))
    1
    >>> count_solutions(((0,) * 4,) * 4, limit=1000)
    288
    >>> count_solutions(((1, 1, 0, 0), (0,) * 4, (0,) * 4, (0,) * 4))
    0
    """
    return sum(1 for _ in islice(solutions(flatten(grid), len(grid)), limit))


def solve(grid: Grid) -> Grid | None:
    """The first solution of `grid`, or None.

    >>> solve(((0, 0, 0, 4), (0, 4, 0, 0), (2, 0, 0, 0), (0, 0, 3, 0)))
    ((3, 2, 1, 4), (1, 4, 2, 3), (2, 3, 4, 1), (4, 1, 3, 2))
    """
    first = next(solutions(flatten(grid), len(grid)), None)
    return None if first is None else unflatten(first, len(grid))


def generate(seed: int, size: int = 4) -> Grid:
    """A puzzle with exactly one solution, deterministic in (seed, size).

    A random full grid is drawn, then cells are emptied in random order as long as the puzzle
    keeps a unique solution, up to `EMPTY_CELLS[size]` empty cells.

    >>> p = generate(0)
    >>> sum(v == 0 for row in p for v in row), count_solutions(p)
    (10, 1)
    """
    rng = random.Random(f"sudoku-{size}-{seed}")
    flat = next(solutions([0] * size * size, size, rng))
    order = list(range(size * size))
    rng.shuffle(order)
    emptied = 0
    for i in order:
        if emptied == EMPTY_CELLS[size]:
            break
        value, flat[i] = flat[i], 0
        if sum(1 for _ in islice(solutions(flat, size), 2)) == 1:
            emptied += 1
        else:
            flat[i] = value
    return unflatten(flat, size)
