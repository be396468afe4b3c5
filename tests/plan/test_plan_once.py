"""The plan is what runs: each command and each API call resolves its plan once
(`masdsl.plan.run_plan.resolve_run` / `resolve_rollout`) and hands the `RunPlan` down; below the
commands no function takes a `Config`; one owner writes the run folder's record of what ran.

The counts are taken at run time: both functions are wrapped in every masdsl module that holds
them, and the commands run for real on the toy workflow and the tiny model (one step)."""

from __future__ import annotations

import ast
import dataclasses
import json
import sys
from pathlib import Path

import pytest

import masdsl
import masdsl.api  # noqa: F401  (imported before the wrapping, so it holds the original functions)
import masdsl.commands.check  # noqa: F401  (the commands import the plan's functions at their top: as above)
import masdsl.commands.eval  # noqa: F401
import masdsl.commands.export  # noqa: F401
import masdsl.commands.graph  # noqa: F401
import masdsl.commands.run  # noqa: F401
import masdsl.commands.warm_start  # noqa: F401
import masdsl.training.evaluation  # noqa: F401
import masdsl.training.export  # noqa: F401
import masdsl.training.trainer  # noqa: F401
import masdsl.training.warm_start  # noqa: F401
import masdsl.plan.run_plan as plan_module
import masdsl.sweep.runner  # noqa: F401
from masdsl.cli import main
from masdsl.config import resolve_config
from masdsl.errors import UserError
from masdsl.plan.run_plan import RunPlan, resolve_rollout
from tests.support.overrides import NO_TRACKING
from tests.support.paths import ADDER_DIR, TOY_DIR

TOY = TOY_DIR / "toy_digits.mas"
ROOT = Path(masdsl.__file__).parent
REPLAY = ADDER_DIR

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/learner/conftest.py


