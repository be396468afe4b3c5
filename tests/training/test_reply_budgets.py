"""Budgets you can see: per role, the share of replies cut by `max_tokens` and of failed parses
(`cut/<role>`, `parse_fail/<role>`, `eval_cut/<role>`, `eval_parse_fail/<role>`), the warning
when more than a fifth of a role's replies are cut, and `sample."*"`, the every-role override
the GPU recipes raise the budget with.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

import masdsl
from masdsl.commands.eval import table as eval_table
from masdsl.config import ConfigError, check_names, flatten, resolve_config
from masdsl.plan.run_plan import resolve_run
from masdsl.plan.run_plan import resolve_rollout, role_sample
from masdsl.runtime.records import StepRecord, read_records
from masdsl.tracking.lineage import params_of, route
from masdsl.training.display import Progress, cut_warnings, role_budgets, step_line, summary_table
from masdsl.training.metrics import eval_metrics, reply_counts, reply_shares, step_metrics

from tests.support.overrides import tiny_hf
from tests.support.toy import TOY, TOY_DIR, train_into

ROOT = Path(__file__).resolve().parents[2]
CODER_TESTER = ROOT / "workflows" / "coder_tester.mas"

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/learner/conftest.py


def rec(role: str, finish: str = "stop", ok: bool = True) -> StepRecord:
    return StepRecord(step=0, episode=0, task_id="t", role=role, turn=0, node=role, candidate=0, selected=True,
                      policy="p", prompt_ids=[1], response_ids=[2, 3], logprobs=[0.0, 0.0], reward=0.0,
                      reward_team=0.0, reward_local=0.0, finish_reason=finish, parse_ok=ok)


RECORDS = [rec("coder", "length"), rec("coder", "length", ok=False), rec("coder", "stop"), rec("coder", "replay"),
           rec("tester", "stop", ok=False), rec("tester", "stop", ok=False), rec("tester", "stop")]
EPISODES = [SimpleNamespace(task_id="t", success=1.0, team_reward=1.0, rewards_by_role_turn={("coder", 0): 1.0})]


def shares_from(records: list[StepRecord], prefix: str = "") -> dict[str, float]:
    """The expected shares, counted independently of `reply_counts`."""
    out = {}
    for role in {r.role for r in records}:
        mine = [r for r in records if r.role == role]
        out[f"{prefix}cut/{role}"] = round(sum(r.finish_reason == "length" for r in mine) / len(mine), 6)
        out[f"{prefix}parse_fail/{role}"] = round(sum(not r.parse_ok for r in mine) / len(mine), 6)
    return out


def test_shares_count_length_finishes_and_failed_parses():
    assert reply_counts(RECORDS) == {"coder": [4, 2, 1], "tester": [3, 0, 2]}
    assert reply_shares(reply_counts(RECORDS)) == {"cut/coder": 0.5, "parse_fail/coder": 0.25,
                                                   "cut/tester": 0.0, "parse_fail/tester": 0.666667}
    streamed: dict[str, list[int]] = {}  # counted batch by batch, as `masdsl eval` streams its records
    reply_counts(RECORDS[:3], streamed)
    reply_counts(RECORDS[3:], streamed)
    assert streamed == reply_counts(RECORDS)
    gstats = SimpleNamespace(groups=2, zero_variance_frac=0.5)
    m = step_metrics(RECORDS, EPISODES, gstats, {}, tokens=14, rollout_s=1.0, update_s=1.0, kl_on=False)
    assert {k: v for k, v in m.items() if k.startswith(("cut/", "parse_fail/"))} == shares_from(RECORDS)
    ev = eval_metrics(RECORDS, EPISODES)
    assert {k: v for k, v in ev.items() if k.startswith(("eval_cut/", "eval_parse_fail/"))} == shares_from(RECORDS, "eval_")
    assert ev["eval_cut/coder"] == 0.5 and "cut/coder" not in ev  # eval names never collide with a step's
    assert eval_metrics([], EPISODES, replies=streamed) == {**eval_metrics([], EPISODES), **shares_from(RECORDS, "eval_")}
    assert not any(k.startswith("eval_cut/") for k in eval_metrics([], EPISODES))  # nothing counted: no share


def test_the_warning_fires_above_a_fifth_and_not_at_it():
    at_a_fifth = reply_shares({"coder": [5, 1, 0]})  # 1 of 5 cut: 0.2
    assert at_a_fifth["cut/coder"] == 0.2 and cut_warnings(at_a_fifth, {"coder": 192}) == []
    assert cut_warnings(reply_shares({"coder": [10, 0, 0]}), {"coder": 192}) == []
    above = reply_shares({"coder": [9, 2, 0], "tester": [4, 0, 4]})  # 2 of 9 cut: 22 %; the tester's parses fail, none cut
    assert cut_warnings(above, {"coder": 192, "tester": 64}) == [
        "warning: 22 % of role `coder`'s replies were cut at max_tokens=192; "
        "raise its budget with `sample.coder.max_tokens=384`"]
    assert cut_warnings(above, {}, what="eval_cut") == []  # the eval shares are other metrics
    eval_above = reply_shares({"coder": [4, 4, 0]}, prefix="eval_")
    assert [w.split(";")[0] for w in cut_warnings(eval_above, {"coder": 64}, what="eval_cut")] == [
        "warning: 100 % of role `coder`'s replies were cut at max_tokens=64"]


def test_a_run_warns_once_per_policy_whose_prompt_groups_do_not_fit_the_micro_batch_budget():
    buf = io.StringIO()
    show = Progress(Console(file=buf, width=400), steps=3)
    show.micro_batch_tokens = 512
    show.step(1, {"split_groups/p": 0.0, "largest_group_tokens/p": 300.0})
    show.step(2, {"split_groups/p": 0.5, "largest_group_tokens/p": 812.0})
    show.step(3, {"split_groups/p": 1.0, "largest_group_tokens/p": 900.0})  # not repeated
    lines = [line for line in buf.getvalue().splitlines() if line.startswith("warning")]
    assert lines == [
        "warning: 50 % of policy `p`'s prompt groups at step 2 did not fit train.micro_batch_tokens=512 (the largest, "
        "a prompt and its replies: 812 tokens), so their prompt ran once per micro-batch instead of once; "
        "`train.micro_batch_tokens=1024` keeps them whole (a faster update; its peak memory grows with the budget: "
        "docs/performance.md `## step memory`)"]


def test_a_run_warns_once_per_role():
    buf = io.StringIO()
    show = Progress(Console(file=buf, width=400), steps=3)
    show.budgets = {"coder": 192, "tester": 64}
    show.step(1, {"cut/coder": 0.5, "cut/tester": 0.0})
    show.step(2, {"cut/coder": 0.75, "cut/tester": 0.25})  # the coder again (not repeated), the tester for the first time
    show.step(3, {"cut/coder": 1.0, "cut/tester": 1.0})
    lines = [line for line in buf.getvalue().splitlines() if line.startswith("warning")]
    assert lines == [
        "warning: 50 % of role `coder`'s replies at step 1 were cut at max_tokens=192; raise its budget with "
        "`sample.coder.max_tokens=384`",
        "warning: 25 % of role `tester`'s replies at step 2 were cut at max_tokens=64; raise its budget with "
        "`sample.tester.max_tokens=128`"]


def test_every_role_budget_and_a_role_key_wins():
    wf = masdsl.load(CODER_TESTER)
    assert role_budgets(resolve_rollout(wf, resolve_config(wf.train))) == {"coder": 384, "tester": 192}  # the file's
    assert role_budgets(resolve_rollout(wf, resolve_config(wf.train, overrides=["sample.*.max_tokens=4096"]))) == {"coder": 4096, "tester": 4096}
    for order in (["sample.*.max_tokens=4096", "sample.coder.max_tokens=8"],
                  ["sample.coder.max_tokens=8", "sample.*.max_tokens=4096"]):
        cfg = resolve_config(wf.train, overrides=order)
        assert role_budgets(resolve_rollout(wf, cfg)) == {"coder": 8, "tester": 4096}, order
        assert role_sample(wf, cfg, "tester")["temperature"] == 1.0  # keys not overridden keep the file's value


def test_every_role_key_in_a_yaml_file(tmp_path):
    wf = masdsl.load(CODER_TESTER)
    good = tmp_path / "good.yaml"
    good.write_text('sample:\n  "*": { max_tokens: 4096, top_p: 0.95 }\n  tester: { max_tokens: 100 }\n')
    cfg = resolve_config(wf.train, good)
    check_names(cfg, wf)  # `*` is no role, and is no error
    assert role_budgets(resolve_rollout(wf, cfg)) == {"coder": 4096, "tester": 100}
    assert role_sample(wf, cfg, "tester")["top_p"] == 0.95
    bad = tmp_path / "bad.yaml"
    bad.write_text("sample:\n  *: { max_tokens: 4096 }\n")  # YAML reads `*x` as an alias
    with pytest.raises(ConfigError, match=r'bad.yaml:2:\d+: not valid YAML: .*quote the every-role key: `"\*":`'):
        resolve_config(wf.train, bad)


@pytest.mark.parametrize("config, workflows", [
    ("configs/paper.yaml", sorted(p.name for p in (ROOT / "workflows").glob("*.mas"))),
    ("configs/gpu_1.yaml", ["plan_path.mas"]),
    ("configs/gpu_8.yaml", ["plan_path_per_role.mas"]),
    ("configs/gpu_2x8.yaml", ["plan_path_per_role.mas"]),
])
def test_recipes_raise_every_role_to_the_papers_4k(config, workflows):
    checked = 0
    for name in workflows:
        wf = masdsl.load(ROOT / "workflows" / name)
        cfg = resolve_config(wf.train, ROOT / config)
        if not set(cfg.policy) - {"*"} <= set(wf.policies):  # a recipe naming policies (the recipes name none: `policy."*"`)
            continue
        checked += 1
        check_names(cfg, wf)
        assert role_budgets(resolve_rollout(wf, cfg)) == {role: 4096 for role in wf.roles}, name
        first = next(iter(wf.roles))
        lowered = resolve_config(wf.train, ROOT / config, [f"sample.{first}.max_tokens=64"])
        assert role_budgets(resolve_rollout(wf, lowered))[first] == 64
    assert checked >= len(workflows) // 2


def test_sample_overrides_are_checked():
    wf = SimpleNamespace(roles={"coder": None, "tester": None}, policies={"shared": None})
    for override, message in [
        ("sample.*.max_tokens=0", "`sample.*.max_tokens` must be a whole number of at least 1; got 0"),
        ("sample.*.top_p=1.5", "`sample.*.top_p` must be in (0, 1]; got 1.5"),
        ("sample.coder.temperature=-0.5", "`sample.coder.temperature` must be at least 0; got -0.5"),
        ("sample.*.max_token=9", "unknown config key `sample.*.max_token` (did you mean `sample.*.max_tokens`?)"),
    ]:
        with pytest.raises(ConfigError) as err:
            resolve_config(overrides=[override])
        assert str(err.value) == message
    cfg = resolve_config(overrides=["sample.*.max_tokens=4096", "sample.codr.max_tokens=8"])
    with pytest.raises(ConfigError, match=r"no role `codr` \(did you mean `sample.coder`\?\); roles: coder, tester"):
        check_names(cfg, wf)


def test_every_role_override_is_a_valid_mlflow_param_and_shares_route_to_the_policy():
    params = params_of(flatten(resolve_config(overrides=["sample.*.max_tokens=4096"])))
    assert params["sample._.max_tokens"] == "4096" and not any("*" in k for k in params)
    validation = pytest.importorskip("mlflow.utils.validation")
    for key in params:
        validation._validate_param_name(key)
    roles = {"coder": "shared", "tester": "critic"}
    assert [route(k, {"shared", "critic"}, roles) for k in ("cut/coder", "parse_fail/tester", "eval_cut/tester",
                                                             "eval_parse_fail/coder")] == ["shared", "critic", "critic", "shared"]


def test_the_progress_line_and_the_summary_show_the_shares(tmp_path):
    line = step_line(2, 5, {"success/train": 0.5, "cut/coder": 0.5, "cut/tester": 0.0, "parse_fail/coder": 0.0,
                            "parse_fail/tester": 0.25})
    assert line == "step 2/5  success 0.50  cut coder 50 %  parse-fail tester 25 %"
    assert "cut" not in step_line(1, 5, {"success/train": 0.5, "cut/coder": 0.0, "parse_fail/coder": 0.0})
    history = [{"cut/coder": 0.5, "parse_fail/coder": 0.25}, {"cut/coder": 0.25, "parse_fail/coder": 0.0}]
    result = SimpleNamespace(workflow="w", eval_before={"success/eval": 0.0, "eval_cut/coder": 1.0},
                             eval_after={"success/eval": 0.5, "eval_cut/coder": 0.5}, history=history, steps=2,
                             wall_s=1.0, run_dir=tmp_path, checkpoints=[], mlflow_run_id=None, ui_command="")
    text = render(summary_table(result))
    assert "replies cut at max_tokens, train (first -> last step)" in text and "coder 50 % -> 25 %" in text
    assert "replies whose parse failed, train (first -> last step)" in text and "coder 25 % -> 0 %" in text
    assert "replies cut at max_tokens, eval (before -> after)" in text and "coder 100 % -> 50 %" in text
    m = {"success/eval": 0.5, "eval_cut/coder": 0.5, "eval_parse_fail/coder": 0.25, "episodes": 4,
         "truncated_episodes": 0, "tokens_generated": 8, "tokens_per_s": 1.0, "wall_s": 1.0, "gen_s": 1.0,
         "env_s": 0.0, "truncated_prompts": 0, "expression_errors": 0}
    text = render(eval_table(SimpleNamespace(name="w"), m, tmp_path))
    assert "replies cut at max_tokens · coder" in text and "50.0 %" in text
    assert "replies whose parse failed · coder" in text and "25.0 %" in text


def render(renderable) -> str:
    buf = io.StringIO()
    Console(file=buf, width=300).print(renderable)
    return buf.getvalue()


def test_a_training_run_counts_warns_and_takes_the_every_role_budget(tiny_model_dir, tmp_path):
    """The toy's roles answer in 1 token (`max_tokens: 1`); `sample.*` gives every role 2, the
    copier's own key keeps it at 1: the engine gets those budgets, the shares equal what the
    records say, and a role cut more than a fifth of the time is warned about once."""
    wf = masdsl.load(TOY)
    cfg = resolve_config(wf.train, overrides=[
        *tiny_hf(tiny_model_dir), "train.steps=2",
        "train.samples=2", "train.batch=2", "train.eval_tasks=2", "train.eval_every=0",
        "sample.*.max_tokens=2", "sample.copier.max_tokens=1"])
    buf = io.StringIO()
    result = train_into(resolve_run(wf, cfg), tmp_path / "run", console=Console(file=buf, width=400))
    records = list(read_records(tmp_path / "run" / "records.jsonl"))
    budget = {"namer": 2, "copier": 1}
    assert all(len(r.response_ids) <= budget[r.role] for r in records)
    assert all(len(r.response_ids) == budget[r.role] for r in records if r.finish_reason == "length")
    for step, h in enumerate(result.history, start=1):  # update N's rollout records carry step N
        mine = [r for r in records if r.step == step]
        assert {k: v for k, v in h.items() if k.startswith(("cut/", "parse_fail/"))} == shares_from(mine)
    assert {"eval_cut/namer", "eval_parse_fail/copier"} <= set(result.eval_before)
    text = " ".join(buf.getvalue().split())
    for role in budget:
        cut = [h[f"cut/{role}"] for h in result.history]
        warning = f"of role `{role}`'s replies at step"
        if max(cut) > 0.2:
            first = next(i for i, c in enumerate(cut) if c > 0.2) + 1
            assert text.count(warning) == 1
            assert (f"{100 * cut[first - 1]:.0f} % {warning} {first} were cut at max_tokens={budget[role]}; "
                    f"raise its budget with `sample.{role}.max_tokens={2 * budget[role]}`") in text
        else:
            assert warning not in text
    assert max(h["cut/copier"] for h in result.history) > 0.2  # one random token from 512 is rarely the end
    assert "replies cut at max_tokens, train (first -> last step)" in text


def test_masdsl_eval_reports_and_warns(tiny_model_dir, tmp_path, capsys):
    from masdsl.cli import main

    path = tmp_path / "toy_digits.mas"
    path.write_text(TOY.read_text().replace('import "toy_env.py"', f'import "{TOY_DIR / "toy_env.py"}"'))
    runs = tmp_path / "runs"
    code = main(["eval", str(path), *tiny_hf(tiny_model_dir), f"runtime.runs_dir={runs}", "--tasks", "4"])
    assert code == 0
    run_dir = sorted((runs / "toy_digits").glob("*/summary.json"))[-1].parent
    m = json.loads((run_dir / "summary.json").read_text())["metrics"]
    records = list(read_records(run_dir / "records.jsonl"))
    assert {k: v for k, v in m.items() if k.startswith(("eval_cut/", "eval_parse_fail/"))} == shares_from(records, "eval_")
    captured = capsys.readouterr()
    err = " ".join(captured.err.split())
    for role in ("namer", "copier"):
        assert (f"of role `{role}`'s replies were cut at max_tokens=1" in err) == (m[f"eval_cut/{role}"] > 0.2)
        assert f"replies cut at max_tokens · {role}" in captured.out
    assert m["eval_cut/namer"] > 0.2
