"""Math data sources: a small set of word problems that ships with the install, and loaders
for the AIME and OlympiadBench files the user downloads (formats in docs/data.md). Rows, splits
and errors follow `masdsl.envs.loading`.
"""

from __future__ import annotations

from typing import Any

from masdsl.envs.loading import DATA_DIR, check_split, load_jsonl, load_rows, select
from masdsl.envs.registry import data_source


@data_source("math_small", fields=("id", "question", "answer"))
def math_small(split: str) -> list[dict]:
    """A small bundled set of arithmetic and algebra word problems (answers checked by a test
    that recomputes each one in Python). Split: sha256 of the id (about 80/20)."""
    check_split(split, allow_all=True)
    rows = load_jsonl(DATA_DIR / "math_small.jsonl", required=("question", "answer"))
    return [{"id": r["id"], "question": r["question"], "answer": str(r["answer"])} for r in select(rows, split)]


def _pick(raw: dict, *names: str) -> Any:
    for name in names:
        for key in (name, name.capitalize(), name.upper()):
            if raw.get(key) not in (None, ""):
                return raw[key]
    raise KeyError(names[0])


def _answer_text(value: Any) -> str:
    if isinstance(value, list):
        if not value:
            raise ValueError("field `final_answer` is empty")
        return ", ".join(str(v).strip().strip("$") for v in value)
    return str(value).strip()


def _qa_rows(path: str, split: str, prefix: str, question_keys: tuple[str, ...],
             answer_keys: tuple[str, ...]) -> list[dict]:
    def convert(raw: dict, n: int) -> dict:
        row_id = raw.get("id", raw.get("ID", raw.get("problem_id", f"row-{n}")))
        return {"id": f"{prefix}/{row_id}", "question": str(_pick(raw, *question_keys)),
                "answer": _answer_text(_pick(raw, *answer_keys))}

    return load_rows(path, split, convert)


@data_source("aime", fields=("id", "question", "answer"), paths=("path",))
def aime(path: str, split: str = "all") -> list[dict]:
    """AIME 2024/2025 rows (e.g. Maxwell-Jia/AIME_2024, yentinglin/aime_2025): `id`/`ID`,
    `problem`/`Problem`/`question`, `answer`/`Answer` (an integer 0-999)."""
    return _qa_rows(path, split, "aime", ("problem", "question"), ("answer",))


@data_source("olympiadbench", fields=("id", "question", "answer"), paths=("path",))
def olympiadbench(path: str, split: str = "all") -> list[dict]:
    """OlympiadBench rows (Hothan/OlympiadBench, text-only subsets): `id`, `question`,
    `final_answer` (a list of LaTeX strings, joined with ", ")."""
    return _qa_rows(path, split, "olympiadbench", ("question", "problem"), ("final_answer", "answer"))
