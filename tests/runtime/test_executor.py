"""Executor semantics (docs/concepts.md, "Execution semantics") on hand-built workflows, a counter env and the replay engine."""

from __future__ import annotations

import inspect
from collections import defaultdict

import pytest

from masdsl.errors import UserError
from masdsl.runtime.backends.replay import ReplayEngine
from masdsl.runtime.executor import Hooks, rollout
from tests.support.rollout_plans import plan_of


class SpyEngine(ReplayEngine):
    """A replay engine that also keeps every generate call's requests."""

    def __init__(self, path):
        super().__init__(path)
        self.batches = []

    def generate(self, requests):
        self.batches.append(list(requests))
        return super().generate(requests)


def run(h, tmp_path, wf, rows, tasks, *, mode="train", samples=3, cfg=None, engine=None, env=None, **kw):
    engine = engine or SpyEngine(h.replay_file(tmp_path / "replay.jsonl", rows))
    env = env if env is not None else h.CounterEnv()
    cfg = cfg or h.config()
    ro = rollout(plan_of(wf, cfg, samples=samples), env, [{"id": t} for t in tasks], {p: engine for p in wf.policies},
                 mode=mode, step=0, hooks=Hooks(**kw))
    return ro, engine, env


def groups(records):
    out = defaultdict(list)
    for r in records:
        out[(r.task_id, r.role, r.turn)].append(r)
    return out


def test_tags_groups_and_argmax_with_ties(h, tmp_path):
    wf = h.workflow([h.role("a")], [("start", "a"), ("a", "a")], max_turns=2)
    rows = {("t1", "a", 0): ["1", "3", "2"], ("t1", "a", 1): ["4", "4", "0"],
            ("t2", "a", 0): ["x", "2", "5"], ("t2", "a", 1): ["9", "9", "9"]}
    ro, engine, env = run(h, tmp_path, wf, rows, ["t1", "t2"])
    g = groups(ro.records)
    assert sorted(g) == [("t1", "a", 0), ("t1", "a", 1), ("t2", "a", 0), ("t2", "a", 1)]
    for key, recs in g.items():
        assert [r.candidate for r in recs] == [0, 1, 2]
        assert len({tuple(r.prompt_ids) for r in recs}) == 1
        assert sum(r.selected for r in recs) == 1
        assert all(r.node == "a" and r.policy == "p" and r.source_line == 7 for r in recs)
    selected = {k: next(r.candidate for r in v if r.selected) for k, v in g.items()}
    assert selected == {("t1", "a", 0): 1, ("t1", "a", 1): 0, ("t2", "a", 0): 2, ("t2", "a", 1): 0}
    assert [r.reward for r in g[("t2", "a", 0)]] == [-100.0, 2.0, 5.0]  # parse failure -> empty value -100
    assert "total 3" in g[("t1", "a", 1)][0].prompt_text  # the winner of turn 0 continued
    assert {e.task_id: (e.truncated, e.turns) for e in ro.episodes} == {"t1": (True, {"a": 2}), "t2": (True, {"a": 2})}
    assert env.applied["a"] == 12  # K applies per step; a single-role winner is not re-applied
    assert len(engine.batches) == 2 and all(len(b) == 2 and b[0].n == 3 for b in engine.batches)
    assert ro.tokens_generated == sum(len(r.response_ids) for r in ro.records)
    assert all(r.logprobs == [0.0] * len(r.response_ids) and r.finish_reason == "replay" for r in ro.records)


def test_reward_is_alpha_team_plus_local(h, tmp_path):
    wf = h.workflow([h.role("a")], [("start", "a"), ("a", "end")], team=h.total(), alpha=0.5)
    ro, _, _ = run(h, tmp_path, wf, {("t", "a", 0): ["2", "6"]}, ["t"], samples=2)
    assert [(r.reward_team, r.reward_local, r.reward) for r in ro.records] == [(2.0, 2.0, 3.0), (6.0, 6.0, 9.0)]
    assert ro.episodes[0].team_reward == 6.0 and ro.records[0].episode_reward == 6.0


