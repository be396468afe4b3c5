"""`reasoning_gym(NAME, ...)`: tasks from the generators of the `reasoning-gym` package (Apache-2.0,
the `data` extra), scored by each generator's own `score_answer` (`rg_score`), so that neither the
problems nor their grader are written here.

Rows: `id`, `question`, `answer` (the library's answer text), `entry` (the library's entry itself,
question, answer and metadata, what its `score_answer` reads) and `template`.

**Templates.** An entry's template is the sorted names of its `metadata.variables`, joined by ","
(reasoning-gym gives no template id; in `gsm_symbolic` each of its 85 generators, `generate_N`,
fills its own set of variables, so the names tell the generator: one set per generator over 5,000
entries, tests/envs/test_reasoning_gym.py). A template is *held out* when `split_of("NAME/" +
template)` is "eval" (sha256, about 20 % of templates; 27 of gsm_symbolic's 85): `train` rows come
only from the other templates; `eval` rows from the held-out ones (`templates="held_out"`, the
default), or, with `templates="trained"`, new instances of the trained templates. A generator whose
entries have no `variables` has no templates: its eval rows are new instances (`templates` refused).

**Instances.** Rows come from two seed streams of the library (`create_dataset(NAME, seed=...)`),
one for train and one for eval, `seed` moving both: row `i` of a split is always the same problem,
and an eval question that is also one of the first 10,000 train questions is skipped.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from typing import Any, Callable, Iterator

from masdsl.envs.loading import split_of
from masdsl.envs.registry import data_source, function
from masdsl.errors import DataError, did_you_mean

TEMPLATE_CHOICES = ("held_out", "trained")
MAX_ROWS = 10_000
DEDUP_TRAIN_ROWS = 10_000  # an eval question of a trained template is never one of this many train questions
MAX_SCAN = 200_000  # entries a stream may read to find its rows (held-out templates: ~1 in 3)
_STREAM_SEED = {"train": 1_000_000_000, "eval": 2_000_000_000}  # the library seeds entry i with seed + i
SEED_STRIDE = 10_000_000  # `seed` moves both streams by this much: no two (split, seed) streams overlap
NEEDS = "reasoning_gym(...) needs the `reasoning-gym` package: pip install 'masdsl[data]' (reasoning-gym==0.1.25)"

Problem = tuple[str, str, str | None]  # (parameter, what is wrong, a hint)


def _datasets() -> dict[str, Any]:
    """The library's registry, {name: (dataset class, config class)}; imported only when used
    (about 1 s), so `masdsl check` of other workflows never pays for it."""
    try:
        import reasoning_gym  # optional: the `data` extra
    except ImportError as exc:
        raise DataError(NEEDS) from exc
    return dict(reasoning_gym.factory.DATASETS)


def template_of(entry: dict) -> str | None:
    """An entry's template: the sorted names of its `metadata.variables` (None: it has none).

    >>> template_of({"metadata": {"variables": {"name": "Ava", "apples": 3}}})
    'apples,name'
    >>> template_of({"metadata": {}}) is None
    True
    """
    variables = entry.get("metadata", {}).get("variables")
    return ",".join(sorted(variables)) if isinstance(variables, dict) and variables else None


def held_out(name: str, template: str) -> bool:
    """Whether a template of dataset `name` is held out of training (sha256, about 20 %)."""
    return split_of(f"{name}/{template}") == "eval"


def _stream(name: str, split: str, seed: int, config: dict[str, Any]) -> Iterator[dict]:
    import reasoning_gym  # optional; `_datasets()` has already said how to install it

    try:
        dataset = reasoning_gym.create_dataset(name, seed=_STREAM_SEED[split] + seed * SEED_STRIDE,
                                               size=MAX_SCAN, **config)
    except (AssertionError, TypeError, ValueError) as exc:  # the library's own config checks
        raise DataError(f"reasoning_gym({name!r}): the library refused its configuration: {exc or type(exc).__name__}") from exc
    return (dataset[i] for i in range(MAX_SCAN))


def problems(name: object, split: object = "train", n: object = 256, templates: object = None, seed: object = 0,
             **config: object) -> list[Problem]:
    """What is wrong with a call's arguments, as (parameter, message, hint); [] when nothing is.
    `masdsl check` reports each at its argument; a run raises the first as a `DataError`."""
    datasets = _datasets()
    if isinstance(name, list):  # a mix: each generator's rows as alone, interleaved
        return _mix_problems(name, split, n, templates, seed, config, datasets)
    if not isinstance(name, str) or name not in datasets:
        hint = did_you_mean(str(name), datasets) or (
            f"its {len(datasets)} generators are the keys of `reasoning_gym.factory.DATASETS`, "
            "e.g. `gsm_symbolic`, `basic_arithmetic`, `chain_sum`")
        return [("name", f"reasoning-gym has no generator {name!r}", hint)]
    found: list[Problem] = []
    if split not in ("train", "eval"):
        found.append(("split", f"unknown split {split!r}", 'use "train" or "eval"'))
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_ROWS:
        found.append(("n", f"n must be an integer from 1 to {MAX_ROWS}, got {n!r}", None))
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 100:
        found.append(("seed", f"seed must be an integer from 0 to 99, got {seed!r}", None))
    fields = [f.name for f in dataclasses.fields(datasets[name][1]) if f.name not in ("seed", "size")]
    for key in config:
        if key not in fields:
            found.append((key, f"`{name}` has no setting `{key}`",
                          did_you_mean(key, fields) or f"its settings: {', '.join(f'`{f}`' for f in fields) or 'none'}"))
    if templates is not None:
        if templates not in TEMPLATE_CHOICES:
            found.append(("templates", f"templates must be \"held_out\" or \"trained\", got {templates!r}",
                          did_you_mean(str(templates), TEMPLATE_CHOICES)))
        elif split == "train" and templates != "trained":
            found.append(("templates", "train rows come only from the trained templates", 'leave `templates` out'))
        elif not found and template_of(next(_stream(name, "train", seed, config))) is None:
            found.append(("templates", f"`{name}` has no templates (its entries have no `metadata.variables`)",
                          "leave `templates` out: its eval rows are new instances"))
    return found


def _rows(name: str, split: str, n: int, keep: Callable[[dict], bool], skip: frozenset[str], seed: int,
          config: dict[str, Any], tag: str) -> list[dict]:
    rows: list[dict] = []
    for entry in _stream(name, split, seed, config):
        if keep(entry) and entry["question"] not in skip:
            rows.append({"id": f"rg/{name}/{tag}/{len(rows)}", "question": entry["question"],
                         "answer": str(entry["answer"]), "entry": entry, "template": template_of(entry) or ""})
            if len(rows) == n:
                return rows
    raise DataError(f"reasoning_gym({name!r}): only {len(rows)} {tag} rows among the first {MAX_SCAN} entries, "
                    f"{n} asked for")


_TRAIN_QUESTIONS: dict[str, frozenset[str]] = {}  # by the call's arguments: one scan of the train stream each


def _train_questions(name: str, seed: int, config: dict[str, Any], templated: bool) -> frozenset[str]:
    key = repr((name, seed, sorted(config.items())))  # a setting may be a list: no hashable key of its own
    if key not in _TRAIN_QUESTIONS:
        rows = _rows(name, "train", DEDUP_TRAIN_ROWS, _trained(name, templated), frozenset(), seed, config, "train")
        _TRAIN_QUESTIONS[key] = frozenset(r["question"] for r in rows)
    return _TRAIN_QUESTIONS[key]


def _trained(name: str, templated: bool) -> Callable[[dict], bool]:
    """Whether an entry's template is trained on (every entry, for a generator without templates)."""
    return (lambda e: not held_out(name, template_of(e) or "")) if templated else (lambda e: True)


