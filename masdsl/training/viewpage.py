"""The groups of a run as one self-contained HTML page (`masdsl view`, and the `view/view.html`
artifact of every tracked run): inline CSS and JS, no fetches, readable without JS.

Every piece of model text (prompts, replies, parsed fields) is hostile: it goes through
`html.escape` and never into markup, attributes or the script. The page is rendered on the
server side; its script only hides and shows groups (filters: role, turn, non-flat only,
failures only), keeps the filter in the URL hash (`#role=coder&turn=1&nonflat=1&failures=1`)
and reads it at load, so a link (or a headless browser) can open a filtered view.

A long run's page would outgrow a browser: past `max_bytes` the oldest sections are left out
and the page says which (`masdsl view RUN --step N` shows one step).

>>> from masdsl.training.groupview import build_section
>>> from masdsl.runtime.records import StepRecord
>>> r = StepRecord(0, 0, "t0", "coder", 0, "coder", 0, True, "p", [1], [2], [0.0], 1.0, 0.0, 1.0, "stop", True,
...                response_text="<script>alert(1)</script>")
>>> page = render_page([build_section("step 0", [r])], title="demo")
>>> "<script>alert(1)" in page, "&lt;script&gt;alert(1)&lt;/script&gt;" in page
(False, True)
"""

from __future__ import annotations

import html
import json
import re
import sys
from collections import deque
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from masdsl.config_schema import DEFAULT_ADVANTAGE
from masdsl.lang import ast as A
from masdsl.lang.parse import parse_text
from masdsl.runtime.rundir import CONFIG, SOURCE, RunDir
from masdsl.training.groupview import Candidate, Group, Section, sections
from masdsl.training.viewparts import CSS as PARTS_CSS
from masdsl.training.viewparts import (judge_html, metrics_summary, records_summary, reference_html, run_history,
                                       success_text)

if TYPE_CHECKING:  # `masdsl view` reads run folders without the tracking package
    from masdsl.tracking import Tracker

PAGE = "view.html"  # in the run folder, and the artifact `view/view.html` of its MLflow run
MAX_BYTES = 20_000_000  # a browser still opens a 20 MB page in a few seconds

CSS = """
*{box-sizing:border-box}[hidden]{display:none!important}
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d2430;background:#f4f6f9}
body>header{position:sticky;top:0;z-index:2;background:#fff;border-bottom:1px solid #d5dae1;padding:.6rem 1rem}
h1{font-size:1.15rem;margin:0}.sub{color:#5b6575;margin:.1rem 0 .4rem}
#filters{display:flex;gap:1rem;flex-wrap:wrap;align-items:center}
#count{font-weight:600;margin-left:auto}.note{color:#8a5a00;margin:.3rem 0 0}
main{padding:.5rem 1rem}section.step>h2{font-size:1rem;margin:1rem 0 .4rem}
h2 small{font-weight:400;color:#5b6575}
article.group{background:#fff;border:1px solid #d5dae1;border-radius:6px;margin:0 0 .8rem;padding:.5rem .6rem}
article.group.nonflat{border-left:4px solid #2b6cb0}.ghead{margin-bottom:.3rem}
details.prompt pre,pre.reply,pre.fields{white-space:pre-wrap;word-break:break-word;margin:.3rem 0;
 padding:.4rem;background:#f7f8fa;border:1px solid #e3e6eb;border-radius:4px;max-height:22rem;overflow:auto;
 font:12px/1.35 ui-monospace,monospace}
.cands{display:grid;grid-template-columns:repeat(var(--k),minmax(15rem,1fr));gap:.5rem;overflow-x:auto}
.cand{border:1px solid #e3e6eb;border-radius:5px;padding:.4rem}.cand.selected{border:2px solid #2f855a}
.cand.failed{background:#fff7f5}.chead{font-weight:600}
.tag{display:inline-block;font-size:11px;font-weight:600;border-radius:3px;padding:0 .35rem;margin-left:.3rem}
.tag.sel{background:#c6f6d5;color:#22543d}.tag.cut{background:#feebc8;color:#7b341e}
.tag.pf{background:#fed7d7;color:#822727}.tag.flat{background:#e2e8f0;color:#4a5568}
dl.nums{display:grid;grid-template-columns:auto 1fr;gap:0 .6rem;margin:.3rem 0}dl.nums dt{color:#5b6575}
dl.nums dd{margin:0;font-variant-numeric:tabular-nums}.pos{color:#2f855a}.neg{color:#c53030}
"""

