"""`masdsl eval` and `masdsl trace` end to end on a real .mas file with the replay engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import masdsl
from masdsl.cli import main
from masdsl.config import ConfigError, resolve_config
from masdsl.runtime.inputs import prepare
from masdsl.plan.run_plan import effective_policies, resolve_rollout
from masdsl.runtime.engine_factory import build_engines
from masdsl.runtime.records import read_records
from tests.support.overrides import NO_TRACKING
from tests.support.paths import ADDER_DIR

DATA = ADDER_DIR
MAS = str(DATA / "toy.mas")


def _eval(tmp_path, *extra):
    return main(["eval", MAS, "runtime.engine=replay", f"runtime.replay_file={DATA / 'toy_replay.jsonl'}",
                 f"runtime.runs_dir={tmp_path}", NO_TRACKING, *extra])


def test_eval_prints_the_table_and_writes_the_run_folder(tmp_path, capsys):
    assert _eval(tmp_path) == 0
    out = capsys.readouterr().out
    assert "success rate" in out and "0.500" in out
    for label, value in [("a · turn 0", "5.2500"), ("b · turn 0", "4.5000"), ("a · turn 1", "2.5000"),
                         ("b · turn 1", "3.0000")]:
        assert any(label in line and value in line for line in out.splitlines()), (label, out)
    (run,) = (tmp_path / "toy").iterdir()
    assert {p.name for p in run.iterdir()} == {"records.jsonl", "graph.mmd", "config.yaml", "workflow.mas", "summary.json",
                                               "files", "files.json", "view.html"}  # files: the workflow's own copies
    records = list(read_records(run / "records.jsonl"))
    assert [(r.task_id, r.role, r.turn) for r in records] == [
        ("eval0", "a", 0), ("eval0", "b", 0), ("eval1", "a", 0), ("eval1", "b", 0), ("eval1", "a", 1), ("eval1", "b", 1)]
    assert [r.episode_success for r in records] == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    assert all(r.step == -1 and r.selected and r.candidate == 0 for r in records)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["metrics"]["episodes"] == 2 and summary["metrics"]["truncated_episodes"] == 1
    assert "engine: replay" in (run / "config.yaml").read_text()
    assert "env.total >= 10" in (run / "graph.mmd").read_text()


def test_trace_shows_prompts_outputs_and_the_selected_candidate(tmp_path, capsys):
    assert _eval(tmp_path, "--tasks", "0") == 0
    capsys.readouterr()
    assert main(["trace", str(tmp_path / "toy"), "--task", "eval1", "--role", "b"]) == 0
    out = capsys.readouterr().out
    assert "task eval1" in out and "task eval0" not in out and "── a" not in out
    assert "── b · turn 1" in out and "PARSE FAILED" in out and " * candidate 0" in out
    assert "b says; a said 1" in out  # the prompt of b at turn 1 sees a's selected fields
    assert main(["trace", str(tmp_path / "toy"), "--task", "nope"]) == 2
    assert main(["trace", str(tmp_path / "missing")]) == 2


def test_eval_user_errors_exit_2(tmp_path, capsys):
    assert _eval(tmp_path, "train.sampels=3") == 2
    assert "did you mean `train.samples`" in capsys.readouterr().err
    assert main(["eval", MAS, "runtime.engine=replay", f"runtime.runs_dir={tmp_path}", NO_TRACKING]) == 2
    assert "runtime.replay_file" in capsys.readouterr().err
    assert main(["eval", MAS, "runtime.engine=replay", f"runtime.replay_file={tmp_path / 'none.jsonl'}",
                 NO_TRACKING, f"runtime.runs_dir={tmp_path}"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_prepare_env_splits_and_policy_overrides(tmp_path):
    wf = masdsl.load(MAS)
    cfg = resolve_config(wf.train, overrides=["policy.shared.model=/models/x"])
    env, splits = prepare(wf, cfg.sandbox)
    assert type(env).__name__ == "Toy" and env.target == 10
    assert {k: [t["id"] for t in v] for k, v in splits.items()} == {"train": ["train0", "train1", "train2"],
                                                                    "eval": ["eval0", "eval1"]}
    assert effective_policies(wf, cfg)["shared"].model == "/models/x"
    with pytest.raises(ConfigError, match="did you mean `policy.shared`"):
        effective_policies(wf, resolve_config(overrides=["policy.sharde.model=x"]))
    engines = build_engines(resolve_rollout(wf, resolve_config(overrides=["runtime.engine=replay",
                                                          f"runtime.replay_file={DATA / 'toy_replay.jsonl'}"])))
    assert list(engines) == ["shared"]