@data_source("reasoning_gym", fields=("id", "question", "answer", "entry", "template"), check=problems)
def reasoning_gym(name: str | list[str], split: str = "train", n: int = 256, templates: str | None = None,
                  seed: int = 0, **config: object) -> list[dict]:
    """`n` problems of reasoning-gym's generator `name` (settings: its config's fields, e.g.
    `min_terms=2`). A generator with templates (`gsm_symbolic`) trains on one set of them and
    evaluates on the others (`templates="held_out"`) or on new instances of the trained ones
    (`templates="trained"`); one without evaluates on new instances. Score with `rg_score`.

    `name` may be a list of generators, a mix: their rows in turn (`n` shared as evenly as it
    divides), each generator's drawn as it would be alone, with the generator's name before each
    row's template. A problem type never trained on is one the train call does not list; an eval
    mix of such types says so with `templates="held_out"` (its members without templates then
    give any new instance: none of their questions is trained on)."""
    found = problems(name, split, n, templates, seed, **config)
    if found:
        _, message, hint = found[0]
        raise DataError(f"reasoning_gym(...): {message}" + (f" ({hint})" if hint else ""))
    if isinstance(name, list):
        return _mix(name, split, n, templates, seed)
    templated = template_of(next(_stream(name, "train", seed, config))) is not None
    if split == "train":
        return _rows(name, split, n, _trained(name, templated), frozenset(), seed, config, "train")
    if templated and templates != "trained":  # templates never trained on: no question can repeat a train one
        return _rows(name, split, n, lambda e: held_out(name, template_of(e) or ""), frozenset(), seed, config, "eval")
    skip = _train_questions(name, seed, config, templated)
    return _rows(name, split, n, _trained(name, templated), skip, seed, config, "eval_trained" if templated else "eval")


