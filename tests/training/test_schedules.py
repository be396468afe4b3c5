"""Per-policy schedules (`lr`, `train_every`, `frozen_until` in a policy block; `train { alternate,
alternate_every }`): planned and refused before a run, and on the tiny model exactly the policies
the schedule names change their weights at each step, also across a resume in mid-phase."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import masdsl
from masdsl.plan.run_plan import RunPlanError, resolve_run
from masdsl.runtime.records import read_records
from masdsl.training import checkpoint

from tests.support.toy import TOY, TOY_DIR, toy_config, train_into


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/learner/conftest.py


def two_policies(namer: str = "", copier: str = "", train_extra: str = "") -> masdsl.Workflow:
    """The toy with one policy per role (`a` for the namer, `b` for the copier) and a dense reward
    (the length of the reply), so every step has groups to learn from."""
    text = TOY.read_text()
    text = text.replace('policy shared { model: "smollm2-135m-instruct" }',
                        f'policy a {{ model: "smollm2-135m-instruct"{namer} }}\n'
                        f'policy b {{ model: "smollm2-135m-instruct"{copier} }}')
    text = text.replace("role namer {\n  policy shared", "role namer {\n  policy a")
    text = text.replace("role copier {\n  policy shared", "role copier {\n  policy b")
    for role_reward in ("reward same(digit, task.target)", "reward same(digit, namer.digit)"):
        text = text.replace(role_reward, "reward len(output)")
    text = text.replace("max_tokens: 1", "max_tokens: 4").replace("eval_every: 10 }", f"eval_every: 10{train_extra} }}")
    return masdsl.loads(text, name="two_policies", base_dir=TOY_DIR)


def config(wf, model_dir, *extra):
    return toy_config(wf, model_dir, "train.steps=6", "train.samples=4", "train.batch=3", "train.lr=0.01",
                      "train.eval_tasks=1", "train.eval_every=0", "train.checkpoint_every=1", *extra)


def test_the_plan_shows_and_refuses_schedules(tiny_model_dir):
    wf = two_policies(namer=", lr: 0.003", copier=", train_every: 2, frozen_until: 2")
    assert (wf.policies["a"].lr, wf.policies["b"].train_every, wf.policies["b"].frozen_until) == (0.003, 2, 2)
    plan = resolve_run(wf, config(wf, tiny_model_dir))
    assert (plan.lrs["a"], plan.lrs["b"]) == (0.003, 0.01)
    assert [s for s in range(1, 7) if plan.trains_at("b", s)] == [4, 6]
    lines = plan.lines()
    at = lines.index("training schedule per policy (steps 1..6):")
    assert lines[at + 1:at + 3] == ["  a: lr 0.003, updates at steps 1, 2, 3, 4, 5, 6 (6 of 6)",
                                    "  b: lr 0.01, updates at steps 4, 6 (2 of 6; train_every 2; frozen_until 2)"]
    over = resolve_run(wf, config(wf, tiny_model_dir, "policy.b.frozen_until=0", "policy.a.lr=0.5",
                                  "train.alternate=[a,b]", "train.alternate_every=2"))
    assert over.lrs["a"] == 0.5 and [s for s in range(1, 7) if over.trains_at("b", s)] == [4]
    assert [s for s in range(1, 7) if over.trains_at("a", s)] == [1, 2, 5, 6]
    with pytest.raises(RunPlanError) as refused:
        resolve_run(wf, config(wf, tiny_model_dir, "policy.b.frozen_until=6", "train.alternate=[a,c]",
                               "train.alternate_every=2"))
    assert refused.value.problems == (
        "`train.alternate` names `c`, which is not a policy of the workflow (policies: a, b)",
        "policy `b` would never update in `train.steps=6` steps (frozen_until 6, train_every 2)")


def _weights(run_dir: Path, step: int) -> dict[str, dict[str, torch.Tensor]]:
    folder = run_dir / "checkpoints" / checkpoint.checkpoint_name(step) / "policies"
    return {p: checkpoint.load_weights(folder / f"{p}.safetensors") for p in ("a", "b")}


def _changed(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> bool:
    return any(not torch.equal(before[k], after[k]) for k in before)


def _run(wf, model_dir, run_dir: Path, *extra, **kw):
    """Train; keep each step's weights as its checkpoint had them (a run keeps only the last two)."""
    seen: dict[int, dict] = {}
    result = train_into(resolve_run(wf, config(wf, model_dir, *extra)), run_dir,
                   on_step=lambda step, _m: seen.__setitem__(step, _weights(run_dir, step)), **kw)
    return result, seen