def test_guards_in_file_order_and_fallback(h, tmp_path):
    ge = lambda k: h.PyExpr(f"env.total >= {k}", lambda c: c.env_view["total"] >= k)  # noqa: E731
    wf = h.workflow([h.role("a"), h.role("b")],
                    [("start", "a"), ("a", "end", ge(10)), ("a", "b", ge(5)), ("a", "a"), ("b", "end")], max_turns=3)
    rows = {("t1", "a", 0): ["6"], ("t1", "b", 0): ["1"], ("t2", "a", 0): ["12"],
            **{("t3", "a", i): ["1"] for i in range(3)}}
    ro, _, _ = run(h, tmp_path, wf, rows, ["t1", "t2", "t3"], mode="eval")
    path = defaultdict(list)
    for r in ro.records:
        path[r.task_id].append((r.role, r.turn))
    assert path == {"t1": [("a", 0), ("b", 0)], "t2": [("a", 0)], "t3": [("a", 0), ("a", 1), ("a", 2)]}
    res = {e.task_id: e for e in ro.episodes}
    assert not res["t1"].truncated and not res["t2"].truncated and res["t3"].truncated
    assert (res["t1"].success, res["t2"].success, res["t3"].success) == (0.0, 1.0, 0.0)  # env.success: total >= 10


def test_max_turns_ends_a_round_robin_when_a_role_would_act_again(h, tmp_path):
    wf = h.workflow([h.role("a"), h.role("b")], [("start", "a"), ("a", "b"), ("b", "a")], max_turns=2)
    rows = {("t", r, i): ["1"] for r in "ab" for i in range(2)}
    ro, _, _ = run(h, tmp_path, wf, rows, ["t"], mode="eval")
    assert [(r.role, r.turn) for r in ro.records] == [("a", 0), ("b", 0), ("a", 1), ("b", 1)]
    assert ro.episodes[0].turns == {"a": 2, "b": 2} and ro.episodes[0].truncated


def test_parallel_group_scores_against_pre_step_state_then_applies_winners_in_role_order(h, tmp_path):
    saw_a = h.PyExpr("env.total + a.ok", lambda c: c.env_view["total"] + 100 * c.fields["a"]["ok"])
    wf = h.workflow([h.role("a", reward=h.total()), h.role("b", reward=saw_a)],
                    [("start", "b&a"), ("b&a", "b&a")], max_turns=2)
    rows = {("t", "a", 0): ["1", "5"], ("t", "b", 0): ["2", "3"], ("t", "a", 1): ["0", "0"], ("t", "b", 1): ["1", "0"]}
    ro, engine, env = run(h, tmp_path, wf, rows, ["t"], samples=2)
    g = groups(ro.records)
    assert [r.reward for r in g[("t", "a", 0)]] == [1.0, 5.0]  # b's move not applied: pre-step state
    assert [r.reward for r in g[("t", "b", 0)]] == [2.0, 3.0]  # a unchanged: not ok, total 0 + own move
    assert [r.reward for r in g[("t", "b", 1)]] == [109.0, 108.0]  # a's turn-0 winner is now visible
    assert all(r.node == "b&a" for r in ro.records)
    assert len(engine.batches) == 2 and [q.key[1] for q in engine.batches[0]] == ["b", "a"]
    # turn 0 winners b=3, a=5; turn 1 winners b=1, a=0: total 9 < 10
    assert ro.records[0].episode_success == 0.0 and ro.episodes[0].rewards_by_role_turn[("b", 1)] == 109.0


def test_group_final_state_order(h, tmp_path):
    wf = h.workflow([h.role("a"), h.role("b")], [("start", "b&a"), ("b&a", "end")],
                    success=h.PyExpr("env.log", lambda c: c.env_view["log"] == [("b", 3), ("a", 5)]))
    rows = {("t", "a", 0): ["1", "5"], ("t", "b", 0): ["2", "3"]}
    ro, _, env = run(h, tmp_path, wf, rows, ["t"], samples=2)
    assert ro.episodes[0].success == 1.0
    assert env.applied == {"a": 3, "b": 2}  # K each to score, then a's winner applied on b's winner state


def test_parse_failure_sets_ok_false_and_empty_value(h, tmp_path):
    wf = h.workflow([h.role("a")], [("start", "a"), ("a", "end")])
    ro, _, _ = run(h, tmp_path, wf, {("t", "a", 0): ["no number here"]}, ["t"], mode="eval")
    (r,) = ro.records
    assert (r.parse_ok, r.fields, r.reward) == (False, {"n": -100, "ok": False}, -100.0)


def test_failing_reward_guard_and_success_count_and_score_zero(h, tmp_path):
    boom = h.PyExpr("1 / 0", lambda c: 1 / 0)
    wf = h.workflow([h.role("a", reward=boom)], [("start", "a"), ("a", "end", boom), ("a", "a")], max_turns=2,
                    success=boom)
    rows = {("t", "a", 0): ["1", "2"], ("t", "a", 1): ["3", "4"]}
    ro, _, _ = run(h, tmp_path, wf, rows, ["t"], samples=2)
    assert [r.reward for r in ro.records] == [0.0] * 4
    assert [r.turn for r in ro.records] == [0, 0, 1, 1]  # the guard failed -> fallback edge
    assert ro.episodes[0].success == 0.0
    msgs = {m.split(" raised")[0]: n for m, n in ro.errors.items()}
    assert msgs == {"t.mas:7:3: reward of `a` `1 / 0`": 4, "t.mas:7:3: guard `1 / 0`": 2, "t.mas:7:3: success `1 / 0`": 1}


