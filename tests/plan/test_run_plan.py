"""The run's pre-flight (`masdsl.plan.run_plan.resolve_run`) is the same for `masdsl run`,
`masdsl run --dry-run`, `masdsl check FILE [overrides]` and `masdsl graph`: each refuses what a
run refuses, with the same message, and loads nothing heavy. Every command runs in a child
process in which importing torch, vLLM, Ray or MLflow fails, so a check that let a run start
would fail loudly instead of training."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from masdsl.config import ConfigError, resolve_config
from masdsl.plan.run_plan import resolve_run
from tests.support.overrides import NO_TRACKING
from tests.support.toy import TOY, TOY_DIR, toy as toy_workflow

ROOT = Path(__file__).parents[2]

# Runs the CLI with the heavy packages unimportable; prints the heavy modules that did load.
NOTHING_HEAVY = """
import sys
HEAVY = ("torch", "vllm", "ray", "mlflow", "transformers")
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HEAVY:
            raise ImportError(f"`{name}` may not load here")
sys.meta_path.insert(0, Refuse())
from masdsl.cli import main
status = main(sys.argv[1:])
print("heavy modules:", sorted(m for m in HEAVY if m in sys.modules), file=sys.stderr)
sys.exit(status)
"""


def masdsl(*args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", NOTHING_HEAVY, *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def without_probe(stderr: str) -> str:
    assert stderr.rstrip().endswith("heavy modules: []"), stderr
    return stderr.rstrip().removesuffix("heavy modules: []").strip()


@pytest.fixture
def toy(tmp_path):
    """A copy of the toy workflow that a test may edit: (folder, write(edit) -> file name)."""
    shutil.copy(TOY_DIR / "toy_env.py", tmp_path / "toy_env.py")

    def write(edit=lambda text: text) -> str:
        (tmp_path / "toy.mas").write_text(edit(TOY.read_text()))
        return "toy.mas"

    return tmp_path, write


CASES = {
    "train block out of range": (lambda t: t.replace("train { ", 'train { loss: "ppo", clip_eps: 5, '), [],
                                 "`train.clip_eps` must be in (0, 1); got 5"),
    "sample override out of range": (None, ["sample.namer.max_tokens=0"], "`sample.namer.max_tokens` must be"),
    "model folder missing": (None, ["policy.shared.model=./models/nope"], "model `./models/nope` not found"),
    "all frozen": (lambda t: t.replace('"smollm2-135m-instruct" }', '"smollm2-135m-instruct", frozen: true }'), [],
                   "every policy is frozen"),
    "no eval data": (lambda t: t.replace('data eval  toy_digits("eval", 10)', ""), [], "no `data eval ...` line"),
    "replay engine": (None, ["runtime.engine=replay"], "`runtime.engine=replay` replays fixed outputs and cannot train"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_check_refuses_what_run_refuses_with_the_same_message(toy, case):
    folder, write = toy
    edit, overrides, message = CASES[case]
    name = write(edit or (lambda t: t))
    run = masdsl("run", name, *overrides, NO_TRACKING, "runtime.runs_dir=runs", cwd=folder)
    check = masdsl("check", name, *overrides, cwd=folder)
    dry = masdsl("run", name, *overrides, "--dry-run", cwd=folder)
    refused = without_probe(run.stderr)
    assert run.returncode == check.returncode == dry.returncode == 2, (run.stderr, check.stderr)
    assert message in refused and "Traceback" not in refused
    assert f"{name}: {refused}" in without_probe(check.stderr)  # run's whole message, under the file's name
    assert without_probe(dry.stderr) == refused
    assert check.stdout.startswith(f"error  {name}  ") and "`masdsl run` would refuse it" in check.stdout
    assert not (folder / "runs").exists()


MISTAKES = {  # `run` and `eval` refuse these before anything heavy loads (the probe refuses torch)
    "eval: no such file": (["eval", "nope.mas"], "nope.mas: no such file"),
    "run: no such run to resume": (["run", "{name}", "--resume", "runs/nope"], "runs/nope: no such run folder"),
    "eval: unknown key": (["eval", "{name}", "train.nope=1"], "unknown config key `train.nope`"),
    "eval: bad --tasks": (["eval", "{name}", "--tasks", "-1"], "--tasks must be 0 (all) or more"),
}


@pytest.mark.parametrize("case", list(MISTAKES))
def test_run_and_eval_answer_mistakes_before_loading_torch(toy, case):
    folder, write = toy
    args, message = MISTAKES[case]
    name = write()
    p = masdsl(*(a.format(name=name) for a in args), cwd=folder)
    assert p.returncode == 2 and message in without_probe(p.stderr), p.stderr


def test_check_json_lists_the_configuration_errors(toy):
    folder, write = toy
    p = masdsl("check", "--json", write(), "runtime.engine=replay", "train.lr=-1", cwd=folder)
    (entry,) = json.loads(p.stdout)["files"]
    assert p.returncode == 2 and entry["ok"] is False and entry["diagnostics"] == []
    assert entry["config_errors"] == ["`train.lr` must be positive; got -1.0",
                                      "`runtime.engine=replay` replays fixed outputs and cannot train; use hf or vllm"]


def test_dry_run_prints_the_config_and_the_plan_and_starts_nothing(toy):
    folder, write = toy
    name = write()
    p = masdsl("run", name, "--dry-run", "runtime.engine=hf", "sample.namer.max_tokens=3", "runtime.runs_dir=runs",
               cwd=folder)
    assert p.returncode == 0, p.stderr
    without_probe(p.stderr)
    config = yaml.safe_load(p.stdout)  # the plan follows as comments: the output is still a config file
    assert config["runtime"]["engine"] == "hf" and config["sample"]["namer"]["max_tokens"] == 3
    comments = [line for line in p.stdout.splitlines() if line.startswith("#")]
    assert "#   policy shared <- roles namer, copier (full weights, smollm2-135m-instruct)" in comments
    assert '#   namer: {"max_tokens": 3, "temperature": 1.0}' in comments
    assert any("max_model_len 2051" in line for line in comments)  # 2048 prompt tokens + the longest reply (3)
    assert not (folder / "runs").exists()
    (folder / "dry.yaml").write_text(p.stdout)
    again = masdsl("check", name, "--config", "dry.yaml", cwd=folder)
    assert again.returncode == 0 and again.stdout.startswith(f"ok  {name}"), again.stderr


def test_graph_shows_the_planned_policies(toy):
    """The policies table and the placement both show the override's model (they come from one plan)."""
    folder, write = toy
    name = write()
    p = masdsl("graph", name, "policy.shared.model=HuggingFaceTB/SmolLM2-360M-Instruct", cwd=folder)
    assert p.returncode == 0, p.stderr
    table = p.stdout.split("policies (roles sharing a policy share its weights):")[1].split("placement of")[0]
    assert "HuggingFaceTB/SmolLM2-360M-Instruct" in table and "smollm2-135m" not in table
    assert "policy shared <- roles namer, copier (full weights, HuggingFaceTB/SmolLM2-360M-Instruct)" in p.stdout
    frozen = masdsl("graph", name, "policy.shared.frozen=true", cwd=folder)
    assert frozen.returncode == 2 and "every policy is frozen" in frozen.stderr


def test_the_plan_checks_the_batch_against_the_train_split_it_is_handed():
    """The one check that needs the data: the session hands the plan the split's size once it loads."""
    wf = toy_workflow()
    plan = resolve_run(wf, resolve_config(wf.train, overrides=["train.batch=4", "runtime.engine=hf"]))
    plan.check_train_split(4)  # a batch as large as the split: every task once
    with pytest.raises(ConfigError, match=r"`train.batch` \(4\) is larger than the train split \(3 tasks\)"):
        plan.check_train_split(3)
