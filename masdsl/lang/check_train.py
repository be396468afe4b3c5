"""Checker rule for the `train { }` block: it passes the run configuration's schema
(`masdsl.config`), every mistake reported at its key ([invalid-train], docs/errors.md).

>>> from masdsl.lang.parse import parse_text
>>> from masdsl.lang.context import Ctx
>>> text = "train { sampels: 2, kl: 0.1 }"
>>> module, _ = parse_text(text, "w.mas")
>>> c = Ctx(module, text, None, None)
>>> check_train(c)
>>> [(d.message, str(d.span)) for d in c.diags]  # doctest: +NORMALIZE_WHITESPACE
[('unknown config key `train.sampels` (did you mean `train.samples`?)', 'w.mas:1:9'),
 ('unknown config key `train.kl` (a common name; masdsl calls it `train.kl_coef`)', 'w.mas:1:21')]
"""

from __future__ import annotations

from masdsl.config import ConfigError, plainly_valid, resolve_config
from masdsl.lang import ast as A
from masdsl.lang.context import Ctx


def _entry_at(block: A.Block, path: list[str]) -> A.Entry | None:
    entry = None
    for part in path:
        entry = block.get(part)
        if entry is None:
            return None
        if isinstance(entry.value, A.Block):
            block = entry.value
    return entry


def check_train(c: Ctx) -> None:
    """The `train { }` block passes the run configuration's schema (`masdsl.config`). Every
    mistake is reported at its key: the schema stops at the first, so the block is asked again
    without each key already reported (only a block with mistakes pays for more than one ask)."""
    if not c.module.trains:
        return
    block = c.module.trains[0].block
    values = A.to_python(block)
    if plainly_valid(values):  # most blocks: no need to start OmegaConf
        return
    while True:  # ends: each round takes a key out of `values`, or stops
        try:
            resolve_config(train_block=values)
            return
        except ConfigError as exc:
            path = exc.key.split(".") if exc.key else []
            paths = [path[1:], path] if path[:1] == ["train"] else [path]  # `train.x` is `x` in the block
            entry = next((e for e in (_entry_at(block, p) for p in paths) if e is not None), None)
            c.error("invalid-train", str(exc).strip().splitlines()[0], entry.key.span if entry else block.span)
            if not any(_drop(values, p) for p in paths if p):
                return


def _drop(values: dict, path: list[str]) -> bool:
    """Take the key at `path` out of the nested `values`; whether it was there."""
    for part in path[:-1]:
        values = values.get(part)
        if not isinstance(values, dict):
            return False
    if path[-1] not in values:
        return False
    del values[path[-1]]
    return True