def test_env_failure_is_retried_then_scored_zero(h, tmp_path):
    wf = h.workflow([h.role("a")], [("start", "a"), ("a", "end")])
    env = h.CounterEnv(fail_apply=True)
    ro, _, _ = run(h, tmp_path, wf, {("t", "a", 0): ["5", "6"]}, ["t"], samples=2, env=env,
                   cfg=h.config("runtime.env_retries=2", "runtime.env_workers=1"), on_env_failure="score")
    assert [r.reward for r in ro.records] == [0.0, 0.0] and ro.records[0].selected
    assert list(ro.errors.values()) == [1] and "env exploded" in next(iter(ro.errors))


def test_eval_mode_one_candidate_eval_temperature_deterministic_seeds(h, tmp_path):
    wf = h.workflow([h.role("a", sample={"temperature": 0.9, "max_tokens": 7, "stop": ["\n"]})],
                    [("start", "a"), ("a", "end")])
    rows = {("t1", "a", 0): ["1", "2"], ("t2", "a", 0): ["3"]}
    ro, eng, _ = run(h, tmp_path, wf, rows, ["t1", "t2"], mode="eval", samples=4,
                     cfg=h.config("train.eval_temperature=0.25"))
    (batch,) = eng.batches
    assert [(q.n, q.temperature, q.max_tokens, q.stop) for q in batch] == [(1, 0.25, 7, ["\n"])] * 2
    assert len(ro.records) == 2
    _, eng2, _ = run(h, tmp_path, wf, rows, ["t1", "t2"], mode="eval", samples=4)
    _, eng3, _ = run(h, tmp_path, wf, rows, ["t1", "t2"], mode="train", samples=2)
    assert [q.seed for q in batch] == [q.seed for q in eng2.batches[0]]
    assert batch[0].seed != batch[1].seed
    assert eng3.batches[0][0].temperature == 0.9


def test_policies_on_one_engine_share_a_call_and_separate_engines_do_not(h, tmp_path):
    wf = h.workflow([h.role("a", policy="p"), h.role("b", policy="q")], [("start", "a&b"), ("a&b", "end")])
    path = h.replay_file(tmp_path / "r.jsonl", {("t", "a", 0): ["1"], ("t", "b", 0): ["2"]})
    shared = SpyEngine(path)
    rollout(plan_of(wf, h.config()), h.CounterEnv(), [{"id": "t"}], {"p": shared, "q": shared}, mode="eval", step=-1)
    assert len(shared.batches) == 1 and len(shared.batches[0]) == 2
    e1, e2 = SpyEngine(path), SpyEngine(path)
    rollout(plan_of(wf, h.config()), h.CounterEnv(), [{"id": "t"}], {"p": e1, "q": e2}, mode="eval", step=-1)
    assert [len(e.batches) for e in (e1, e2)] == [1, 1]
    with pytest.raises(UserError, match="no inference engine for policy `q`"):
        rollout(plan_of(wf, h.config()), h.CounterEnv(), [{"id": "t"}], {"p": e1}, mode="eval", step=-1)


def test_prompt_sees_fields_history_and_system(h, tmp_path):
    wf = h.workflow([h.role("a"), h.role("b", prompt="a said {{ a.n }} ok={{ a.ok }} h={{ history|length }} {{ role }}",
                                        system="sys {{ turn }}")],
                    [("start", "a"), ("a", "b"), ("b", "end")])
    ro, _, _ = run(h, tmp_path, wf, {("t", "a", 0): ["4"], ("t", "b", 0): ["1"]}, ["t"], mode="eval")
    assert ro.records[1].prompt_text == "<|system|>\nsys 0\n<|user|>\na said 4 ok=True h=1 b\n<|assistant|>\n"


def test_prompt_errors_and_truncation(h, tmp_path):
    rows = {("t", "a", 0): ["1"]}
    bad = h.workflow([h.role("a", prompt="{{ task.nope }}")], [("start", "a"), ("a", "end")])
    with pytest.raises(UserError, match="prompt of role `a`.*nope"):
        run(h, tmp_path, bad, rows, ["t"], mode="eval")
    long = h.workflow([h.role("a", prompt="x" * 100)], [("start", "a"), ("a", "end")])
    with pytest.raises(UserError, match="more than runtime.max_prompt_tokens=50"):
        run(h, tmp_path, long, rows, ["t"], mode="eval", cfg=h.config("runtime.max_prompt_tokens=50"))
    ro, _, _ = run(h, tmp_path, long, rows, ["t"], mode="eval",
                   cfg=h.config("runtime.max_prompt_tokens=50", "runtime.truncate_prompts=true"))
    assert ro.truncated_prompts == 1 and ro.records[0].truncated_prompt and len(ro.records[0].prompt_ids) == 50


