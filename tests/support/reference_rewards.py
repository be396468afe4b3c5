"""A transcription of the reference's (PettingLLMs) game step code, only what the rewards need:
`pettingllms/multi_agent_env/stateful/env_state.py` at HEAD a054fb1 (`SudukuEnvState.step` for a
full grid, `PlanPathGridEnvState.step_single`, `SokobanGridEnvState.step_single`, with their
default coefficients). tests/envs/test_paper_rewards.py runs it side by side with masdsl.
"""

from __future__ import annotations

from masdsl.envs import sokoban as sk

ACTIONS = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}


class RefPlanPath:
    """`PlanPathGridEnvState`: r_step -0.01, r_invalid -0.10, r_goal +1, r_opt +0.5,
    r_fail -1, gamma 0.99, lambda_pot 1.0."""

    def __init__(self, rows, start, goal, max_steps=10_000):
        self.rows, self.goal, self.start, self.max_steps = rows, tuple(goal), tuple(start), max_steps
        self.pos, self.steps, self.done = self.start, 0, False
        self.last_phi = self.potential(self.pos)

    def potential(self, pos):
        return -(abs(pos[0] - self.goal[0]) + abs(pos[1] - self.goal[1]))

    def shortest(self):
        from collections import deque

        dist, q = {self.start: 0}, deque([self.start])
        while q:
            r, c = q.popleft()
            for dr, dc in ACTIONS.values():
                n = (r + dr, c + dc)
                if (0 <= n[0] < len(self.rows) and 0 <= n[1] < len(self.rows[0])
                        and self.rows[n[0]][n[1]] != "#" and n not in dist):
                    dist[n] = dist[(r, c)] + 1
                    q.append(n)
        return dist[self.goal] + 1  # node count, as `len(sp)`

    def step(self, actions):
        if self.done:
            return 0.0
        total = 0.0
        for a in actions:
            r, done = self.step_single(a)
            total += r
            if done:
                break
        return total

    def step_single(self, a):
        if self.done:
            return 0.0, True
        dr, dc = ACTIONS[a]
        nxt = (self.pos[0] + dr, self.pos[1] + dc)
        valid = (0 <= nxt[0] < len(self.rows) and 0 <= nxt[1] < len(self.rows[0])
                 and self.rows[nxt[0]][nxt[1]] != "#")
        if not valid:
            nxt = self.pos
        reward = -0.01 if valid else -0.10
        reward += 1.0 * (0.99 * self.potential(nxt) - self.last_phi)
        self.pos = nxt
        self.last_phi = self.potential(self.pos)
        self.steps += 1
        if self.pos == self.goal:
            reward += 1.0
            if self.steps == self.shortest() - 1:
                reward += 0.5
            self.done = True
        elif self.steps >= self.max_steps:
            reward += -1.0
            self.done = True
        return reward, self.done


class RefSokoban:
    """`SokobanGridEnvState`: r_step -0.01, r_invalid -0.05, r_box_on_goal +1,
    r_box_off_goal -0.5, r_win +10, r_fail -5, gamma 0.99, lambda_pot 0.1, max_steps 200."""

    def __init__(self, level: sk.Level, max_steps=200):
        self.h, self.w = level.height, level.width
        self.walls, self.goals = set(level.walls), set(level.goals)
        self.boxes, self.player = set(level.boxes), level.player
        self.steps, self.done, self.max_steps = 0, False, max_steps
        self.last_phi = self.potential()

    def potential(self):
        return -float(sum(min(abs(b[0] - g[0]) + abs(b[1] - g[1]) for g in self.goals) for b in self.boxes))

    def step(self, actions):
        if self.done:
            return 0.0
        total = 0.0
        for a in actions:
            r, done = self.step_single(a)
            total += r
            if done:
                break
        return total

    def apply(self, a):
        dr, dc = ACTIONS[a]
        nxt = (self.player[0] + dr, self.player[1] + dc)
        inb = lambda p: 0 <= p[0] < self.h and 0 <= p[1] < self.w  # noqa: E731
        if not inb(nxt) or nxt in self.walls:
            return self.player, False, 0
        change = 0
        if nxt in self.boxes:
            beyond = (nxt[0] + dr, nxt[1] + dc)
            if not inb(beyond) or beyond in self.walls or beyond in self.boxes:
                return self.player, False, 0
            self.boxes.remove(nxt)
            self.boxes.add(beyond)
            old_on, new_on = nxt in self.goals, beyond in self.goals
            change = -1 if old_on and not new_on else (1 if new_on and not old_on else 0)
        return nxt, True, change

    def step_single(self, a):
        if self.done:
            return 0.0, True
        nxt, valid, change = self.apply(a)
        reward = -0.01 if valid else -0.05
        if valid and change > 0:
            reward += 1.0
        elif valid and change < 0:
            reward += -0.5
        reward += 0.1 * (0.99 * self.potential() - self.last_phi)
        if valid:
            self.player = nxt
        self.last_phi = self.potential()
        self.steps += 1
        if self.boxes <= self.goals:
            reward += 10.0
            self.done = True
        elif self.steps >= self.max_steps:
            reward += -5.0
            self.done = True
        return reward, self.done


class RefSudoku:
    """`SudukuEnvState.step` for a full-grid action (values 1..size)."""

    def __init__(self, puzzle):
        self.size = len(puzzle)
        self.init = [list(r) for r in puzzle]
        self.grid = [list(r) for r in puzzle]
        self.step_count, self.done = 0, False

    def units(self):
        n, b = self.size, int(self.size ** 0.5)
        out = [[(r, c) for c in range(n)] for r in range(n)] + [[(r, c) for r in range(n)] for c in range(n)]
        out += [[(br + i, bc + j) for i in range(b) for j in range(b)] for br in range(0, n, b) for bc in range(0, n, b)]
        return out

    def progress(self):
        return sum(1 for row in self.grid for v in row if v) / self.size ** 2

    def constraints(self):
        total = 0
        for cells in self.units():
            values = [self.grid[r][c] for r, c in cells if self.grid[r][c]]
            if len(values) == len(set(values)):
                total += len(values) - 1 if len(values) > 1 else 0
        return total

    def grid_valid(self):
        return all(len(v) == len(set(v)) for v in
                   ([self.grid[r][c] for r, c in cells if self.grid[r][c]] for cells in self.units()))

    def solved(self):  # the reference's check: full and valid (it never looks at the givens)
        return all(all(row) for row in self.grid) and self.grid_valid()

    def step(self, grid):
        if self.done:
            return 0.0
        if any(not 1 <= v <= self.size for row in grid for v in row):
            return -1.0
        prev_p, prev_c = self.progress(), self.constraints()
        self.grid = [list(r) for r in grid]
        reward = -0.01
        if self.solved():
            reward += 2.0
            empty = sum(1 for row in self.init for v in row if v == 0)
            if self.step_count <= empty:
                reward += 0.5
            self.done = True
        else:
            reward += (self.progress() - prev_p) * 0.5 + (self.constraints() - prev_c) * 0.02
            if not self.grid_valid():
                reward -= 0.5
        self.step_count += 1
        return reward
