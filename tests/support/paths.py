"""Where the files the tests share live: the repository root and the data under tests/support.

- `TOY_DIR`: the toy workflow (`toy_digits.mas`, `toy_digits_lora.mas`, `toy_env.py`; `tests.support.toy`);
- `ADDER_DIR`: `toy.mas`, roles `a` and `b` adding numbers, its env and a replay file (`tests.support.rollouts`);
- `COUNTER_DIR`: `counter.mas` and the counter env, `coder.mas`, `lengths.mas`, tasks and a replay file.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUPPORT = ROOT / "tests" / "support"
TOY_DIR = SUPPORT / "toy_data"
ADDER_DIR = SUPPORT / "adder"
COUNTER_DIR = SUPPORT / "counter_data"