def test_alternation_changes_exactly_the_scheduled_policy_each_step(tiny_model_dir, tmp_path):
    from safetensors.torch import load_file

    wf = two_policies(train_extra=', alternate: ["a", "b"], alternate_every: 2')
    _, seen = _run(wf, tiny_model_dir, tmp_path / "full")
    initial = load_file(str(Path(tiny_model_dir) / "model.safetensors"))
    previous = {"a": initial, "b": initial}
    scheduled = {1: "a", 2: "a", 3: "b", 4: "b", 5: "a", 6: "a"}
    for step in range(1, 7):
        changed = {p for p in ("a", "b") if _changed({k: previous[p][k] for k in seen[step][p]}, seen[step][p])}
        assert changed == {scheduled[step]}, (step, changed)
        previous = seen[step]

    # stopped after step 3, in the middle of b's phase (steps 3-4), then resumed: the same run
    class Stop(Exception):
        pass

    def stop_at_3(step, _metrics):
        if step == 3:
            raise Stop

    with pytest.raises(Stop):
        train_into(resolve_run(wf, config(wf, tiny_model_dir)), tmp_path / "cut", on_step=stop_at_3)
    _, resumed = _run(wf, tiny_model_dir, tmp_path / "cut", resume=tmp_path / "cut")
    assert sorted(resumed) == [4, 5, 6]
    assert not _changed(seen[3]["a"], resumed[4]["a"]) and _changed(seen[3]["b"], resumed[4]["b"])  # still b's phase
    for step in (4, 5, 6):
        for p in ("a", "b"):
            assert not _changed(seen[step][p], resumed[step][p]), (step, p)
    key = lambda r: (r.step, r.task_id, r.role, r.candidate, tuple(r.response_ids), r.reward)  # noqa: E731
    assert ([key(r) for r in read_records(tmp_path / "cut" / "records.jsonl")]
            == [key(r) for r in read_records(tmp_path / "full" / "records.jsonl")])


def test_a_policy_lr_reaches_its_optimizer_and_mlflow_params(tiny_model_dir, tmp_path):
    from masdsl.tracking import lineage

    wf = two_policies(namer=", lr: 0.003", copier=", frozen_until: 1")
    result, _ = _run(wf, tiny_model_dir, tmp_path / "lr", "train.steps=2")
    optim = tmp_path / "lr" / "checkpoints" / checkpoint.checkpoint_name(2) / "optim"
    lrs = {p: torch.load(optim / f"{p}.pt", weights_only=False)["param_groups"][0]["lr"] for p in ("a", "b")}
    assert lrs == {"a": 0.003, "b": 0.01}
    assert result.steps == 2
    assert lineage.child_params(wf, "a")["lr"] == "0.003" and lineage.child_params(wf, "b")["frozen_until"] == "1"
    from masdsl.config import flatten

    cfg = config(wf, tiny_model_dir, "train.alternate=[a,b]", "train.alternate_every=3", "policy.b.lr=0.02")
    params = lineage.params_of(flatten(cfg))  # the parent run's params
    assert (params["train.alternate"], params["train.alternate_every"], params["policy.b.lr"]) == ("['a', 'b']", "3", "0.02")


def test_a_frozen_role_acts_but_its_rows_never_reach_an_update(tiny_model_dir, tmp_path):
    """`train.frozen_roles=[copier]`: the copier still acts and is scored every step, and the
    policy that only it uses (`b`) never changes while `a` (the namer's) changes at every step;
    a name that is not a role, or every role, is refused before the run."""
    from safetensors.torch import load_file

    wf = two_policies()
    _, seen = _run(wf, tiny_model_dir, tmp_path / "frozen", "train.steps=2", "train.frozen_roles=[copier]")
    initial = load_file(str(Path(tiny_model_dir) / "model.safetensors"))
    previous = {"a": initial, "b": initial}
    for step in (1, 2):
        changed = {p for p in ("a", "b") if _changed({k: previous[p][k] for k in seen[step][p]}, seen[step][p])}
        assert changed == {"a"}, (step, changed)
        previous = seen[step]
    records = read_records(tmp_path / "frozen" / "records.jsonl")
    copier = [r for r in records if r.role == "copier"]
    assert len(copier) >= 2 * 3 and len({r.reward for r in copier}) > 1  # it acted, with rewards that differ
    with pytest.raises(RunPlanError) as refused:
        resolve_run(wf, config(wf, tiny_model_dir, "train.frozen_roles=[copir]"))
    assert refused.value.problems == ("`train.frozen_roles`: the workflow has no role `copir` (did you mean "
                                      "`copier`?); roles: namer, copier",)
