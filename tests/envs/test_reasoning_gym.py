"""`reasoning_gym(NAME, ...)` (masdsl/envs/rg_data.py): the reasoning-gym package's generators as a
data source, split by template, scored by the library's own `score_answer` (`rg_score`)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import reasoning_gym as rg_library

import masdsl
from masdsl.lang import analyze
from masdsl.envs.rg_data import NEEDS, held_out, reasoning_gym, rg_score, template_of
from masdsl.errors import DataError
from masdsl.runtime.inputs import load_split
from tests.support.overrides import NO_TRACKING
from tests.support.paths import ROOT

GSM = "gsm_symbolic"


@pytest.fixture(scope="module")
def rows() -> dict[str, list[dict]]:
    return {"train": reasoning_gym(GSM, "train", n=512), "eval": reasoning_gym(GSM, "eval", n=128),
            "eval_trained": reasoning_gym(GSM, "eval", n=128, templates="trained")}


def test_the_template_id_is_the_generator_gsm_symbolic_used():
    """reasoning-gym names no template; the names of an entry's variables tell its generator: one
    set of names per generator (`generate_N`) and one generator per set, over 5,000 entries."""
    dataset = rg_library.create_dataset(GSM, seed=3, size=5000)
    pairs = {(template_of(dataset[i]), dataset.task_indices[i]) for i in range(5000)}
    assert len(pairs) == len({t for t, _ in pairs}) == len({g for _, g in pairs}) == 85


def test_no_template_is_both_trained_on_and_held_out(rows):
    train = {r["template"] for r in rows["train"]}
    held = {r["template"] for r in rows["eval"]}
    assert train and held and not train & held
    assert all(held_out(GSM, t) for t in held) and not any(held_out(GSM, t) for t in train)
    assert len(train) > 40 and len(held) > 15  # most of the 58 trained and 27 held-out templates appear
    assert {r["template"] for r in rows["eval_trained"]} <= train  # new instances of trained templates
    questions = {r["question"] for r in rows["train"]}
    assert not questions & {r["question"] for r in rows["eval_trained"]}  # ... never a train problem again
    assert len(rows["eval"]) == 128 >= 64


def test_the_split_is_deterministic_across_processes(rows):
    """The same call gives the same rows in a new process (another hash seed): a split is a
    function of its arguments."""
    code = ("import json; from masdsl.envs.rg_data import reasoning_gym as r; "
            "print(json.dumps([[x['id'], x['question'], x['answer'], x['template']] for x in r('gsm_symbolic', 'eval', n=128)]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "123", "PATH": "/usr/bin:/bin"}, cwd=ROOT)
    assert json.loads(out.stdout) == [[x["id"], x["question"], x["answer"], x["template"]] for x in rows["eval"]]
    assert reasoning_gym(GSM, "train", n=512) == rows["train"]
    assert [r["id"] for r in rows["eval"][:2]] == ["rg/gsm_symbolic/eval/0", "rg/gsm_symbolic/eval/1"]
    other_seed = reasoning_gym(GSM, "eval", n=8, seed=1)
    assert [r["question"] for r in other_seed] != [r["question"] for r in rows["eval"][:8]]


def test_the_library_scores_a_right_and_a_wrong_answer(rows):
    task = rows["eval"][0]
    assert task["entry"]["answer"] == task["answer"] and task["entry"]["question"] == task["question"]
    assert rg_score(task["answer"], task["entry"]) == 1.0
    assert rg_score(str(float(task["answer"]) + 1), task["entry"]) == pytest.approx(0.01)  # its score for another number
    assert rg_score("", task["entry"]) == rg_score(None, task["entry"]) == 0.0
    with pytest.raises(ValueError, match="task.entry"):
        rg_score(task["answer"], task["answer"])  # the answer text is not the library's entry


def test_a_generator_without_templates_evaluates_on_new_instances():
    train, evals = reasoning_gym("chain_sum", "train", n=64), reasoning_gym("chain_sum", "eval", n=16, min_terms=2)
    assert {r["template"] for r in train + evals} == {""}
    assert not {r["question"] for r in reasoning_gym("chain_sum", "eval", n=64)} & {r["question"] for r in train}
    assert all(rg_score(r["answer"], r["entry"]) == 1.0 for r in evals)


def test_a_mix_interleaves_its_generators_each_drawn_as_alone():
    mix = reasoning_gym(["gcd", GSM, "lcm"], "eval", n=7)
    assert [r["id"] for r in mix] == ["rg/gcd/eval/0", f"rg/{GSM}/eval/0", "rg/lcm/eval/0", "rg/gcd/eval/1",
                                      f"rg/{GSM}/eval/1", "rg/lcm/eval/1", "rg/gcd/eval/2"]
    assert [r["question"] for r in mix[::3]] == [r["question"] for r in reasoning_gym("gcd", "eval", n=3)]
    gsm_alone = reasoning_gym(GSM, "eval", n=2)  # a member with templates keeps its held-out ones
    assert [r["question"] for r in mix[1::3]] == [r["question"] for r in gsm_alone]
    assert [r["template"] for r in mix[1::3]] == [f"{GSM}/{r['template']}" for r in gsm_alone]
    assert {r["template"] for r in mix[::3]} == {"gcd"}
    assert all(rg_score(r["answer"], r["entry"]) == 1.0 for r in mix)  # each scored by its own generator


def test_an_answer_the_librarys_scorer_cannot_read_scores_zero():
    entry = reasoning_gym("prime_factorization", "train", n=1)[0]["entry"]
    with pytest.raises(ValueError):  # the library's own scorer raises on a Python list
        rg_library.get_score_answer_fn("prime_factorization")("[2, 2, 191]", entry)
    assert rg_score("[2, 2, 191]", entry) == 0.0
    assert rg_score(entry["answer"], entry) == 1.0


def test_a_mix_of_held_out_problem_types_does_not_skip_their_train_questions():
    # prime_factorization has few distinct questions: alone, every eval one repeats a train one
    with pytest.raises(DataError, match="only 0 eval rows"):
        reasoning_gym("prime_factorization", "eval", n=4)
    held = reasoning_gym(["prime_factorization", GSM], "eval", n=4, templates="held_out")
    assert [r["template"].split("/")[0] for r in held] == ["prime_factorization", GSM] * 2
    assert all(held_out(GSM, template_of(r["entry"])) for r in held[1::2])  # a member with templates: held-out ones


def test_the_problem_types_workflow_trains_and_evaluates_on_disjoint_generators():
    path = ROOT / "workflows" / "math_rg_check_binary.mas"
    report = analyze(path.read_text(), str(path), base_dir=str(path.parent))
    assert not report.errors and not report.warnings, [str(d) for d in report.errors]
    train, evals = (load_split(report.workflow, split) for split in ("train", "eval"))
    trained = {r["entry"]["metadata"]["source_dataset"] for r in train}
    held = {r["entry"]["metadata"]["source_dataset"] for r in evals[:64]}
    assert len(trained) == 17 and len(held) == 9 and not trained & held
    assert all(held_out("reasoning_gym", name) for name in held)  # chosen by the hash, not by hand
    assert not any(held_out("reasoning_gym", name) for name in trained)


@pytest.mark.parametrize("args, kwargs, message", [
    ((["gcd", "gcdd"],), {}, "no generator 'gcdd' (in the mix, `gcdd`)"),
    ((["gcd", "gcd"],), {}, "a generator is listed twice in the mix"),
    (([],), {}, "a mix of generators is a non-empty list"),
    ((["gcd", "lcm"], "eval"), {"min_value": 2}, "settings apply to one generator, not to a mix"),
    ((["gcd", "lcm"], "eval"), {"n": 1}, "n (1) is smaller than the mix's 2 generators"),
    ((["gcd", "lcm"], "train"), {"templates": "held_out"}, "train rows come only from the trained problem types"),
    (("gms_symbolic",), {}, "no generator 'gms_symbolic' (did you mean `gsm_symbolic`?)"),
    ((GSM, "eval"), {"templates": "heldout"}, "did you mean `held_out`?"),
    ((GSM, "train"), {"templates": "held_out"}, "train rows come only from the trained templates"),
    (("chain_sum", "eval"), {"templates": "held_out"}, "`chain_sum` has no templates"),
    ((GSM, "eval"), {"n": 0}, "n must be an integer from 1 to 10000"),
    ((GSM, "eval"), {"dificulty": 1.0}, "did you mean `difficulty`?"),
    ((GSM, "test"), {}, 'use "train" or "eval"'),
])
def test_a_bad_call_is_a_data_error_with_a_hint(args, kwargs, message):
    with pytest.raises(DataError) as exc:
        reasoning_gym(*args, **kwargs)
    assert message in str(exc.value)


def test_masdsl_check_points_at_the_bad_argument(tmp_path):
    good = (ROOT / "workflows" / "math_gsm.mas").read_text()
    bad = good.replace('reasoning_gym("gsm_symbolic", "train"', 'reasoning_gym("gsm_symbolc", "train"')
    bad = bad.replace('reasoning_gym("gsm_symbolic", "eval", n=128)', 'reasoning_gym("gsm_symbolic", "eval", n=128, templates="seen")')
    assert bad.count("gsm_symbolc") == 1 and bad.count('"seen"') == 1
    report = analyze(bad, str(tmp_path / "bad.mas"), base_dir=str(tmp_path), build=False)
    found = [(d.code, d.span.line, d.message, d.help) for d in report.errors]
    line_of = {w: next(i for i, ln in enumerate(bad.splitlines(), 1) if w in ln) for w in ("gsm_symbolc", '"seen"')}
    assert found == [
        ("invalid-value", line_of["gsm_symbolc"], "reasoning_gym(...): reasoning-gym has no generator 'gsm_symbolc'",
         "did you mean `gsm_symbolic`?"),
        ("invalid-value", line_of['"seen"'], "reasoning_gym(...): templates must be \"held_out\" or \"trained\", got 'seen'",
         None)]


@pytest.mark.parametrize("name", ["math_gsm.mas", "math_gsm_single.mas", "math_gsm_tool_rloo.mas"])
def test_the_gsm_workflows_pass_check(name):
    path = ROOT / "workflows" / name
    report = analyze(path.read_text(), str(path), base_dir=str(path.parent))
    assert not report.errors and not report.warnings and report.workflow is not None, [str(d) for d in report.errors]


def test_the_single_agent_reads_its_program_and_is_scored_by_the_library(tmp_path, rows):
    """math_gsm_single end to end through `masdsl.api.rollout` (its data line, its env, its
    sandbox, `rg_score` in its reward and success), the policy scripted by a replay file."""
    tasks = rows["eval"][:2]
    right, wrong = tasks[0]["answer"], str(int(float(tasks[1]["answer"])) + 3)
    replies = {(tasks[0]["id"], 0): f"```python\nprint({right})\n```", (tasks[0]["id"], 1): f"\\boxed{{{right}}}",
               (tasks[1]["id"], 0): f"```python\nprint({wrong})\n```", (tasks[1]["id"], 1): f"\\boxed{{{wrong}}}"}
    replay = tmp_path / "replay.jsonl"
    replay.write_text("".join(json.dumps({"task_id": t, "role": "solver", "turn": n, "output": o}) + "\n"
                              for (t, n), o in replies.items()))
    ro = masdsl.rollout(str(ROOT / "workflows" / "math_gsm_single.mas"),
                        ["runtime.engine=replay", f"runtime.replay_file={replay}", NO_TRACKING], tasks=2)
    assert [e.success for e in ro.episodes] == [1.0, 0.0]
    answer_turns = {r.task_id: r for r in ro.records if r.turn == 1}
    assert f"It printed: {right}" in answer_turns[tasks[0]["id"]].prompt_text
    assert f"It printed: {wrong}" in answer_turns[tasks[1]["id"]].prompt_text
    assert [answer_turns[t["id"]].reward_local for t in tasks] == [1.0, pytest.approx(0.01)]  # the library's scores


def test_the_rloo_arm_pays_the_tool_right_wrong_and_failed_programs_apart(tmp_path, rows):
    """math_gsm_tool_rloo's tool reward through a real rollout and sandbox: 1 for a right printed
    answer, 0 for a wrong number, -0.2 for a program that fails; `advantage rloo` on the tool."""
    tasks = rows["eval"][:3]
    right, wrong = tasks[0]["answer"], str(int(float(tasks[1]["answer"])) + 3)
    programs = {tasks[0]["id"]: f"print({right})", tasks[1]["id"]: f"print({wrong})", tasks[2]["id"]: "1 / 0"}
    replay = tmp_path / "replay.jsonl"
    replay.write_text("".join(
        json.dumps({"task_id": t, "role": role, "turn": turn, "output": out}) + "\n"
        for t, code in programs.items() for turn in range(3)
        for role, out in (("tool", f"```python\n{code}\n```"), ("reasoner", "\\boxed{1}"))))
    path = ROOT / "workflows" / "math_gsm_tool_rloo.mas"
    ro = masdsl.rollout(str(path), ["runtime.engine=replay", f"runtime.replay_file={replay}", NO_TRACKING], tasks=3)
    first_tool = {r.task_id: r.reward_local for r in ro.records if r.role == "tool" and r.turn == 0}
    assert [first_tool[t["id"]] for t in tasks] == [1.0, 0.0, pytest.approx(-0.2)]
    report = analyze(path.read_text(), str(path), base_dir=str(path.parent))
    assert report.workflow.roles["tool"].advantage == "rloo"


def test_without_the_package_the_check_and_the_run_say_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)  # `import reasoning_gym` now fails
    with pytest.raises(DataError, match=r"needs the `reasoning-gym` package: pip install 'masdsl\[data\]'"):
        reasoning_gym(GSM, "eval", n=4)
    path = ROOT / "workflows" / "math_gsm.mas"
    report = analyze(path.read_text(), str(tmp_path / "w.mas"), base_dir=str(tmp_path), build=False)
    assert {(d.code, d.message) for d in report.errors} == {("invalid-value", NEEDS)}
