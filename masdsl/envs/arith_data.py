"""`arith_words`: generated multi-step arithmetic word problems, for the math tool workflow.

Each problem takes two or three operations on two- to four-digit numbers, so a small model's
mental arithmetic fails while a one-line program (`print(347 * 28 - 1259)`) succeeds, and a
program can be wrong in many ways (an operation, a number, the order, the I/O). Problems are
drawn from a seeded generator: row `i` of a split always holds the same problem, train and eval
come from disjoint seed streams, and an eval problem whose text also occurs among the first
10,000 train problems is skipped (so no eval question repeats a train question).

>>> rows = arith_words("eval", n=2)
>>> [sorted(r) for r in rows][0], rows[0]["id"]
(['answer', 'id', 'question'], 'arith/eval/0')
>>> arith_words("train", n=3) == arith_words("train", n=3)
True
"""

from __future__ import annotations

import random
from functools import lru_cache
from typing import Callable

from masdsl.envs.loading import check_split
from masdsl.envs.registry import data_source
from masdsl.errors import DataError

NAMES = ("Ana", "Ben", "Chen", "Dara", "Eli", "Femi", "Gita", "Hugo", "Ines", "Jon")
DEDUP_TRAIN_ROWS = 10_000  # eval problems are checked against this many train problems
_SPLIT_SALT = {"train": 0x7A11, "eval": 0xE7A1}

Problem = tuple[str, int]


def _crates(r: random.Random) -> Problem:
    a, b = r.randint(12, 98), r.randint(12, 98)
    c = r.randint(101, a * b - 1)
    return (f"A warehouse has {a} crates with {b} bottles in each crate. {c} bottles are broken "
            f"and thrown away. How many bottles are left?", a * b - c)


def _shopping(r: random.Random) -> Problem:
    name = r.choice(NAMES)
    a, b, c, d = r.randint(11, 49), r.randint(13, 97), r.randint(11, 49), r.randint(13, 97)
    return (f"{name} buys {a} notebooks at {b} dollars each and {c} pens at {d} dollars each. "
            f"How many dollars does {name} spend in total?", a * b + c * d)


def _train_trip(r: random.Random) -> Problem:
    a, b, c = r.randint(43, 97), r.randint(6, 19), r.randint(112, 987)
    return (f"A train travels {a} km every hour for {b} hours, then another {c} km. "
            f"How many km does it travel in all?", a * b + c)


def _boxes(r: random.Random) -> Problem:
    per, full = r.randint(6, 24), r.randint(120, 480)
    extra = r.randint(0, per - 1)
    sold = r.randint(17, full - 3)
    eggs = per * full + extra
    return (f"A farm collects {eggs} eggs and packs them into boxes of {per}. It sells {sold} full "
            f"boxes. How many full boxes are left?", full - sold)


def _savings(r: random.Random) -> Problem:
    name = r.choice(NAMES)
    start, weekly, weeks, spent = r.randint(150, 950), r.randint(23, 89), r.randint(12, 52), r.randint(100, 900)
    return (f"{name} has {start} dollars, saves {weekly} dollars every week for {weeks} weeks, and then "
            f"spends {spent} dollars. How many dollars does {name} have now?", start + weekly * weeks - spent)


def _share(r: random.Random) -> Problem:
    groups, each, left = r.randint(7, 29), r.randint(23, 89), r.randint(104, 987)
    total = groups * each + left
    return (f"A school has {total} pencils. It keeps {left} pencils and shares the rest equally among "
            f"{groups} classes. How many pencils does each class get?", each)


TEMPLATES: tuple[Callable[[random.Random], Problem], ...] = (_crates, _shopping, _train_trip, _boxes, _savings, _share)


def _problem(split: str, i: int) -> Problem:
    r = random.Random(_SPLIT_SALT[split] * 1_000_003 + i)
    return r.choice(TEMPLATES)(r)


@lru_cache(maxsize=1)
def _train_questions() -> frozenset[str]:
    return frozenset(_problem("train", i)[0] for i in range(DEDUP_TRAIN_ROWS))


@data_source("arith_words", fields=("id", "question", "answer"))
def arith_words(split: str, n: int = 256) -> list[dict]:
    """`n` generated arithmetic word problems (two or three operations on 2-4 digit numbers,
    integer answers). Train and eval are disjoint seed streams; no eval question repeats one of
    the first 10,000 train questions."""
    check_split(split)
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= DEDUP_TRAIN_ROWS:
        raise DataError(f"arith_words: n must be an integer from 1 to {DEDUP_TRAIN_ROWS}, got {n!r}")
    seen = _train_questions() if split == "eval" else frozenset()
    rows: list[dict] = []
    i = 0
    while len(rows) < n:
        question, answer = _problem(split, i)
        if question not in seen:
            rows.append({"id": f"arith/{split}/{len(rows)}", "question": question, "answer": str(answer)})
        i += 1
    return rows
