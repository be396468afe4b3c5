"""A step that cannot be completed fails the run, with a checkpoint `--resume` continues from.

An env call that still raises after `runtime.env_retries` retries is infrastructure, not the
model: `masdsl run` saves the state from before the failed rollout and stops with a one-line
message (exit 2, no traceback); resumed once the fault is gone, the run ends with the records,
weights and optimizer state of a run that never failed. A malformed model output still only
scores its penalty. The fault is injected by the env itself: it raises on the task ids listed
in a file, so a test decides which step fails by writing the file.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.overrides import NO_TRACKING

TIMING = ("gen_s", "env_s")  # wall-clock fields of a record: the only ones allowed to differ

ENV_FILE = '''
import os, re
from masdsl.envs.registry import data_source, env, parser


@parser("sf_int", returns="number", empty=-1)
def sf_int(output):
    m = re.search(r"-?\\d+", output)
    return int(m.group(0)) if m else None


@env("sf_counter", fields=("total",))
class FaultyCounter:
    """Adds the parsed numbers; raises on every task listed in the file `faults` (if it exists)."""
    limits = None  # the sandbox defaults for any code this env runs (masdsl.envs.base.Env)

    def __init__(self, faults=""):
        self.faults = faults

    def reset(self, task):
        return (task["id"], 0)

    def apply(self, state, role, fields):
        task, total = state
        if self.faults and os.path.exists(self.faults) and task in open(self.faults).read().split():
            raise RuntimeError(f"injected fault on {task}")
        return (task, total + (fields["n"] if fields["ok"] else 0))

    def view(self, state):
        return {"total": state[1]}

    def success(self, state):
        return state[1] >= 10


@data_source("sf_tasks", fields=("id",))
def sf_tasks(split, n=4):
    return [{"id": f"{split}{i}"} for i in range(n)]
'''

WORKFLOW = '''workflow step_failure "Two roles rewarded by how much they say; the env fails where a file says."
import "faultenv.py"
env sf_counter(faults="{faults}")
data train sf_tasks("train", n=8)
data eval  sf_tasks("eval", n=2)
policy shared {{ model: "smollm2-135m-instruct" }}
role a {{
  policy shared
  prompt "Say a number. Total so far {{{{ env.total }}}}."
  sample {{ temperature: 1.0, max_tokens: 8 }}
  parse n = sf_int(output)
  reward len(output) / 10
}}
role b {{
  policy shared
  prompt "Say a number. a said {{{{ a.output }}}}."
  sample {{ temperature: 1.0, max_tokens: 8 }}
  parse n = sf_int(output)
  reward len(output) / 10 + n
}}
flow {{
  max_turns 2
  start -> a
  a -> b
  b -> end when env.total >= 100
  b -> a
}}
team env.total
alpha 0.0
train {{ samples: 3, batch: 2, steps: 3, lr: 1e-3, eval_tasks: 2, checkpoint_every: 0, seed: 7 }}
'''


@pytest.fixture(scope="module")
def wf_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("step_failure")
    (d / "faultenv.py").write_text(ENV_FILE)
    (d / "wf.mas").write_text(WORKFLOW.format(faults=d / "faults.txt"))
    (d / "wf_never_fails.mas").write_text(WORKFLOW.format(faults=d / "no-faults.txt"))  # never written
    return d


def _faults(wf_dir: Path, ids: list[str] | None) -> None:
    path = wf_dir / "faults.txt"
    if ids is None:
        path.unlink(missing_ok=True)
    else:
        path.write_text("\n".join(ids) + "\n")


def _config(wf, *overrides: str):
    from masdsl.config import resolve_config

    return resolve_config(wf.train, None, [NO_TRACKING, *overrides])


def test_malformed_output_scores_its_penalty_and_an_env_failure_raises(wf_dir, tmp_path):
    """In-process, replayed outputs: text with no number parses to the empty value -1 (reward
    -1 + len/10, parse_ok False) and the run goes on; an env that keeps raising stops the
    rollout with StepFailed naming role, task, turn, retries and the error."""
    import masdsl
    from masdsl.errors import StepFailed, UserError
    from masdsl.runtime.backends.replay import ReplayEngine
    from masdsl.runtime.executor import Hooks, rollout
    from tests.support.rollout_plans import plan_of

    wf = masdsl.load(str(wf_dir / "wf.mas"))
    cfg = _config(wf, "runtime.env_retries=1", "runtime.env_workers=1")
    tasks = [{"id": "train0"}, {"id": "train1"}]
    replay = tmp_path / "replay.jsonl"
    with replay.open("w") as f:
        for t in tasks:
            for role, turn in (("a", 0), ("b", 0), ("a", 1), ("b", 1)):
                f.write(json.dumps({"task_id": t["id"], "role": role, "turn": turn,
                                    "outputs": ["no number at all", "{{}} ]]", "7"]}) + "\n")
    engines = {"shared": ReplayEngine(replay)}
    _faults(wf_dir, None)
    ro = rollout(plan_of(wf, cfg, samples=3), _env(wf, cfg), tasks, engines, mode="train", step=0)
    bad = [r for r in ro.records if r.candidate in (0, 1)]
    assert len(ro.episodes) == 2 and bad and not any(r.parse_ok for r in bad)
    assert {r.fields["n"] for r in bad} == {-1}
    assert all(r.reward == pytest.approx(len(r.response_text) / 10 + (-1 if r.role == "b" else 0)) for r in bad)
    assert not [m for m in ro.errors if "env step" in m], ro.errors

    _faults(wf_dir, ["train1"])
    try:
        with pytest.raises(StepFailed) as info:  # the default: a step that cannot be completed stops
            rollout(plan_of(wf, cfg, samples=3), _env(wf, cfg), tasks, engines, mode="train", step=0)
        # asked for, a failed step scores 0 instead
        ro = rollout(plan_of(wf, cfg, samples=3), _env(wf, cfg), tasks, engines,
                     mode="train", step=0, hooks=Hooks(on_env_failure="score"))
    finally:
        _faults(wf_dir, None)
    e = info.value
    assert isinstance(e, UserError) and (e.role, e.task_id, e.turn) == ("a", "train1", 0)
    assert str(e) == ("env step of `a` on task `train1` (turn 0) failed after 1 retries: "
                      "RuntimeError: injected fault on train1")
    failed = [r.reward for r in ro.records if r.task_id == "train1"]
    assert len(failed) == 4 * 3 and set(failed) == {0.0}


def _env(wf, cfg):
    from masdsl.runtime.inputs import make_env

    return make_env(wf, cfg.sandbox)


def _cli(wf_dir: Path, cwd: Path, *args: str, command: str = "run", file: str = "wf.mas") -> subprocess.Popen:
    cwd.mkdir(exist_ok=True)
    log = (cwd / "log.txt").open("w")
    env = {**os.environ, "MASDSL_NO_VLLM": "1", "RAY_AUTH_MODE": "disabled"}
    return subprocess.Popen([sys.executable, "-m", "masdsl.cli", command, str(wf_dir / file), *args],
                            cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=log)


def _finish(proc: subprocess.Popen, cwd: Path) -> tuple[int, str]:
    proc.wait(timeout=600)
    return proc.returncode, (cwd / "log.txt").read_text()


def _run_dir(cwd: Path) -> Path:
    (run_dir,) = cwd.glob("runs/step_failure/*/")
    return run_dir


def _records(path: Path) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]


def _checkpoint(run_dir: Path, step: int) -> dict:
    import torch

    from masdsl.training.checkpoint import policy_weights

    ck = run_dir / "checkpoints" / f"step_{step:06d}"
    state = json.loads((ck / "state.json").read_text())
    return {"weights": policy_weights(ck, "shared"),
            "optim": torch.load(ck / "optim" / "shared.pt", weights_only=True),
            "step": state["step"], "cursor": state["cursor"],
            "history": [{k: v for k, v in h.items() if not k.startswith(("time/", "throughput/", "memory/"))}
                        for h in state["history"]]}


def _same_checkpoint(a: dict, b: dict) -> None:
    import torch

    assert (a["step"], a["cursor"]) == (b["step"], b["cursor"])
    assert a["weights"].keys() == b["weights"].keys()
    assert all(torch.equal(a["weights"][k], b["weights"][k]) for k in a["weights"])
    assert all(torch.equal(x, y) for k in a["optim"]["state"]
               for x, y in zip(a["optim"]["state"][k].values(), b["optim"]["state"][k].values())
               if isinstance(x, torch.Tensor))
    assert a["history"] == b["history"]


@pytest.mark.slow
def test_failed_step_stops_the_run_and_resume_equals_an_uninterrupted_run(wf_dir, tmp_path, tiny_model_dir):
    """`masdsl run`: step 3's tasks fail in the env (after 1 retry) -> exit 2 with the message and
    a checkpoint of step 2 (no other checkpoint is due: `checkpoint_every: 0`); the fault gone,
    `--resume` ends with the records, weights and optimizer of a run that never failed."""
    from masdsl.training.trainer import next_batch

    model = [f"policy.shared.model={tiny_model_dir}", "runtime.engine=hf", NO_TRACKING,
             "runtime.env_retries=1"]
    cursor = 2 * 2  # two batches of 2 before step 3
    step3 = [f"train{i}" for i in next_batch(8, 2, seed=7, cursor=cursor)[0]]
    # the run that never fails (the same workflow, its env reading a fault file that never exists)
    # runs beside the others. It saves a checkpoint after every step, as the runs test_resume
    # compares do: measured here, a run that saved no checkpoint before step 3 differs from one
    # that did (or that resumed from one) in the last bit of step-3 log-probs (5e-7) and weights
    # (3e-8), so the save itself perturbs later float results
    reference = _cli(wf_dir, tmp_path / "reference", *model, "train.checkpoint_every=1", file="wf_never_fails.mas")
    _faults(wf_dir, step3)
    try:
        failing = _cli(wf_dir, tmp_path / "failing", *model)
        code, log = _finish(failing, tmp_path / "failing")
    finally:
        _faults(wf_dir, None)
    run_dir = _run_dir(tmp_path / "failing")
    assert code == 2, log[-3000:]
    assert "Traceback" not in log
    message = " ".join(log.split())  # rich may wrap long lines
    shown = re.escape(str(run_dir.relative_to(tmp_path / "failing")))  # the run folder as the run names it
    expected = (rf"step 3/3 failed: env step of `a` on task `({'|'.join(step3)})` \(turn 0\) failed after 1 retries: "
                rf"RuntimeError: injected fault on train\d\. Saved checkpoint {shown}/checkpoints/step_000002; "
                rf"continue with: masdsl run {re.escape(str(wf_dir / 'wf.mas'))} --resume {shown}$")
    assert re.search(expected, message), log[-3000:]
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step_000002"]
    assert {r["step"] for r in _records(run_dir / "records.jsonl")} == {1, 2}

    resumed = _cli(wf_dir, tmp_path / "failing", "--resume", str(run_dir))
    code, log = _finish(resumed, tmp_path / "failing")
    assert code == 0, log[-3000:]
    assert "resumed from" in log
    code, log = _finish(reference, tmp_path / "reference")
    assert code == 0, log[-3000:]
    ref_dir = _run_dir(tmp_path / "reference")
    _same_checkpoint(_checkpoint(ref_dir, 3), _checkpoint(run_dir, 3))
    ra, rb = _records(ref_dir / "records.jsonl"), _records(run_dir / "records.jsonl")
    assert len(ra) == len(rb) > 0 and ra == rb
    assert sorted({r["step"] for r in rb}) == [1, 2, 3]
    for name in ("step_000000.jsonl", "step_000003.jsonl"):
        assert _records(ref_dir / "eval" / name) == _records(run_dir / "eval" / name)
    # training changed the weights (the comparison is not between two no-ops)
    import torch
    from safetensors.torch import load_file

    (st,) = Path(tiny_model_dir).glob("*.safetensors")
    init, final = load_file(st), _checkpoint(ref_dir, 3)["weights"]
    assert any(not torch.equal(init[k], final[k]) for k in init if k in final)


@pytest.mark.slow
def test_failed_evaluation_saves_the_step_and_resume_evaluates_it_first(wf_dir, tmp_path, tiny_model_dir):
    """In-process `train`: the train-time evaluation after step 2 (of 2) fails -> StepFailed with
    a checkpoint of step 2 marked unfinished; `--resume` evaluates first, then saves the final
    checkpoint: evaluations, records and weights equal an uninterrupted run's."""
    import masdsl
    from masdsl.errors import StepFailed
    from masdsl.plan.run_plan import resolve_run
    from tests.support.toy import train_into

    wf = masdsl.load(str(wf_dir / "wf.mas"))
    cfg = _config(wf, f"policy.shared.model={tiny_model_dir}", "runtime.engine=hf", "train.steps=2",
                  "runtime.env_retries=0")
    _faults(wf_dir, None)
    ref = train_into(resolve_run(wf, cfg), tmp_path / "ref")

    def break_eval(step, metrics):  # after step 1 (no eval or checkpoint due): the eval tasks fail
        if step == 1:
            _faults(wf_dir, ["eval0", "eval1"])

    try:
        with pytest.raises(StepFailed) as info:
            train_into(resolve_run(wf, cfg), tmp_path / "run", on_step=break_eval)
    finally:
        _faults(wf_dir, None)
    msg = str(info.value)
    assert msg.startswith("evaluation at step 2/2 failed: env step of `a` on task `eval0` (turn 0) failed after 0 "
                          "retries: RuntimeError: injected fault on eval0. Saved checkpoint "), msg
    assert info.value.checkpoint == tmp_path / "run" / "checkpoints" / "step_000002"
    state = json.loads((info.value.checkpoint / "state.json").read_text())
    assert state["step"] == 2 and state["extra"] == {"unfinished": True} and [e["step"] for e in state["evals"]] == [0]
    assert not (tmp_path / "run" / "eval" / "step_000002.jsonl").exists()

    done = train_into(resolve_run(wf, cfg), tmp_path / "run", resume=tmp_path / "run")
    assert done.steps == ref.steps == 2
    assert done.evals == ref.evals and [e["step"] for e in done.evals] == [0, 2]
    assert _records(tmp_path / "ref" / "eval" / "step_000002.jsonl") == _records(tmp_path / "run" / "eval" / "step_000002.jsonl")
    assert _records(tmp_path / "ref" / "records.jsonl") == _records(tmp_path / "run" / "records.jsonl")
    final = json.loads((tmp_path / "run" / "checkpoints" / "step_000002" / "state.json").read_text())
    assert final["extra"] == {} and [e["step"] for e in final["evals"]] == [0, 2]
    _same_checkpoint(_checkpoint(tmp_path / "ref", 2), _checkpoint(tmp_path / "run", 2))


def test_eval_command_stops_on_a_failed_env_step(wf_dir, tmp_path):
    """`masdsl eval` (replayed outputs): the env fails on an eval task -> exit 2, one clear line."""
    replay = tmp_path / "replay.jsonl"
    with replay.open("w") as f:
        for t in ("eval0", "eval1"):
            for role, turn in (("a", 0), ("b", 0), ("a", 1), ("b", 1)):
                f.write(json.dumps({"task_id": t, "role": role, "turn": turn, "outputs": ["5"]}) + "\n")
    _faults(wf_dir, ["eval1"])
    try:
        proc = _cli(wf_dir, tmp_path / "eval", "runtime.engine=replay", f"runtime.replay_file={replay}",
                    NO_TRACKING, "runtime.env_retries=1", command="eval")
        code, log = _finish(proc, tmp_path / "eval")
    finally:
        _faults(wf_dir, None)
    assert code == 2 and "Traceback" not in log, log[-3000:]
    assert ("env step of `a` on task `eval1` (turn 0) failed after 1 retries: RuntimeError: injected fault on "
            "eval1") in " ".join(log.split())
