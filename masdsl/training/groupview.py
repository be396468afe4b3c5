"""Step records -> the groups a person looks at in `masdsl view`: per step, each (task, role,
turn) decision with its K candidates and the advantage the learner gave each of them.

Records arrive as (record, label) pairs in file order (`masdsl.runtime.rundir.RunDir.records`,
then `RunDir.evaluations`); consecutive records with one label form a `Section` ("step 3",
"eval", "eval at step 2"). A training step's advantages are recomputed from its records exactly
as the step did (`masdsl.learner.grouping.group_records` with the run's grouping, then
`masdsl.learner.advantages.compute_advantages` with each role's estimator); an evaluation trains nothing, so its
candidates have no advantage, and its groups are keyed by episode too (repeated episodes of one
task are separate decisions, not candidates of one).

>>> from masdsl.runtime.records import StepRecord
>>> def rec(cand, reward, finish="stop"):
...     return StepRecord(0, 0, "t0", "coder", 0, "coder", cand, cand == 0, "p", [1], [2], [0.0],
...                       reward, 0.0, reward, finish, True)
>>> (section,) = sections([(rec(0, 1.0), None), (rec(1, 0.0, "length"), None)])
>>> g = section.groups[0]
>>> section.label, g.key, [round(c.advantage, 3) for c in g.candidates], g.flat, g.failed
('step 0', ('t0', 'coder', 0), [0.707, -0.707], False, True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator, Mapping

from masdsl.learner.advantages import compute_advantages
from masdsl.learner.grouping import group_records
from masdsl.runtime.records import StepRecord


@dataclass(frozen=True)
class Candidate:
    record: StepRecord
    advantage: float | None  # None: an evaluation (nothing is trained on it)

    @property
    def cut(self) -> bool:
        """The reply ran into its token budget (finish reason `length`)."""
        return self.record.finish_reason == "length"

    @property
    def failed(self) -> bool:
        return self.cut or not self.record.parse_ok


@dataclass(frozen=True)
class Group:
    key: tuple[str, str, int]  # (task_id, role, turn)
    episode: int
    candidates: tuple[Candidate, ...]  # by candidate index

    @property
    def first(self) -> StepRecord:
        return self.candidates[0].record

    @property
    def flat(self) -> bool:
        """All rewards equal (or one candidate): the group teaches nothing."""
        rewards = [c.record.reward for c in self.candidates]
        return max(rewards) - min(rewards) <= 1e-12

    @property
    def failed(self) -> bool:
        """Some candidate was cut at its token budget or did not parse."""
        return any(c.failed for c in self.candidates)


@dataclass(frozen=True)
class Section:
    label: str  # "step 3", "eval", "eval at step 2"
    groups: tuple[Group, ...]

    @property
    def evaluation(self) -> bool:
        return self.label.startswith("eval")


def label_of(record: StepRecord, label: str | None) -> str:
    """The section a record belongs to: its label, else `step N` (`eval` for step -1)."""
    if label is not None:
        return label
    return "eval" if record.step < 0 else f"step {record.step}"


def sections(pairs: Iterable[tuple[StepRecord, str | None]], grouping: str = "at",
             estimators: Mapping[str, str] | None = None) -> Iterator[Section]:
    """One `Section` per run of consecutive records with the same label, holding only that
    section's records at a time (a run's records are never read whole)."""
    current = ""  # no section yet (a name is compared only once `batch` holds a record)
    batch: list[StepRecord] = []
    for record, label in pairs:
        name = label_of(record, label)
        if name != current and batch:
            yield build_section(current, batch, grouping, estimators)
            batch = []
        current = name
        batch.append(record)
    if batch:
        yield build_section(current, batch, grouping, estimators)


def step_advantages(records: list[StepRecord], grouping: str = "at",
                    estimators: Mapping[str, str] | None = None) -> list[float]:
    """The advantages the learner computed for one step's records (`estimators`: role -> the
    estimator it names, as the step passes them; None: the default for every role)."""
    groups = group_records(records, grouping)
    if not estimators:
        return compute_advantages(groups, len(records))[0]
    return compute_advantages(groups, len(records), estimators=estimators, roles=[r.role for r in records])[0]


def build_section(label: str, records: list[StepRecord], grouping: str = "at",
                  estimators: Mapping[str, str] | None = None) -> Section:
    """The groups of one step (or one evaluation), in order of first appearance."""
    evaluation = label.startswith("eval")
    if evaluation:
        advantages: list[float | None] = [None] * len(records)
    else:
        advantages = list(step_advantages(records, grouping, estimators))
    buckets: dict[tuple, list[Candidate]] = {}
    for r, a in zip(records, advantages):
        key = (r.episode, r.task_id, r.role, r.turn) if evaluation else (r.task_id, r.role, r.turn)
        buckets.setdefault(key, []).append(Candidate(r, a))
    groups = []
    for members in buckets.values():
        members.sort(key=lambda c: c.record.candidate)
        head = members[0].record
        groups.append(Group((head.task_id, head.role, head.turn), head.episode, tuple(members)))
    return Section(label, tuple(groups))