JS = """
(function () {
  var $ = function (id) { return document.getElementById(id); };
  var role = $('f-role'), turn = $('f-turn'), nonflat = $('f-nonflat'), failures = $('f-failures');
  var groups = Array.prototype.slice.call(document.querySelectorAll('article.group'));
  var steps = Array.prototype.slice.call(document.querySelectorAll('section.step'));
  function fromHash() {
    var q = new URLSearchParams(location.hash.slice(1));
    role.value = q.get('role') || ''; turn.value = q.get('turn') || '';
    nonflat.checked = q.get('nonflat') === '1'; failures.checked = q.get('failures') === '1';
  }
  function toHash() {
    var q = new URLSearchParams();
    if (role.value) q.set('role', role.value);
    if (turn.value) q.set('turn', turn.value);
    if (nonflat.checked) q.set('nonflat', '1');
    if (failures.checked) q.set('failures', '1');
    var h = q.toString();
    if ((h ? '#' + h : '') !== location.hash) {
      try { history.replaceState(null, '', h ? '#' + h : location.pathname + location.search); } catch (e) {}
    }
  }
  function apply() {
    var shown = 0;
    groups.forEach(function (g) {
      var d = g.dataset;
      var ok = (!role.value || d.role === role.value) && (!turn.value || d.turn === turn.value) &&
               (!nonflat.checked || d.flat === '0') && (!failures.checked || d.fail === '1');
      g.hidden = !ok;
      if (ok) shown++;
    });
    steps.forEach(function (s) { s.hidden = !s.querySelector('article.group:not([hidden])'); });
    $('count').textContent = shown + ' of ' + groups.length + ' groups';
    toHash();
  }
  [role, turn, nonflat, failures].forEach(function (el) { el.addEventListener('change', apply); });
  window.addEventListener('hashchange', function () { fromHash(); apply(); });
  fromHash(); apply();
})();
"""


# control characters other than tab, newline and carriage return: shown as `\xNN` (a reply may hold NUL bytes)
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def esc(value: Any) -> str:
    r"""Text for HTML: markup escaped, control characters made visible.

    >>> esc('<b a="1">\x00')
    '&lt;b a=&quot;1&quot;&gt;\\x00'
    """
    text = CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(value))
    return html.escape(text, quote=True)


def _number(value: float | None, signed: bool = False) -> str:
    if value is None:
        return '<dd class="none">—</dd>'
    cls = "pos" if value > 0 else "neg" if value < 0 else ""
    return f'<dd class="{cls}">{value:+.3f}</dd>' if signed else f"<dd>{value:.4f}</dd>"


def candidate_html(c: Candidate, group_prompt: str) -> str:
    r = c.record
    tags = ('<span class="tag sel">selected</span>' if r.selected else "") \
        + ('<span class="tag cut">cut</span>' if c.cut else "") \
        + ("" if r.parse_ok else '<span class="tag pf">parse failed</span>')
    classes = "cand" + (" selected" if r.selected else "") + (" failed" if c.failed else "")
    prompt = "" if r.prompt_text == group_prompt else \
        f'<details class="prompt"><summary>its own prompt</summary><pre>{esc(r.prompt_text)}</pre></details>'
    fields = json.dumps(r.fields, indent=1, ensure_ascii=False, default=str)
    return (f'<div class="{classes}" data-candidate="{r.candidate}"><div class="chead">#{r.candidate}{tags}</div>'
            f'<dl class="nums"><dt>reward</dt>{_number(r.reward)}<dt>team</dt>{_number(r.reward_team)}'
            f"<dt>local</dt>{_number(r.reward_local)}<dt>advantage</dt>{_number(c.advantage, signed=True)}"
            f"<dt>tokens</dt><dd>{len(r.response_ids)} ({esc(r.finish_reason)})</dd></dl>{prompt}"
            f'<pre class="reply">{esc(r.response_text)}</pre><pre class="fields">{esc(fields)}</pre>'
            + "".join(judge_html(j, esc) for j in r.judge) + "</div>")


