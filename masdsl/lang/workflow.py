"""`Workflow`: what the compiler produces and the runtime, learner and tracker consume.

This module is the contract between `masdsl.lang` and everything downstream. It holds plain
data: specifications, a `networkx.DiGraph` of the flow, and compiled expressions. Nothing in it
parses text or runs models.

Graph layout (`Workflow.graph`):
  nodes  "start", "end", one per role used alone ("coder"), one per parallel group
         ("coder&tester", roles in the order written).
         attrs: kind in {"start", "end", "role", "group"}, roles: tuple[str, ...], span: Span | None
  edges  attrs: order (int, file order of edges leaving the source), guard (Expr | None),
         span: Span | None
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Protocol

if TYPE_CHECKING:  # the graph's type only: importing networkx costs `masdsl check` ~150 ms
    import networkx as nx

    from masdsl.envs.registry import Registry


@dataclass(frozen=True, slots=True)
class Span:
    file: str  # as the user wrote it: "workflows/coder_tester.mas"
    line: int  # 1-based
    col: int  # 1-based, in characters
    end_line: int
    end_col: int
    start: int  # character offsets into the source
    end: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


@dataclass
class EvalContext:
    """Everything an expression may read.

    - `task.x`      -> task[x]
    - `env.x`       -> env_view[x]           (Env.view(state))
    - `ROLE.FIELD`  -> fields[ROLE][FIELD]   (parse results; every role also has `output`, `ok`)
    - bare `FIELD`  -> fields[role][FIELD]   (inside a role's own `reward`/`parse`)
    - `output`      -> output                (inside `parse`: the raw completion text)
    - `turn`        -> turn
    - env-bound functions are called as fn(state, *args)
    - functions with a keyword `limits` (the ones that run code) get `limits=` the env's sandbox limits
    """

    task: Mapping[str, Any]
    state: Any = None
    env_view: Mapping[str, Any] = field(default_factory=dict)
    fields: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    turn: int = 0
    role: str | None = None
    output: str | None = None
    limits: Any = None  # the env's sandbox limits: reward functions with a `limits=` parameter get them
    judged: Mapping[int, float] = field(default_factory=dict)  # `judge(...)` call offset -> its score (runtime.judge)


class Expr(Protocol):
    """A compiled, checked expression. Never evaluated with Python eval."""

    span: Span
    source: str  # the expression's text as written

    def evaluate(self, ctx: EvalContext) -> Any: ...


@dataclass(frozen=True)
class LoraSettings:
    """A policy's `lora: { ... }` block, typed; peft's defaults (r 8, alpha 2r) where a key is
    left out. The one place these defaults are written.

    >>> LoraSettings.of({"r": 16}), LoraSettings.of({"r": 4, "alpha": 8, "dropout": 0.1}).alpha
    (LoraSettings(r=16, alpha=32.0, dropout=0.0, target_modules='all-linear'), 8.0)
    """

    r: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    target_modules: Any = "all-linear"

    @classmethod
    def of(cls, block: Mapping[str, Any]) -> "LoraSettings":
        r = int(block.get("r", cls.r))
        return cls(r, float(block.get("alpha", 2 * r)), float(block.get("dropout", cls.dropout)),
                   block.get("target_modules", cls.target_modules))


@dataclass(frozen=True)
class SampleSpec:
    """A role's `sample { }` settings after the overrides, typed: every default written once,
    here (a role's request, the reply budgets, the engines' context length read them).

    >>> s = SampleSpec.of({"max_tokens": 64, "stop": ["\\n"], "samples": 8})
    >>> s.max_tokens, s.temperature, s.stop, s.samples, s.given()
    (64, 1.0, ('\\n',), 8, {'max_tokens': 64, 'samples': 8, 'stop': ['\\n']})
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0: off
    min_p: float = 0.0  # 0: off
    max_tokens: int = 256  # a role's reply budget when neither its `sample { }` nor an override sets one
    stop: tuple[str, ...] = ()
    seed: int | None = None  # folded into the role's request seeds
    repetition_penalty: float = 1.0  # 1: off
    samples: int | None = None  # the role's own K in training (None: `train.samples`)
    keys: tuple[str, ...] = ()  # the keys the file or an override set (what `--dry-run` prints)

    @classmethod
    def of(cls, block: Mapping[str, Any]) -> "SampleSpec":
        casts = {"temperature": float, "top_p": float, "top_k": int, "min_p": float, "max_tokens": int,
                 "stop": tuple, "seed": int, "repetition_penalty": float, "samples": int}
        given = {k: v for k, v in block.items() if v is not None}
        return cls(**{k: casts[k](v) for k, v in given.items() if k in casts}, keys=tuple(sorted(given)))

    def given(self) -> dict[str, Any]:
        """The keys set, as written (`stop` as a list)."""
        return {k: list(v) if isinstance(v, tuple) else v for k in self.keys for v in (getattr(self, k),)}


@dataclass(frozen=True)
class PolicySpec:
    name: str
    model: str
    lora: Mapping[str, Any] | None = None  # e.g. {"r": 16, "alpha": 32}; typed: `lora_settings`
    frozen: bool = False
    options: Mapping[str, Any] = field(default_factory=dict)  # any other keys of the block
    span: Span | None = None
    # extra keyword arguments of `tokenizer.apply_chat_template`, e.g. {"enable_thinking": False}
    chat_template_kwargs: Mapping[str, Any] | None = None
    # its schedule (masdsl.plan.schedule): AdamW lr (None: train.lr), updates at steps N, 2N, ...,
    # none at steps 1..frozen_until
    lr: float | None = None
    train_every: int = 1
    frozen_until: int = 0

    @property
    def lora_settings(self) -> LoraSettings | None:
        """The `lora` block typed (None: full weights)."""
        return LoraSettings.of(self.lora) if self.lora else None


@dataclass(frozen=True)
class ParseSpec:
    name: str
    expr: Expr  # a call of a registered parser
    span: Span | None = None
    empty: Any = None  # the field's value when the parser fails: the parser's registered `empty`


@dataclass(frozen=True)
class RoleSpec:
    name: str
    policy: str
    prompt: str  # Jinja2 source (dedented); variables: task, env, turn, role names, history
    system: str | None = None
    sample: Mapping[str, Any] = field(default_factory=dict)  # the `sample { }` block (check_roles.SAMPLE_KEYS)
    parses: tuple[ParseSpec, ...] = ()
    reward: Expr | None = None
    span: Span | None = None
    prompt_span: Span | None = None
    advantage: str = "grpo"  # the `advantage NAME` line: the estimator of its groups (config_schema.ADVANTAGES)
    judges: tuple[Any, ...] = ()  # the `judge(...)` calls of its reward: masdsl.lang.judge.JudgeSpec
    metrics: tuple[tuple[str, Expr], ...] = ()  # the `metric NAME = expr` lines: measured, never rewarded


@dataclass(frozen=True)
class DataSpec:
    split: str  # "train" | "eval"
    source: str | None = None  # registered data source name, or None for a file
    args: tuple[Any, ...] = ()  # the call's arguments as written, split included: humaneval("train") -> ("train",)
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    path: Path | None = None  # JSONL file, resolved relative to the .mas file
    span: Span | None = None
    base_dir: Path | None = None  # the .mas file's folder: the data source's relative paths are read from it


@dataclass
class Workflow:
    name: str
    description: str
    env: str
    graph: nx.DiGraph
    roles: dict[str, RoleSpec]
    policies: dict[str, PolicySpec]
    data: dict[str, DataSpec]
    env_args: Mapping[str, Any] = field(default_factory=dict)
    max_turns: int | None = None
    team: Expr | None = None
    alpha: float = 1.0
    success: Expr | None = None  # None: the env's own Env.success(state)
    train: dict[str, Any] = field(default_factory=dict)  # the file's `train { }` block, raw, and `sandbox { }` as its `sandbox`
    imports: tuple[Path, ...] = ()
    path: Path | None = None
    source: str = ""
    file_hash: str = ""  # sha256 of the source text
    # The part of the checker's registry this workflow names (its env, data sources and
    # functions): what the runtime instantiates and calls, so a workflow checked against a
    # registry runs against that same registry. None: built by hand (the built-ins serve).
    registry: Registry | None = None

    def roles_of_policy(self, policy: str) -> list[str]:
        return [r.name for r in self.roles.values() if r.policy == policy]

    def successors(self, node: str) -> list[tuple[str, Expr | None]]:
        """Edges leaving `node` in file order: (target, guard)."""
        out = sorted(self.graph.out_edges(node, data=True), key=lambda e: e[2]["order"])
        return [(v, d.get("guard")) for _, v, d in out]
