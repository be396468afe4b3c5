"""`masdsl view` (issue 32, item 5): the AT-GRPO groups of a run as one HTML page.

The run folders are built by hand, as `masdsl run` and `masdsl eval` write them
(`masdsl.runtime.rundir`): records.jsonl with two training steps of K = 3 candidates for two
roles, eval/step_N.jsonl, and an eval run's folder of step -1 records. One reply is hostile
(`<script>`); one is cut at its token budget, one fails to parse. The browser tests open the
page in a real headless chromium (`masdsl.testing.browser`) and skip where none is installed.
"""

from __future__ import annotations

import os
import re
import threading
import urllib.error
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

import pytest

from masdsl.cli import main
from masdsl.commands.view import make_server, page_builder
from masdsl.runtime.records import StepRecord, write_records
from masdsl.runtime.rundir import open_run
from masdsl.testing.browser import Browser, chromium_path
from tests.support.judged import JUDGE_REPLY, judged_run

HOSTILE = "<script>window.pwned = 1; document.title = 'pwned'</script><img src=x onerror=\"window.pwned=2\">"
REWARDS = {  # (step, role) -> the K rewards
    (0, "coder"): (1.0, 0.0, 0.5), (0, "tester"): (0.2, 0.2, 0.2),
    (1, "coder"): (0.0, 0.0, 0.0), (1, "tester"): (1.0, 0.0, 0.0),
}


def rec(step: int, role: str, k: int, reward: float, *, text: str = "", finish: str = "stop", ok: bool = True,
        task: str = "t0", turn: int = 0, episode: int = 0) -> StepRecord:
    return StepRecord(step, episode, task, role, turn, role, k, k == 0, "shared", [1, 2, 3], [4] * (k + 2), [-0.5],
                      reward, 0.25, reward - 0.25, finish, ok, {"answer": text or f"{role} {k}"},
                      prompt_text=f"prompt of {role} at step {step}", response_text=text or f"reply {role} {step} {k}")


def training_run(root: Path) -> Path:
    run = root / "runs" / "toy" / "20260101-000000"
    (run / "eval").mkdir(parents=True)
    records = []
    for (step, role), rewards in REWARDS.items():
        for k, reward in enumerate(rewards):
            special = {}
            if (step, role, k) == (0, "coder", 1):
                special = {"text": HOSTILE}
            elif (step, role, k) == (0, "coder", 2):
                special = {"finish": "length"}
            elif (step, role, k) == (1, "tester", 2):
                special = {"ok": False}
            elif (step, role, k) == (0, "tester", 0):
                special = {"text": "nul\x00byte"}
            records.append(rec(step, role, k, reward, **special))
    write_records(run / "records.jsonl", records)
    (run / "config.yaml").write_text("train:\n  grouping: at\n")
    write_records(run / "eval" / "step_000002.jsonl", [rec(2, "coder", 0, 1.0, task="e0")])
    return run


class Groups(HTMLParser):
    """The groups of a page, in order: (section label, data-role, data-turn, data-flat, data-fail)."""

    def __init__(self) -> None:
        super().__init__()
        self.section, self.groups = "", []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "section":
            self.section = a["data-label"]
        elif tag == "article":
            self.groups.append((self.section, a["data-role"], a["data-turn"], a["data-flat"], a["data-fail"]))

    @property
    def advantages(self) -> list[str]:
        return re.findall(r'<dt>advantage</dt><dd class="[^"]*">([^<]*)</dd>', self.page)


def parse(page: str) -> Groups:
    g = Groups()
    g.page = page
    g.feed(page)
    return g


def test_each_group_shows_its_candidates_advantages_and_failures(tmp_path, capsys):
    run = training_run(tmp_path)
    assert main(["view", str(run)]) == 0
    out = run / "view.html"
    assert f"wrote {out}" in capsys.readouterr().out
    page = out.read_text()
    got = parse(page)
    assert got.groups == [
        ("step 0", "coder", "0", "0", "1"), ("step 0", "tester", "0", "1", "0"),
        ("step 1", "coder", "0", "1", "0"), ("step 1", "tester", "0", "0", "1"),
        ("eval at step 2", "coder", "0", "1", "0"),
    ]
    # GRPO by hand: rewards (1, 0, .5): mean .5, unbiased std .5 -> +1, -1, 0; (1, 0, 0): mean 1/3,
    # std sqrt(1/3) -> +1.155, -0.577, -0.577; flat groups 0; the evaluation has none
    assert got.advantages == ["+1.000", "-1.000", "+0.000", "+0.000", "+0.000", "+0.000", "+0.000", "+0.000",
                              "+0.000", "+1.155", "-0.577", "-0.577", "—"]
    assert len(re.findall(r'class="cand[ "]', page)) == 13 and page.count('<span class="tag sel">selected</span>') == 5
    assert page.count('<span class="tag cut">cut</span>') == 1 and page.count("parse failed</span>") == 1
    assert "<script>window.pwned" not in page and "&lt;script&gt;window.pwned = 1;" in page
    assert "nul\\x00byte" in page and "\x00" not in page  # control characters made visible
    assert "<img src=x" not in page and page.count("<script>") == 1  # the page's own script only
    assert "prompt of tester at step 1" in page and "reward" in page and "team" in page and "local" in page
    assert "src=" not in page.replace("&lt;img src=x", "") and "http" not in page  # nothing fetched