def group_html(g: Group) -> str:
    head = g.first
    task, role, turn = g.key
    rewards = ", ".join(f"{c.record.reward:.4g}" for c in g.candidates)
    where = f" · line {head.source_line}" if head.source_line else ""
    cut = " (truncated)" if head.truncated_prompt else ""
    classes = "group" + ("" if g.flat else " nonflat")
    flat = '<span class="tag flat">flat</span>' if g.flat else ""
    unscored = sum(not j.get("parsed") for c in g.candidates for j in c.record.judge)
    judged = f" · judge: {unscored} without a score" if unscored else ""
    return (f'<article class="{classes}" data-task="{esc(task)}" data-role="{esc(role)}" data-turn="{turn}" '
            f'data-flat="{int(g.flat)}" data-fail="{int(g.failed)}">'
            f'<div class="ghead"><b>task</b> {esc(task)} · <b>role</b> {esc(role)} · <b>turn</b> {turn} · '
            f"node {esc(head.node)}{where} · policy {esc(head.policy)} · episode {g.episode} "
            f"({success_text(head.episode_success)}) · rewards [{rewards}]{flat}{judged}</div>"
            + reference_html(head.reference, esc) +
            f'<details class="prompt"><summary>prompt ({len(head.prompt_ids)} tokens){cut}</summary>'
            f"<pre>{esc(head.prompt_text)}</pre></details>"
            f'<div class="cands" style="--k:{len(g.candidates)}">'
            + "".join(candidate_html(c, head.prompt_text) for c in g.candidates) + "</div></article>")


def section_html(s: Section, metrics: Mapping[int, Mapping[str, float]] | None = None) -> str:
    """One step's (or evaluation's) groups under its heading and summary line (`metrics`: step ->
    its metrics, where the run folder holds them: `viewparts.run_history`)."""
    nonflat = sum(not g.flat for g in s.groups)
    failed = sum(g.failed for g in s.groups)
    what = "evaluation: one sample per decision, no advantage" if s.evaluation else f"{nonflat} non-flat"
    records = [c.record for g in s.groups for c in g.candidates]
    summary = records_summary(records, nonflat, len(s.groups), s.evaluation)
    step = records[0].step if records else 0
    if not s.evaluation and metrics and step in metrics:
        summary += "<br>metrics: " + esc(metrics_summary(metrics[step]).replace("  ", " · "))
    return (f'<section class="step" data-label="{esc(s.label)}"><h2>{esc(s.label)} <small>{len(s.groups)} groups, '
            f'{what}, {failed} with a failure</small></h2><p class="summary">{summary}</p>'
            + "".join(group_html(g) for g in s.groups) + "</section>")


def _options(element: str, label: str, values: Iterable[Any]) -> str:
    opts = "".join(f'<option value="{esc(v)}">{esc(v)}</option>' for v in values)
    return f'<label>{label} <select id="{element}"><option value="">all</option>{opts}</select></label>'