class Plans:
    """Every `resolve_run` / `resolve_rollout` call while it is open: (function, caller)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self._patch = pytest.MonkeyPatch()

    def __enter__(self) -> "Plans":
        for name in ("resolve_run", "resolve_rollout"):
            original = getattr(plan_module, name)

            def counted(workflow, cfg, _original=original, _name=name):
                caller = sys._getframe(1)
                while caller.f_code.co_name.startswith("<"):  # a comprehension: its function
                    caller = caller.f_back
                self.calls.append((_name, f"{caller.f_globals['__name__']}.{caller.f_code.co_name}"))
                return _original(workflow, cfg)

            # the module itself and every module that bound it (imported above, before the wrapping)
            for module in [m for m in list(sys.modules.values()) if getattr(m, "__name__", "").startswith("masdsl")]:
                if getattr(module, name, None) is original:
                    self._patch.setattr(module, name, counted)
        return self

    def __exit__(self, *exc) -> None:
        self._patch.undo()


def _run_args(model: Path, runs: Path, *extra: str) -> list[str]:
    return [f"policy.shared.model={model}", "runtime.engine=hf", NO_TRACKING, f"runtime.runs_dir={runs}",
            "train.samples=2", "train.batch=2", "train.eval_tasks=1", *extra]


@pytest.fixture(scope="module")
def trained(tiny_model_dir, tmp_path_factory, one_thread):
    """(run folder, the plans `masdsl run` resolved) of a one-step run of the toy."""
    root = tmp_path_factory.mktemp("plan_once")
    with Plans() as plans:
        assert main(["run", str(TOY), *_run_args(tiny_model_dir, root / "runs", "train.steps=1"), "-q"]) == 0
    (run_dir,) = (root / "runs" / "toy_digits").iterdir()
    return run_dir, plans.calls


def test_masdsl_run_plans_once_and_its_folder_holds_the_plans_config(trained):
    run_dir, calls = trained
    assert calls == [("resolve_run", "masdsl.commands.run.prepare")]
    checkpoint = run_dir / "checkpoints" / "step_000001"
    assert (run_dir / "config.yaml").read_text() == (checkpoint / "config.yaml").read_text()
    assert (run_dir / "workflow.mas").read_text() == TOY.read_text() and (run_dir / "graph.mmd").is_file()


def test_resume_plans_once_and_records_the_configuration_it_continues_with(trained, tiny_model_dir, tmp_path):
    import shutil

    run_dir = Path(shutil.copytree(trained[0], tmp_path / "run"))
    with Plans() as plans:
        assert main(["run", str(TOY), "--resume", str(run_dir), "train.steps=2", "-q"]) == 0
    assert plans.calls == [("resolve_run", "masdsl.commands.run.prepare")]
    assert "steps: 2" in (run_dir / "config.yaml").read_text()


def test_eval_of_a_checkpoint_plans_the_command_and_the_checkpoint_once_each_in_its_light_half(trained, tmp_path):
    """`eval --checkpoint`: the command's plan, and the plan the checkpoint's own configuration
    rebuilds its trained policies with (a different configuration: the record of the run), each
    once, both in the light half (`prepare`); the exported models go in with
    `RunPlan.with_policies(models=...)`, not by planning a third time. `export`: the checkpoint's
    plan once, in its light half."""
    with Plans() as plans:
        assert main(["eval", str(TOY), "--checkpoint", str(trained[0]), "--tasks", "1", "runtime.engine=hf",
                     NO_TRACKING, f"runtime.runs_dir={tmp_path}", "--json"]) == 0
    assert plans.calls == [("resolve_rollout", "masdsl.commands.eval.prepare")] * 2
    with Plans() as plans:
        assert main(["export", str(trained[0]), "--out", str(tmp_path / "out")]) == 0
    assert plans.calls == [("resolve_rollout", "masdsl.commands.export.prepare")]
    assert (tmp_path / "out" / "shared" / "config.json").is_file()


@pytest.mark.parametrize("argv, caller", [
    (["run", str(TOY), "--dry-run"], "masdsl.commands.run.prepare"),
    (["check", str(TOY), "train.steps=2"], "masdsl.commands.check.run_refusal"),
    (["graph", str(TOY)], "masdsl.commands.graph.text_sections"),
])
def test_the_commands_that_only_plan_plan_once(argv, caller, capsys):
    with Plans() as plans:
        assert main(argv) == 0
    assert plans.calls == [("resolve_run", caller)]


@pytest.mark.parametrize("judge", [False, True])
def test_the_final_export_of_a_run_derives_its_plan_from_the_runs_plan(trained, judge):
    """What the trainer exports for `tracking.log_models` is derived from the run's own plan
    (`with_policies`: the trained policies, on the CPU), as the light halves plan the
    configuration saved in the checkpoint (a frozen judge is left out), not planned again."""
    from masdsl.training.checkpoint_folder import checkpoint_config, trained_of

    run_dir, _ = trained
    text = TOY.read_text()
    if judge:
        text = text.replace('policy shared { model: "smollm2-135m-instruct" }',
                            'policy shared { model: "smollm2-135m-instruct" }\n'
                            'policy critic { model: "smollm2-135m-instruct", frozen: true }')
    wf, checkpoint = masdsl.loads(text, name="toy_digits", base_dir=TOY.parent), run_dir / "checkpoints" / "step_000001"
    assert len(wf.policies) == (2 if judge else 1)
    run_plan = resolve_rollout(wf, resolve_config(None, run_dir / "config.yaml"))
    with Plans() as plans:
        derived = run_plan.with_policies(trained_of(wf, checkpoint), device="cpu")
    assert plans.calls == []
    planned = resolve_rollout(wf, checkpoint_config(checkpoint)).with_policies(trained_of(wf, checkpoint))
    assert derived == planned and derived.record() == planned.record()
    assert derived.placement.lines() == planned.placement.lines() and derived.runtime.device == "cpu"
    assert list(derived.workflow.policies) == list(planned.workflow.policies) == ["shared"]
    assert list(derived.policy_overrides) == list(planned.policy_overrides) == ["shared"]


def test_eval_plans_once(tmp_path):
    with Plans() as plans:
        assert main(["eval", str(REPLAY / "toy.mas"), "runtime.engine=replay",
                     f"runtime.replay_file={REPLAY / 'toy_replay.jsonl'}", f"runtime.runs_dir={tmp_path}",
                     NO_TRACKING, "--json"]) == 0
    assert plans.calls == [("resolve_rollout", "masdsl.commands.eval.prepare")]


def test_the_api_plans_once_per_call(tiny_model_dir, tmp_path):
    with Plans() as plans:
        result = masdsl.train(TOY, _run_args(tiny_model_dir, tmp_path / "runs", "train.steps=1"),
                              run_dir=tmp_path / "run")
    assert plans.calls == [("resolve_run", "masdsl.api.train")]
    assert (tmp_path / "run" / "workflow.mas").is_file() and result.steps == 1
    assert json.loads((tmp_path / "run" / "summary.json").read_text()) == result.summary()  # the trainer's RunDir wrote it
    with Plans() as plans:
        masdsl.evaluate(TOY, _run_args(tiny_model_dir, tmp_path / "runs"), tasks=1)
    assert plans.calls == [("resolve_rollout", "masdsl.api.evaluate")]
    with Plans() as plans:
        masdsl.rollout(TOY, _run_args(tiny_model_dir, tmp_path / "runs"), tasks=1)
    assert plans.calls == [("resolve_rollout", "masdsl.api.rollout")]
    with Plans() as plans:  # a checkpoint's trained policies: its own plan, once, beside the evaluation's
        masdsl.evaluate(TOY, _run_args(tiny_model_dir, tmp_path / "runs"), tasks=1, checkpoint=tmp_path / "run")
    assert plans.calls == [("resolve_rollout", "masdsl.api.evaluate")] * 2


def test_warm_start_plans_once(tiny_model_dir, tmp_path):
    helper = ROOT.parent / "workflows" / "plan_path_helper.mas"
    with Plans() as plans:
        assert main(["warm-start", str(helper), "--out", str(tmp_path / "warm"), "--tasks", "1", "--epochs", "1",
                     f"policy.shared.model={tiny_model_dir}", NO_TRACKING, "-q"]) == 0
    assert plans.calls == [("resolve_rollout", "masdsl.commands.warm_start.main")]


def _trials_in_this_process(monkeypatch, edit=None):
    """Run a sweep's trials in this process, one after the other, through the worker's own
    `run_trial` and with each plan pickled as a Ray task's argument is (it leaves its workflow
    behind); `edit(file)` runs first (the file changing between the driver's plan and a trial)."""
    import pickle

    from masdsl.sweep import runner as sweep_runner

    def in_this_process(file, meant, remaining, folder, plan, cpus, gpus, say):
        if edit is not None:
            edit(file)
        for trial, trial_plan in remaining:
            sent = pickle.loads(pickle.dumps(trial_plan))
            assert sent.workflow is None
            yield trial, sweep_runner.run_trial(file, sent, meant, trial, str(folder / "trials" / trial.folder))

    monkeypatch.setattr(sweep_runner, "_run_on_ray", in_this_process)
    return sweep_runner


def test_a_sweep_plans_each_trial_once_and_its_worker_runs_that_plan(tiny_model_dir, tmp_path, monkeypatch):
    """The driver plans every trial before any starts; each trial's worker, a process of its own
    that loads the workflow again, runs the plan it was sent: one plan per trial in all."""
    sweep_runner = _trials_in_this_process(monkeypatch)
    with Plans() as plans:
        result = sweep_runner.run_sweep(str(TOY), ["train.lr=1e-5,3e-5", *_run_args(tiny_model_dir, tmp_path / "runs"),
                                                   "train.steps=1"], [0], out=tmp_path / "sweep", say=lambda line: None)
    assert len(result.rows) == 2 and result.ran == [row["id"] for row in result.rows]
    assert plans.calls == [("resolve_run", "masdsl.sweep.runner.run_sweep")] * 2
    saved = sorted((tmp_path / "sweep" / "trials").glob("*/config.yaml"))
    assert len(saved) == 2 and ["lr: 1.0e-05" in p.read_text() for p in saved].count(True) == 1


def test_a_sweep_trial_refuses_a_workflow_changed_since_it_was_planned(tiny_model_dir, tmp_path, monkeypatch):
    copy = tmp_path / "toy_digits.mas"
    copy.write_text(TOY.read_text())
    for name in ("toy_env.py", "toy_data"):
        src = TOY_DIR / name
        if src.exists():
            (tmp_path / name).symlink_to(src)

    def edit(file):
        Path(file).write_text(Path(file).read_text().replace("max_tokens: 1", "max_tokens: 2"))

    sweep_runner = _trials_in_this_process(monkeypatch, edit)
    with pytest.raises(UserError, match=r"changed after the sweep planned trial .*\n  - .*max_tokens"):
        sweep_runner.run_sweep(str(copy), ["train.lr=1e-5,3e-5", *_run_args(tiny_model_dir, tmp_path / "runs"),
                                           "train.steps=1"], [0], out=tmp_path / "sweep", say=lambda line: None)


def test_with_policies_is_the_plan_of_the_config_with_those_models_and_policies():
    """`RunPlan.with_policies` derives what planning `policy.NAME.model=FOLDER` (and the
    configuration narrowed to some policies) again gives: plan and record."""
    wf = masdsl.load(TOY)
    base = ["runtime.engine=hf", "sample.*.max_tokens=3"]
    derived = resolve_rollout(wf, resolve_config(wf.train, overrides=base)).with_policies(models={"shared": "/models/trained"})
    again = resolve_rollout(wf, resolve_config(wf.train, overrides=[*base, "policy.shared.model=/models/trained"]))
    assert derived == again and derived.workflow is wf
    assert derived.placement.lines() == again.placement.lines()
    assert derived.record() == again.record()
    assert [f.name for f in dataclasses.fields(derived)] == [f.name for f in dataclasses.fields(again)]


def test_the_plan_has_no_config_and_its_record_loads_back_into_the_same_plan(tmp_path):
    """`RunPlan` holds its sections itself (no `Config` inside, no `config` attribute); its record
    is the run folder's `config.yaml` as before: loaded back (`--resume`, `export`, `eval
    --checkpoint`), it plans the same run, and records the same text again."""
    wf = masdsl.load(TOY)
    overrides = ["runtime.engine=hf", "sample.*.max_tokens=3", "policy.shared.lr=2e-5", "train.steps=7", NO_TRACKING]
    plan = resolve_rollout(wf, resolve_config(wf.train, overrides=overrides))
    assert "config" not in {f.name for f in dataclasses.fields(RunPlan)} and not hasattr(plan, "config")
    (tmp_path / "config.yaml").write_text(plan.record().yaml)
    again = resolve_rollout(wf, resolve_config(None, tmp_path / "config.yaml"))
    assert again == plan and again.record() == plan.record()
    assert again.policies["shared"].lr == 2e-5 and again.samples["namer"].max_tokens == 3 and again.train.steps == 7
    assert again.record().params["policy.shared.lr"] == 2e-5 and not again.tracking.enabled


def test_a_plan_sent_to_a_ray_actor_loads_there_without_its_workflow(tmp_path):
    """Learner workers and engine actors get the plan, pickled, in processes where the toy's
    imported `toy_env.py` was never loaded: the plan leaves its workflow behind."""
    import pickle
    import subprocess

    wf = masdsl.load(TOY)
    plan = resolve_rollout(wf, resolve_config(wf.train, overrides=["runtime.engine=hf"]))
    (tmp_path / "plan.pkl").write_bytes(pickle.dumps(plan))
    assert plan.workflow is wf  # the original keeps it
    code = ("import pickle, sys; p = pickle.load(open(sys.argv[1], 'rb')); "
            "print(p.workflow, p.train.seed, p.placement.lines()[0])")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "plan.pkl")], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split(None, 2) == ["None", str(plan.train.seed), plan.placement.lines()[0] + "\n"]