def _mix_problems(names: list, split: object, n: object, templates: object, seed: object, config: dict[str, Any],
                  datasets: dict[str, Any]) -> list[Problem]:
    if not names or not all(isinstance(x, str) for x in names):
        return [("name", "a mix of generators is a non-empty list of their names", 'e.g. ["gcd", "lcm"]')]
    if len(set(names)) != len(names):
        return [("name", "a generator is listed twice in the mix", None)]
    if config:
        return [(next(iter(config)), "settings apply to one generator, not to a mix", "give the mix without settings")]
    if templates == "held_out" and split == "train":
        return [("templates", "train rows come only from the trained problem types", 'leave `templates` out')]
    if isinstance(n, int) and not isinstance(n, bool) and n < len(names):
        return [("n", f"n ({n}) is smaller than the mix's {len(names)} generators", None)]
    for member in names:  # `templates` concerns only the members that have templates
        templated = member in datasets and template_of(next(_stream(member, "train", 0, {}))) is not None
        found = problems(member, split, n, templates if templated else None, seed)
        if found:
            key, message, hint = found[0]
            return [(key, f"{message} (in the mix, `{member}`)", hint)]
    return []


def _mix(names: list[str], split: str, n: int, templates: str | None, seed: int) -> list[dict]:
    """Each generator's share of `n` rows, interleaved so that any first rows (an evaluation's
    `eval_tasks`) hold the generators evenly. Drawn as `reasoning_gym(member, ...)` would, except
    under `templates="held_out"`: the members are problem types never trained on, so a member
    without templates gives new instances without skipping its own train questions (a generator
    with few distinct questions, `prime_factorization`, repeats them all)."""
    shares = [n // len(names) + (i < n % len(names)) for i in range(len(names))]
    columns = []
    for member, share in zip(names, shares):
        templated = template_of(next(_stream(member, "train", seed, {}))) is not None
        if templated or templates != "held_out":
            rows = reasoning_gym(member, split, n=share, templates=templates if templated else None, seed=seed)
        else:
            rows = _rows(member, split, share, lambda e: True, frozenset(), seed, {}, split)
        columns.append([dict(r, template=f"{member}/{r['template']}" if r["template"] else member) for r in rows])
    return [column[i] for i in range(max(shares)) for column in columns if i < len(column)]


@lru_cache(maxsize=None)
def _scorer(name: str) -> Callable[[str | None, dict], float]:
    import reasoning_gym  # a row's `entry` came from the library: it is installed

    return reasoning_gym.get_score_answer_fn(name)


@function("rg_score", returns="number")
def rg_score(answer: object, entry: object) -> float:
    """reasoning-gym's own score of `answer` for a task's `entry` (`task.entry` of a
    `reasoning_gym(...)` row): its generator's `score_answer`, from 0 to 1 (`gsm_symbolic`: 1 for
    the right number, 0.01 for another number, 0 for none). An empty answer scores 0, and so does
    one that the library's scorer cannot read (`prime_factorization`'s raises on "[2, 2, 191]"):
    a model's malformed answer is a zero, never a failed rollout."""
    if not isinstance(entry, dict) or "source_dataset" not in entry.get("metadata", {}):
        raise ValueError("rg_score reads a reasoning_gym(...) row's `task.entry`, not " + type(entry).__name__)
    text = None if answer is None or answer == "" else str(answer)
    score = _scorer(entry["metadata"]["source_dataset"])
    try:
        return float(score(text, entry))
    except Exception:  # the library's scorer parses the answer its own way; what it cannot parse is wrong
        return 0.0