def render_page(parts: Iterable[Section], *, title: str, subtitle: str = "", max_bytes: int = MAX_BYTES,
                metrics: Mapping[int, Mapping[str, float]] | None = None) -> str:
    """The page of `parts`; past `max_bytes` (0: no limit) of sections the oldest are left out."""
    kept: deque[tuple[str, str, set, set]] = deque()
    size, dropped = 0, []
    for s in parts:
        text = section_html(s, metrics)
        kept.append((s.label, text, {g.key[1] for g in s.groups}, {g.key[2] for g in s.groups}))
        size += len(text)
        while max_bytes and size > max_bytes and len(kept) > 1:
            label, old, _, _ = kept.popleft()
            dropped.append(label)
            size -= len(old)
    roles = sorted(set().union(*(k[2] for k in kept)))
    turns = sorted(set().union(*(k[3] for k in kept)))
    note = (f'<p class="note">left out to keep the page under {max_bytes / 1e6:g} MB: {esc(", ".join(dropped))} '
            "(<code>masdsl view RUN --step N</code> shows one step)</p>") if dropped else ""
    body = "".join(k[1] for k in kept) or "<p>no records</p>"
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>masdsl view · {esc(title)}</title><style>{CSS}{PARTS_CSS}</style></head><body><header>"
            f"<h1>masdsl view · {esc(title)}</h1><p class=\"sub\">{esc(subtitle)}</p><form id=\"filters\">"
            f"{_options('f-role', 'role', roles)}{_options('f-turn', 'turn', turns)}"
            '<label><input type="checkbox" id="f-nonflat"> non-flat only</label>'
            '<label><input type="checkbox" id="f-failures"> failures only (cut or parse failed)</label>'
            f'<span id="count"></span></form>{note}</header><main>{body}</main><script>{JS}</script></body></html>\n')


def run_grouping(run_dir: Path) -> str:
    """The run's `train.grouping` from its config.yaml (`at` when it cannot be read)."""
    import yaml  # start-up: PyYAML, only when a page is built

    try:
        cfg = yaml.safe_load((Path(run_dir) / CONFIG).read_text(encoding="utf-8")) or {}
        return str(cfg.get("train", {}).get("grouping") or "at")
    except (OSError, yaml.YAMLError, AttributeError):
        return "at"


def run_estimators(run_dir: Path) -> dict[str, str]:
    """Each role's `advantage` estimator, read from the run folder's copy of its workflow
    (parsed only: nothing it imports runs); {} (the default for every role) when unreadable."""
    try:
        module, errors = parse_text((Path(run_dir) / SOURCE).read_text(encoding="utf-8"), str(SOURCE))
    except OSError:
        return {}
    if module is None or errors:
        return {}
    return {r.name.name: (r.of(A.RoleAdvantage)[0].name.name if r.of(A.RoleAdvantage) else DEFAULT_ADVANTAGE)
            for r in module.roles}


def run_page(run: RunDir, pairs: Iterable | None = None, *, grouping: str | None = None,
             estimators: Mapping[str, str] | None = None, max_bytes: int = MAX_BYTES) -> str:
    """The page of a run folder: `pairs` of (record, label), by default every rollout of
    records.jsonl and then the training run's evaluations (`RunDir.evaluations`). The
    advantages use the run's grouping and estimators (None: read from the run folder)."""
    if pairs is None:
        pairs = chain(((r, None) for r in run.records()), run.evaluations())
    if estimators is None:
        estimators = run_estimators(run.path)
    title = f"{run.path.parent.name}/{run.path.name}"
    return render_page(sections(pairs, grouping or run_grouping(run.path), estimators), title=title,
                       subtitle=str(run.path.resolve()), max_bytes=max_bytes, metrics=run_history(run.path))


def log_view(run_dir: Path, tracker: Tracker, grouping: str | None = None,
             estimators: Mapping[str, str] | None = None) -> Path | None:
    """Write the run's page to `<run_dir>/view.html` and log it as the artifact `view/view.html`.
    A bug here must not fail the run it describes: it is reported and skipped."""
    try:
        path = Path(run_dir) / PAGE
        path.write_text(run_page(RunDir(Path(run_dir)), grouping=grouping, estimators=estimators), encoding="utf-8")
    except Exception as exc:  # noqa: BLE001 - the page is a convenience; the run's results are saved
        print(f"masdsl: could not write the groups page of {run_dir}: {exc}", file=sys.stderr)
        return None
    if tracker is not None:
        tracker.log_artifact(path, "view")
    return path