# Functions below the commands that still take a `Config`, each with its reason.
TAKES_A_CONFIG = {
    # the configuration layer itself: it builds, layers, checks and prints a Config
    "config.py": "*", "config_overrides.py": "*", "config_file.py": "*", "config_aliases.py": "*",
    # the planner: the one arrow from a Config to a RunPlan
    "plan/run_plan.py": "*",
    # the sandbox's one converter to Limits takes a `sandbox` block in any of its forms
    "sandbox/limits.py": {"_values", "limits_from_config"},
}


def _config_params(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs]:
                note = ast.unparse(arg.annotation) if arg.annotation is not None else ""
                if arg.arg == "cfg" or "Config" in note.replace("|", " ").split():
                    yield node.name, arg.arg, note


def test_no_function_below_the_commands_takes_a_config():
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(("commands/", "testing/")) or rel in ("api.py", "cli.py"):
            continue
        allowed = TAKES_A_CONFIG.get(rel, set())
        for func, name, note in _config_params(ast.parse(path.read_text())):
            if allowed != "*" and func not in allowed:
                found.append(f"{rel}: {func}({name}: {note or '?'})")
    assert found == [], "take the RunPlan (or the one section needed), not the Config:\n" + "\n".join(found)
    stale = [f"{rel}: {func}" for rel, funcs in TAKES_A_CONFIG.items() if funcs != "*"
             for func in funcs if func not in {f for f, _, _ in _config_params(ast.parse((ROOT / rel).read_text()))}]
    assert stale == [], "exceptions that no longer take a Config: remove them from TAKES_A_CONFIG"


