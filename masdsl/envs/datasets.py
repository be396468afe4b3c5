"""Data sources: HumanEval and a small math set that ship with the install, and loaders for the
real sets the paper uses from files the user downloads (formats in docs/data.md).

This module gathers them (importing it registers every bundled data source); they live in
`masdsl.envs.code_data` (HumanEval, APPS, CodeContests, LiveCodeBench), `masdsl.envs.math_data`
(math_small, AIME, OlympiadBench), `masdsl.envs.arith_data` (generated arithmetic word problems),
`masdsl.envs.rg_data` (the `reasoning-gym` package's generators, split by template),
`masdsl.envs.hf_data` (Hugging Face datasets on this machine, parquet/Arrow files) and
`masdsl.envs.loading` (reading files, splitting rows).

Every row is a dict with a unique string `id`; splits are "train" and "eval" (about 80/20, by
sha256 of the id), and file loaders also accept "all". `masdsl.envs.loading` tells the rules.

>>> rows = humaneval("eval")
>>> len(rows) + len(humaneval("train")), sorted(rows[0])
(164, ['entry_point', 'id', 'prompt', 'solution', 'tests'])
"""

from __future__ import annotations

from masdsl.envs.arith_data import arith_words
from masdsl.envs.code_data import (SAMPLES, apps, codecontests, decode_lcb_tests, humaneval, livecodebench,
                                   split_check)
from masdsl.envs.hf_data import hf, parquet
from masdsl.envs.loading import DATA_DIR, EVAL_BELOW, SPLITS, load_jsonl, split_of
from masdsl.envs.math_data import aime, math_small, olympiadbench
from masdsl.envs.rg_data import reasoning_gym, rg_score

__all__ = ["DATA_DIR", "EVAL_BELOW", "SAMPLES", "SPLITS", "aime", "arith_words", "apps", "codecontests", "decode_lcb_tests",
           "hf", "humaneval", "livecodebench", "load_jsonl", "math_small", "olympiadbench", "parquet", "reasoning_gym",
           "rg_score", "split_check", "split_of"]