def test_one_step_an_eval_folder_and_a_size_limit(tmp_path, capsys):
    run = training_run(tmp_path)
    out = tmp_path / "one.html"
    assert main(["view", str(run.parent), "--step", "1", "--out", str(out)]) == 0  # runs/<workflow>: newest
    assert [g[0] for g in parse(out.read_text()).groups] == ["step 1", "step 1"]
    evalrun = tmp_path / "evalrun"
    evalrun.mkdir()
    write_records(evalrun / "records.jsonl", [rec(-1, "coder", 0, 1.0, episode=e) for e in (0, 1)])
    assert main(["view", str(evalrun)]) == 0
    got = parse((evalrun / "view.html").read_text())
    assert got.groups == [("eval", "coder", "0", "1", "0")] * 2 and got.advantages == ["—", "—"]  # 2 episodes
    assert main(["view", str(run), "--max-mb", "0.006", "--out", str(out)]) == 0
    page = out.read_text()
    kept = [g[0] for g in parse(page).groups]
    assert kept and "step 0" not in kept and "left out to keep the page under 0.006 MB: step 0" in page


@pytest.mark.parametrize("argv, message", [
    (["--step", "7"], "no step 7"),
    (["--port", "9000"], "--port goes with --serve"),
    (["--serve", "--out", "x.html"], "give one of them"),
    (["--max-mb", "-1"], "--max-mb must be 0"),
])
def test_bad_command_lines_are_refused(tmp_path, capsys, argv, message):
    run = training_run(tmp_path)
    assert main(["view", str(run), *argv]) == 2
    assert message in capsys.readouterr().err
    assert main(["view", str(tmp_path / "nothing")]) == 2
    assert "no such run folder" in capsys.readouterr().err


def test_serve_rebuilds_the_page_on_each_load_on_the_loopback_only(tmp_path):
    run = training_run(tmp_path)
    server = make_server(page_builder(open_run(run), None, 20), 0)
    host, port = server.server_address[:2]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        assert host == "127.0.0.1"
        first = urllib.request.urlopen(f"http://{host}:{port}/", timeout=30).read().decode()
        assert len(parse(first).groups) == 5
        write_records(run / "records.jsonl", [rec(2, "coder", k, float(k)) for k in range(3)])  # the run goes on
        again = urllib.request.urlopen(f"http://{host}:{port}/", timeout=30).read().decode()
        assert [g[0] for g in parse(again).groups].count("step 2") == 1
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"http://{host}:{port}/../records.jsonl", timeout=30)
        assert err.value.code == 404
    finally:
        server.shutdown()
        server.server_close()
    busy = make_server(lambda: "", 0)
    try:
        with pytest.raises(Exception, match="cannot serve on 127.0.0.1"):
            make_server(lambda: "", busy.server_address[1])
    finally:
        busy.server_close()


needs_chromium = pytest.mark.skipif(chromium_path() is None, reason="no chromium installed (apt-get install chromium)")

VISIBLE = "[...document.querySelectorAll('article.group:not([hidden])')].map(g => g.closest('section').dataset.label + ' ' + g.dataset.role)"


