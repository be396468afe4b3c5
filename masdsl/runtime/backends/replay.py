"""`ReplayEngine`: outputs read from a JSONL file keyed by (task, role, turn). No model at all.

For dry runs of a workflow's logic and golden-trace tests. Each line of the file is
`{"task_id": ..., "role": ..., "turn": ..., "outputs": [text, ...]}` (or `"output": text`).
A request with key (task, role, turn) gets those outputs in order, cycled to `request.n`.
Token ids come from a tokenizer when given, else the UTF-8 bytes of the text; log-probs are 0.

>>> import json, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "r.jsonl")
>>> with open(path, "w") as f:
...     _ = f.write(json.dumps({"task_id": "t1", "role": "coder", "turn": 0, "outputs": ["a", "b"]}) + "\\n")
>>> eng = ReplayEngine(path)
>>> [c.text for c in eng.generate([GenRequest([1], n=3, key=("t1", "coder", 0))])[0]]
['a', 'b', 'a']
>>> eng.generate([GenRequest([1], key=("t1", "coder", 0))])[0][0].token_ids
[97]
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from masdsl.errors import DataError
from masdsl.runtime.backends.base import Candidate, GenRequest, LocalEngine

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def load_replay(path: str | Path) -> dict[tuple[str, str, int], list[str]]:
    """Read a replay file into {(task_id, role, turn): [output, ...]}; bad rows are DataErrors."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"replay file `{path}` does not exist (set runtime.replay_file)")
    table: dict[tuple[str, str, int], list[str]] = {}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                key = (str(row["task_id"]), str(row["role"]), int(row["turn"]))
                outputs = row["outputs"] if "outputs" in row else [row["output"]]
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                raise DataError(
                    f"{path}:{lineno}: a replay row needs task_id, role, turn and outputs (or output): {exc}"
                ) from None
            if isinstance(outputs, str):
                outputs = [outputs]
            if not outputs or not all(isinstance(o, str) for o in outputs):
                raise DataError(f"{path}:{lineno}: `outputs` must be a non-empty list of strings")
            table[key] = list(outputs)
    return table


class ReplayEngine(LocalEngine):
    """An `Engine` that answers from a replay file (see the module docstring)."""

    def __init__(self, path: str | os.PathLike[str], tokenizer: PreTrainedTokenizerBase | None = None):
        self.path = Path(path)
        self.table = load_replay(self.path)
        self.tokenizer = tokenizer
        self.calls = 0  # generate calls, for tests of batching

    def _ids(self, text: str) -> list[int]:
        if self.tokenizer is None:
            return list(text.encode("utf-8"))
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def generate(self, requests: list[GenRequest]) -> list[list[Candidate]]:
        self.calls += 1
        out = []
        for req in requests:
            if req.key is None:
                raise DataError("the replay engine needs requests keyed by (task_id, role, turn)")
            key = (str(req.key[0]), str(req.key[1]), int(req.key[2]))
            if key not in self.table:
                raise DataError(
                    f"{self.path}: no replay row for task `{key[0]}`, role `{key[1]}`, turn {key[2]}"
                )
            outputs = self.table[key]
            texts = [outputs[i % len(outputs)] for i in range(req.n)]
            out.append([Candidate(ids, t, [0.0] * len(ids), "replay") for t in texts for ids in [self._ids(t)]])
        return out

    def update_weights(self, state_dict: dict[str, Any]) -> None:
        """Replayed outputs do not depend on weights."""

    def close(self) -> None:
        """Nothing to release."""
