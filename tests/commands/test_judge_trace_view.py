"""What a judge did, in `masdsl trace`, `masdsl view` and the eval table (issue 43, item 4):
before, a judge's replies and scores were only in records.jsonl. Each candidate now shows its
judge's reply and score, a reply without a score (the default) and one that restated an
equation are marked; each episode shows its task's reference answer and success; each step of
the page has a summary line, with the step's metrics where the run folder holds them.

The run folder is written by hand as `masdsl run` writes it (`tests.support.judged.judged_run`)."""

from __future__ import annotations

import io
import re

from rich.console import Console

from masdsl.cli import main
from masdsl.commands.eval import table
from tests.support.judged import JUDGE_REPLY, judged_run


def test_trace_shows_each_judge_reply_its_score_and_the_reference(tmp_path, capsys):
    run = judged_run(tmp_path)
    assert main(["trace", str(run), "--no-prompt"]) == 0
    out = capsys.readouterr().out
    assert "══ task t0 · episode 0 · step 1 · success 1 · final reward 9.0000 · reference answer=\"7\"" in out
    first, second = out.split("candidate 1:")
    assert "judge critic (line 9): score -1 (NO SCORE in the reply: the judge's default)" in first
    assert f"RESTATED `{JUDGE_REPLY}`: its numbers are not read as a score" in first
    assert f"        > {JUDGE_REPLY}" in first
    assert "judge critic (line 9): score 9 (parsed)" in second and "        > Score: 9" in second
    assert "RESTATED" not in second


def test_view_shows_judges_the_reference_success_and_a_step_summary(tmp_path):
    run = judged_run(tmp_path)
    assert main(["view", str(run)]) == 0
    page = (run / "view.html").read_text()
    judges = re.findall(r'<div class="judge" data-parsed="(\d)">.*?score <span class="jscore">([^<]*)</span>', page)
    assert judges == [("0", "-1"), ("1", "9")]
    assert page.count('<span class="tag nojs">no score: default</span>') == 1
    assert page.count(">restated</span>") == 1 and f"restated equation: <code>{JUDGE_REPLY}</code>" in page
    assert '<div class="ref"><b>reference</b> answer <code>7</code></div>' in page
    assert "episode 0 (success 1)" in page and "judge: 1 without a score" in page
    summary = re.search(r'<p class="summary">(.*?)</p>', page).group(1)
    assert summary.startswith("episodes 1 · success 1.00 · mean reward 4.000 · non-flat groups 1 of 1 · cut 0 of 2 · "
                              "parse failed 1 of 2 · judge replies 2, 1 without a score, 1 restated an equation")
    # the step's metrics, from the checkpoint's state.json: phase times and the progress line's figures
    assert "metrics: rollout 4.2 s · update 1.5 s · success 0.50 · entropy shared 1.75 · non-flat 100 % · " \
           "parse-fail solver 50 %" in summary


def test_the_eval_table_has_the_judges_rows():
    m = {"success/eval": 0.5, "episodes": 4, "truncated_episodes": 0, "tokens_generated": 8, "tokens_per_s": 1.0,
         "wall_s": 1.0, "gen_s": 1.0, "env_s": 0.0, "truncated_prompts": 0, "expression_errors": 0,
         "judge/calls": 8.0, "judge/tokens": 40.0, "judge/unparsed": 2.0, "judge/restated": 1.0, "judge/score": 6.5,
         "time/judge_s": 0.5}
    buf = io.StringIO()
    Console(file=buf, width=200).print(table(type("W", (), {"name": "w"})(), m, "runs/w/1"))
    rows = {tuple(c.strip() for c in line.strip("│ ").split("│")) for line in buf.getvalue().splitlines() if "│" in line}
    assert {("judge replies", "8"), ("mean parsed score", "6.500"), ("without a score (scored the default)", "2"),
            ("restated an equation (see masdsl trace)", "1")} <= rows