def test_records_stream_per_finished_episode_with_outcome(h, tmp_path):
    wf = h.workflow([h.role("a")], [("start", "a"), ("a", "end", h.PyExpr("t", lambda c: c.env_view["total"] >= 10)),
                                    ("a", "a")], max_turns=3)
    rows = {("fast", "a", 0): ["10"], **{("slow", "a", i): ["4"] for i in range(3)}}
    batches, done = [], []
    ro, _, _ = run(h, tmp_path, wf, rows, ["slow", "fast"], mode="eval", on_records=batches.append,
                   progress=done.append)
    assert [[(r.task_id, r.turn) for r in b] for b in batches] == [[("fast", 0)], [("slow", 0), ("slow", 1), ("slow", 2)]]
    assert [r for b in batches for r in b] == ro.records and done == [1, 1]
    assert [r.episode_success for r in ro.records] == [1.0, 1.0, 1.0, 1.0]  # slow reaches 12 >= 10 at turn 2
    assert [e.task_id for e in ro.episodes] == ["slow", "fast"]  # in task order
    assert ro.episodes[0].rewards_by_role_turn == {("a", 0): 4.0, ("a", 1): 4.0, ("a", 2): 4.0}


def test_keep_records_false_streams_only(h, tmp_path):
    wf = h.workflow([h.role("a")], [("start", "a"), ("a", "end")])
    batches = []
    ro, _, _ = run(h, tmp_path, wf, {("t", "a", 0): ["1", "2"]}, ["t"], samples=2, on_records=batches.append,
                   keep_records=False)
    assert ro.records == [] and [len(b) for b in batches] == [2] and ro.episodes[0].rewards_by_role_turn == {("a", 0): 2.0}


def test_an_env_without_the_whole_contract_is_refused_by_name(h, tmp_path):
    """`limits` is part of `Env` (masdsl.envs.base): an env without it is named, not probed around."""
    wf = h.workflow([h.role("a", policy="p")], [("start", "a"), ("a", "end")])
    engine = SpyEngine(h.replay_file(tmp_path / "r.jsonl", {("t", "a", 0): ["1"]}))

    class NoLimits:  # CounterEnv's moves, without `limits`
        def __init__(self):
            self.inner = h.CounterEnv()

        def reset(self, task):
            return self.inner.reset(task)

        def apply(self, state, role, fields):
            return self.inner.apply(state, role, fields)

        def view(self, state):
            return self.inner.view(state)

        def success(self, state):
            return self.inner.success(state)

    with pytest.raises(UserError, match=r"env `NoLimits` lacks limits of the Env contract"):
        rollout(plan_of(wf, h.config()), NoLimits(), [{"id": "t"}], {"p": engine}, mode="eval", step=-1)
    ro = rollout(plan_of(wf, h.config()), h.CounterEnv(), [{"id": "t"}], {"p": engine}, mode="eval", step=-1)
    assert len(ro.episodes) == 1


def test_rollout_takes_its_shape_and_seeds_from_the_plan(h, tmp_path):
    """At most 8 parameters: the workflow, K, the episodes per task and the seed are the plan's.
    A step's second draw continues the first's repeat numbering (one seed stride): its two
    episodes sample with the seeds of episodes 2 and 3 of a four-episode rollout."""
    assert len(inspect.signature(rollout).parameters) <= 8
    assert {"workflow", "samples", "seed", "repeats"}.isdisjoint(inspect.signature(rollout).parameters)
    wf = h.workflow([h.role("a")], [("start", "a"), ("a", "end")])
    path = h.replay_file(tmp_path / "r.jsonl", {("t", "a", 0): ["1"]})

    def seeds(repeats, draw, seed=0):
        engine = SpyEngine(path)
        rollout(plan_of(wf, h.config("train.eval_temperature=1.0"), repeats=repeats, seed=seed), h.CounterEnv(),
                [{"id": "t"}], {"p": engine}, mode="eval", step=0, draw=draw)
        return [r.seed for batch in engine.batches for r in batch]

    four = seeds(4, 0)
    assert len(set(four)) == 4 and seeds(2, 1) == four[2:] and seeds(2, 0) == four[:2]
    assert seeds(2, 0, seed=5) != four[:2]  # the seed is `train.seed`