# Functions that still take a workflow beside its plan (the plan carries its workflow), with the reason.
TAKES_WORKFLOW_AND_PLAN: dict[str, set[str]] = {}


def test_no_function_takes_a_workflow_beside_its_plan():
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = {a.arg for a in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]}
                if "plan" in names and names & {"workflow", "wf"}:
                    found.append((rel, node.name))
    allowed = [(rel, func) for rel, funcs in TAKES_WORKFLOW_AND_PLAN.items() for func in funcs]
    assert found == allowed, "read `plan.workflow` instead of taking both"


# Where a plan's record is taken: only to save it (the run folder, a checkpoint, MLflow).
TAKES_THE_RECORD = {
    "runtime/rundir.py": "RunDir.open writes config.yaml",
    "training/session.py": "TrainSession.save_checkpoint writes the checkpoint's config.yaml",
    "training/trainer.py": "start_run logs it to MLflow",
    "training/evaluation.py": "start_run logs it to MLflow",
}


def test_the_plan_is_read_by_its_sections_and_its_record_only_saved():
    readers, takers = [], []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and ast.unparse(node.value).endswith("plan"):
                if node.attr == "config":
                    readers.append(rel)
                if node.attr == "record":
                    takers.append(rel)
    assert readers == [], "read the plan's sections (plan.train, plan.runtime, ...)"
    assert sorted(set(takers)) == sorted(TAKES_THE_RECORD), "the record is what is saved, not what runs"


def test_one_owner_writes_the_record_and_the_checkpoint_call_is_written_once():
    """A run folder's `config.yaml`: `RunDir.open` only (a checkpoint keeps its own copy);
    `checkpoint.save`: `TrainSession.save_checkpoint` only."""
    writers, saves = [], []
    for path in sorted(ROOT.rglob("*.py")):
        rel, text = path.relative_to(ROOT).as_posix(), path.read_text()
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            call = ast.unparse(node)
            if node.func.attr == "write_text" and ("config.yaml" in call or "CONFIG" in call):
                writers.append(rel)
            if call.startswith(("ckpt.save(", "checkpoint.save(")):
                saves.append(rel)
    # api.py: a `Config` object given to the API is written to a temporary file and layered as `--config`
    assert sorted(writers) == ["api.py", "runtime/rundir.py", "training/checkpoint.py"]
    assert saves == ["training/session.py"]
