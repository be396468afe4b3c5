"""A judged toy for the tests of what a run shows about its judges (issue 43, item 4).

`judge_rollout` runs the toy's namer, scored by a frozen critic, on the replay engine, so every
policy and judge reply is known; `judged_run` writes a run folder by hand, as `masdsl run` does:
one training step (K = 2) whose judge restated an equation, the task's reference answer and the
episode's success in every record, and a checkpoint `state.json` holding the step's metrics.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import masdsl
from masdsl.config import resolve_config
from masdsl.runtime.backends.replay import ReplayEngine
from masdsl.runtime.executor import rollout
from tests.support.rollout_plans import plan_of
from masdsl.runtime.inputs import make_env
from masdsl.runtime.records import StepRecord, write_records
from tests.support.overrides import NO_TRACKING
from tests.support.paths import TOY_DIR

TASKS = [{"id": "t0", "target": "3"}, {"id": "t1", "target": "4"}]
POLICY = {("t0", "namer", 0): ["3", "x"], ("t1", "namer", 0): ["4", "4"]}
WORKFLOW = '''
workflow judged "a namer scored by a frozen critic"
import "toy_env.py"
env toy_digits
data train toy_digits("train", 4)
policy shared { model: "smollm2-135m-instruct" }
policy critic { model: "smollm2-135m-instruct", frozen: true }
role namer {
  policy shared
  prompt "target:{{ task.target }}"
  parse digit = digit(output)
  reward judge(critic, "The namer said {{ digit }}. Score:", parse="PARSE", default=-1)
}
flow { start -> namer -> end }
success same(namer.digit, task.target)
'''


def judge_rollout(tmp_path: Path, replies: dict, *, parse: str = "auto", mode: str = "train"):
    """The rollout of `TASKS` (2 candidates each in training) whose critic answers `replies`:
    {(task, "judge:namer", 0): [reply, ...]}."""
    shutil.copy(TOY_DIR / "toy_env.py", tmp_path / "toy_env.py")
    wf = masdsl.loads(WORKFLOW.replace("PARSE", parse), name="judged", base_dir=tmp_path)
    cfg = resolve_config(wf.train, overrides=[NO_TRACKING])
    engines = {"shared": _replay(tmp_path / "policy.jsonl", POLICY), "critic": _replay(tmp_path / "critic.jsonl", replies)}
    return rollout(plan_of(wf, cfg, samples=2), make_env(wf, cfg.sandbox), TASKS, engines, mode=mode, step=0), wf


def _replay(path: Path, rows: dict) -> ReplayEngine:
    path.write_text("".join(json.dumps({"task_id": t, "role": r, "turn": turn, "outputs": o}) + "\n"
                            for (t, r, turn), o in rows.items()))
    return ReplayEngine(path)


JUDGE_REPLY = "1 + 6 = 7"  # restates the sum: under the old default parse it scored 1
STEP_METRICS = {"step": 1, "success/train": 0.5, "groups/nonflat_frac": 1.0, "time/rollout_s": 4.25,
                "time/update_s": 1.5, "entropy/shared": 1.75, "cut/solver": 0.0, "parse_fail/solver": 0.5}


def judged_run(root: Path) -> Path:
    """A training run's folder: step 1, task `t0` ("What is 1 + 6?", reference answer 7), two
    candidates of role `solver`, each scored by judge `critic`: one reply that restated `1 + 6 = 7`
    and held no other number (the default, -1), one that scored 9."""
    run = root / "runs" / "arith" / "20260101-000000"
    (run / "checkpoints" / "step_000001").mkdir(parents=True)
    judges = [{"policy": "critic", "line": 9, "prompt": "Rate: 7", "reply": JUDGE_REPLY, "parsed": False,
               "score": -1.0, "tokens": 6, "restated": JUDGE_REPLY, "parse": "auto"},
              {"policy": "critic", "line": 9, "prompt": "Rate: 8", "reply": "Score: 9", "parsed": True,
               "score": 9.0, "tokens": 3}]
    records = [StepRecord(1, 0, "t0", "solver", 0, "solver", k, k == 1, "shared", [1, 2], [3] * 4, [-0.5] * 4,
                          reward, 0.0, reward, "stop", k == 1, {"answer": answer}, prompt_text="What is 1 + 6?",
                          response_text=f"The answer is {answer}", episode_success=1.0, episode_reward=9.0,
                          judge=[judge], reference={"answer": "7"})
               for k, (reward, answer, judge) in enumerate([(-1.0, "", judges[0]), (9.0, "7", judges[1])])]
    write_records(run / "records.jsonl", records)
    (run / "config.yaml").write_text("train:\n  grouping: at\n")
    (run / "checkpoints" / "step_000001" / "state.json").write_text(json.dumps({"step": 1, "history": [STEP_METRICS]}))
    return run
