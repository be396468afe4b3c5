"""Every shipped recipe (configs/*.yaml) fits every shipped workflow (workflows/*.mas): it
resolves, names no policy or role the workflow lacks (`policy."*"` / `sample."*"`), passes the
checks `masdsl run` makes before a model loads, and places its engines and learners (issue 22,
item 2). A config that names policies the workflow lacks is refused at its file:line with both
sets of names. `masdsl run --print-config` prints the resolved configuration and starts nothing."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import masdsl
from masdsl import cli
from masdsl.config import Config, ConfigError, check_names, policy_override, resolve_config
from masdsl.plan.run_plan import resolve_rollout, resolve_run

ROOT = Path(__file__).parents[2]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
WORKFLOWS = sorted((ROOT / "workflows").glob("*.mas"))


@pytest.fixture(scope="module")
def workflows():
    return {w.name: masdsl.load(w) for w in WORKFLOWS}


def test_the_matrix_is_not_empty():
    assert len(CONFIGS) >= 5 and len(WORKFLOWS) >= 10
    assert {"gpu_1.yaml", "gpu_8.yaml", "gpu_2x8.yaml", "paper.yaml"} <= {c.name for c in CONFIGS}


@pytest.mark.parametrize("config", CONFIGS, ids=[c.stem for c in CONFIGS])
def test_every_recipe_fits_every_workflow(config, workflows):
    given = yaml.safe_load(config.read_text())
    for name, wf in workflows.items():
        cfg = resolve_config(wf.train, config)
        check_names(cfg, wf)
        plan = resolve_run(wf, cfg)  # what `masdsl run` checks before any model loads
        assert plan.placement.lines(), name
        specs = plan.policies
        for policy in wf.policies:  # the recipe's model and chat-template variables reach every policy
            model = (given.get("policy") or {}).get("*", {}).get("model")
            if model:
                assert specs[policy].model == model, (config.name, name, policy)
            kwargs = (given.get("policy") or {}).get("*", {}).get("chat_template_kwargs") or {}
            assert kwargs.items() <= (specs[policy].chat_template_kwargs or {}).items(), (config.name, name)
        budget = ((given.get("sample") or {}).get("*") or {}).get("max_tokens")
        if budget:
            assert all(plan.samples[role].max_tokens == budget for role in wf.roles), (config.name, name)


@pytest.mark.parametrize("config", CONFIGS, ids=[c.stem for c in CONFIGS])
def test_recipes_name_no_policy_or_role(config):
    given = yaml.safe_load(config.read_text())
    assert set(given.get("policy") or {}) <= {"*"} and set(given.get("sample") or {}) <= {"*"}


def test_gpu_8_trains_the_one_shared_policy_of_plan_path(workflows):
    wf = workflows["plan_path.mas"]
    cfg = resolve_config(wf.train, ROOT / "configs" / "gpu_8.yaml")
    (shared,) = resolve_run(wf, cfg).placement.lines()[:1]
    assert shared.startswith("policy shared <- roles tool, planner (full weights, Qwen/Qwen3-1.7B)")


def test_a_policy_own_key_wins_over_every_policy_key(workflows):
    wf = workflows["plan_path_per_role.mas"]
    cfg = resolve_config(wf.train, ROOT / "configs" / "gpu_8.yaml",
                         ["policy.tool_p.model=/models/tool", "policy.planner_p.chat_template_kwargs.x=1"])
    specs = resolve_rollout(wf, cfg).policies  # the models are only names here (no folder to find)
    assert (specs["tool_p"].model, specs["planner_p"].model) == ("/models/tool", "Qwen/Qwen3-1.7B")
    assert specs["planner_p"].chat_template_kwargs == {"enable_thinking": False, "x": 1}
    assert specs["tool_p"].chat_template_kwargs == {"enable_thinking": False}
    assert policy_override(cfg, "tool_p").chat_template_kwargs == {"enable_thinking": False}


def test_a_config_naming_other_policies_is_refused_at_its_line(tmp_path, capsys):
    mine = tmp_path / "per_role.yaml"
    mine.write_text("train:\n  steps: 2\npolicy:\n  tool_p:\n    model: a\n  planner_p:\n    model: b\n")
    code = cli.main(["run", str(ROOT / "workflows" / "plan_path.mas"), "--config", str(mine), "--print-config"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.strip() == (f"config file {mine}:4:3: `policy.tool_p`: the workflow has no policy `tool_p`; policies: "
                           "shared (the configuration names policies tool_p, planner_p; `policy.\"*\".<key>` sets a "
                           "key of every policy)")
    with pytest.raises(ConfigError) as e:  # the same from the API, with the file's line and column
        check_names(resolve_config(None, mine), masdsl.load(ROOT / "workflows" / "plan_path.mas"))
    assert (e.value.key, e.value.file, e.value.line, e.value.col) == ("policy.tool_p", str(mine), 4, 3)


def test_a_name_only_an_override_gave_is_not_blamed_on_a_file(tmp_path):
    mine = tmp_path / "c.yaml"
    mine.write_text("policy:\n  shared:\n    model: a\n")
    wf = masdsl.load(ROOT / "workflows" / "plan_path.mas")
    with pytest.raises(ConfigError) as e:
        check_names(resolve_config(None, mine, ["policy.tool_p.model=b"]), wf)
    assert e.value.file is None
    assert str(e.value) == "`policy.tool_p`: the workflow has no policy `tool_p`; policies: shared"


# --- masdsl run --print-config ---------------------------------------------------------------

def _every_key(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


@pytest.mark.parametrize("flag", [["--print-config"], ["--cfg", "job"]])
def test_print_config_prints_every_key_after_files_and_overrides(flag, tmp_path, capsys):
    wf = ROOT / "workflows" / "plan_path_per_role.mas"
    code = cli.main(["run", str(wf), "--config", str(ROOT / "configs" / "gpu_8.yaml"), *flag, "train.steps=7",
                     "~runtime.engine_replicas", "++policy.tool_p.model=m", f"runtime.runs_dir={tmp_path}"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    printed = yaml.safe_load(captured.out)
    assert set(printed) == _every_key(Config)
    for section in ("train", "runtime", "tracking", "sandbox"):
        assert set(printed[section]) == _every_key(type(getattr(Config(), section))), section
    assert (printed["train"]["steps"], printed["train"]["batch"]) == (7, 32)  # the override, the recipe
    assert (printed["runtime"]["engine_replicas"], printed["runtime"]["learner_workers"]) == (1, 2)
    assert printed["policy"]["*"]["model"] == "Qwen/Qwen3-1.7B" and printed["policy"]["tool_p"]["model"] == "m"
    assert printed["sample"]["*"]["max_tokens"] == 4096
    assert not any(tmp_path.iterdir())  # no run folder
    # what it prints resolves to the same configuration
    again = tmp_path / "printed.yaml"
    again.write_text(captured.out)
    assert resolve_config(None, again) == resolve_config(masdsl.load(wf).train, ROOT / "configs" / "gpu_8.yaml",
                                                         ["train.steps=7", "~runtime.engine_replicas",
                                                          "++policy.tool_p.model=m", f"runtime.runs_dir={tmp_path}"])


def test_print_config_loads_no_model_and_imports_no_trainer():
    code = ("import sys; from masdsl import cli\n"
            "rc = cli.main(['run', 'workflows/plan_path_per_role.mas', '--config', 'configs/gpu_2x8.yaml', '--print-config'])\n"
            "heavy = [m for m in ('torch', 'vllm', 'transformers', 'ray', 'mlflow', 'masdsl.training.trainer') if m in sys.modules]\n"
            "print(rc, heavy, file=sys.stderr)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.stderr.strip().splitlines()[-1] == "0 []", proc.stderr
    assert yaml.safe_load(proc.stdout)["runtime"]["learner_fsdp"] is True


def test_print_config_refuses_what_run_refuses(capsys):
    wf = str(ROOT / "workflows" / "sudoku.mas")
    assert cli.main(["run", wf, "--print-config", "train.sampels=3"]) == 2
    assert "did you mean `train.samples`?" in capsys.readouterr().err
    assert cli.main(["run", wf, "--print-config", "train.lr=1,2"]) == 2
    assert "is a sweep" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:  # only `job`: a bad command line (argparse)
        cli.main(["run", wf, "--cfg", "hydra"])
    assert e.value.code == 2 and "invalid choice: 'hydra' (choose from 'job')" in capsys.readouterr().err