@needs_chromium
def test_in_a_browser_filters_hide_groups_and_model_text_stays_text(tmp_path):
    run = training_run(tmp_path)
    assert main(["view", str(run)]) == 0
    url = (run / "view.html").as_uri()
    with Browser() as b:
        b.open(url + "#role=tester")  # the hash sets the filter at load
        assert b.evaluate("document.getElementById('f-role').value") == "tester"
        assert b.evaluate(VISIBLE) == ["step 0 tester", "step 1 tester"]
        assert b.evaluate("document.getElementById('count').textContent") == "2 of 5 groups"
        b.click("#f-failures")  # a real click on the checkbox
        assert b.evaluate("document.getElementById('f-failures').checked") is True
        assert b.evaluate(VISIBLE) == ["step 1 tester"]
        assert b.evaluate("location.hash") == "#role=tester&failures=1"
        assert b.evaluate("[...document.querySelectorAll('section.step')].filter(s => !s.hidden).length") == 1
        b.open(url + "#nonflat=1")
        assert b.evaluate(VISIBLE) == ["step 0 coder", "step 1 tester"]
        b.click("#f-nonflat")  # unticked: every group again
        assert b.evaluate("document.getElementById('count').textContent") == "5 of 5 groups"
        # the hostile reply: shown as text, never run
        assert b.evaluate("typeof window.pwned") == "undefined"
        assert b.evaluate("document.title").startswith("masdsl view")
        assert b.evaluate("document.querySelectorAll('main script, main img').length") == 0
        replies = b.evaluate("[...document.querySelectorAll('pre.reply')].map(p => p.textContent)")
        assert HOSTILE in replies


@needs_chromium
def test_in_a_browser_the_page_works_without_a_network(tmp_path):
    """Nothing on the page asks for another resource: chromium logs no request but the page."""
    run = training_run(tmp_path)
    assert main(["view", str(run)]) == 0
    with Browser() as b:
        b.open((run / "view.html").as_uri())
        urls = b.evaluate("performance.getEntriesByType('resource').map(e => e.name)")
        assert urls == []
        assert re.fullmatch(r"\d+ of 5 groups", b.evaluate("document.getElementById('count').textContent"))


WORKFLOW = '''workflow toy "A coder and a tester."
env code
policy shared { model: "smollm2-135m-instruct" }
role coder {
  policy shared
  prompt "Write it."
  advantage rloo
}
role tester {
  policy shared
  prompt "Test it."
}
flow {
  start -> coder -> tester -> end
}
'''


def test_advantages_follow_each_roles_estimator_from_the_runs_workflow(tmp_path):
    run = training_run(tmp_path)
    (run / "workflow.mas").write_text(WORKFLOW)
    assert main(["view", str(run), "--step", "0", "--out", str(tmp_path / "p.html")]) == 0
    got = parse((tmp_path / "p.html").read_text())
    # coder, RLOO by hand: (1, 0, .5) -> 1 - .25, 0 - .75, .5 - .5; tester (flat): 0 under any estimator
    assert got.advantages == ["+0.750", "-0.750", "+0.000", "+0.000", "+0.000", "+0.000"]
    (run / "workflow.mas").write_text("role {")  # unreadable: every role gets the default (GRPO)
    assert main(["view", str(run), "--step", "0", "--out", str(tmp_path / "p.html")]) == 0
    assert parse((tmp_path / "p.html").read_text()).advantages[:3] == ["+1.000", "-1.000", "+0.000"]


DOCS_SHOT = Path(__file__).parents[2] / "docs" / "img" / "view_judge.png"


@needs_chromium
def test_in_a_browser_a_judged_group_shows_its_judges_and_the_reference(tmp_path, monkeypatch):
    """The screenshot of docs/img/view_judge.png (issue 43): a group whose judge restated an
    equation, with the task's reference answer. It is written there when missing or under
    MASDSL_DOCS_IMG=1 (each run's page names its own temporary folder: the PNG would change on
    every run), else beside the test."""
    run = judged_run(tmp_path)
    assert main(["view", str(run)]) == 0
    shot = DOCS_SHOT if not DOCS_SHOT.exists() or os.environ.get("MASDSL_DOCS_IMG") == "1" else tmp_path / "view.png"
    with Browser(width=1100, height=760) as b:
        b.open((run / "view.html").as_uri())
        assert b.evaluate("document.querySelector('.ref').textContent") == "reference answer 7"
        judges = b.evaluate("[...document.querySelectorAll('.judge')].map(j => "
                            "[j.querySelector('.jscore').textContent, j.querySelector('pre').textContent])")
        assert judges == [["-1", JUDGE_REPLY], ["9", "Score: 9"]]
        assert b.evaluate("[...document.querySelectorAll('.judge .tag')].map(t => t.textContent)") == \
            ["no score: default", "restated"]
        assert "episode 0 (success 1)" in b.evaluate("document.querySelector('.ghead').textContent")
        assert b.evaluate("document.querySelector('p.summary').textContent").startswith("episodes 1 · success 1.00")
        b.screenshot(shot)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
