"""What a run records about where it came from: params, tags, metric routing, start artifacts.

Pure functions of the `Workflow` and the run's record (`masdsl.config.RunRecord`), so they are cheap to test; the
tracker only ships what they return.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from masdsl.lang.graph import to_dot, to_mermaid

if TYPE_CHECKING:
    from masdsl.config import RunRecord
    from masdsl.lang.workflow import Workflow

PARAM_VALUE_LIMIT = 6000  # MLflow rejects longer param values
POLICY_METRICS = ("loss", "clip_frac", "kl", "grad_norm", "entropy", "kl_old")  # `<name>/<policy>/...`
ROLE_METRICS = ("reward", "eval_reward", "cut", "parse_fail", "eval_cut", "eval_parse_fail",
                "nonflat", "adv_abs")  # `<name>/<role>/...`


_BAD_KEY_CHARS = re.compile(r"[^/\w.\- :]")
# MLflow's UI charts a run's metrics in one section per name prefix, the sections in code-unit
# order (`sort()` of their names: uppercase before lowercase), so `adv_abs` and `clip_frac` come
# before `reward` and `success`. The headline figures are logged again under a prefix that sorts
# first, so they open the run's Model metrics tab (a chart layout lives in the browser's local
# storage only: no API sets one)
KEY_SECTION = "Key metrics"
_TRAIN_REWARD = re.compile(r"^reward/[^/]+/turn\d+/mean$")
KEY_NOTE = (f"**{KEY_SECTION}**: `success` and `reward` (training and evaluation) are charted first, in the section "
            f"*{KEY_SECTION}* of the run's *Model metrics* tab.")


def metric_key(key: str) -> str:
    """A name MLflow accepts (letters, digits, `_ - . : /` and spaces; at most 250 characters).

    >>> metric_key("reward/coder/turn0"), metric_key("acc(eval)@k=1")
    ('reward/coder/turn0', 'acc_eval__k_1')
    """
    return _BAD_KEY_CHARS.sub("_", str(key))[:250]


def key_metrics(metrics: Mapping[str, float]) -> dict[str, float]:
    """The headline figures of a step or evaluation, named to be charted first (`KEY_SECTION`):
    the train success, the train reward (the mean over roles and turns, as the run's summary
    table), the eval success and reward; only those the metrics hold.

    >>> key_metrics({"success/train": 0.5, "reward/a/turn0/mean": 1.0, "reward/b/turn0/mean": 0.0, "loss/p": 2.0})
    {'Key metrics/success train': 0.5, 'Key metrics/reward train': 0.5}
    >>> key_metrics({"success/eval": 0.25, "reward/eval": 0.75})
    {'Key metrics/success eval': 0.25, 'Key metrics/reward eval': 0.75}
    """
    numbers = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    out = {}
    if "success/train" in numbers:
        out[f"{KEY_SECTION}/success train"] = numbers["success/train"]
    rewards = [v for k, v in numbers.items() if _TRAIN_REWARD.match(k)]
    if rewards:
        out[f"{KEY_SECTION}/reward train"] = sum(rewards) / len(rewards)
    for name in ("success", "reward"):
        if f"{name}/eval" in numbers:
            out[f"{KEY_SECTION}/{name} eval"] = numbers[f"{name}/eval"]
    return out


def params_of(flat: dict[str, Any]) -> dict[str, str]:
    """MLflow params from a flattened config: strings, None as "None", long values cut, names
    as MLflow accepts them (`metric_key`: `sample.*.max_tokens` is logged as `sample._.max_tokens`).

    >>> params_of({"train.lr": 1e-06, "tracking.uri": None, "x": "a" * 7000})["train.lr"]
    '1e-06'
    >>> len(params_of({"x": "a" * 7000})["x"]), params_of({"sample.*.max_tokens": 4096})
    (6000, {'sample._.max_tokens': '4096'})
    """
    return {metric_key(k): str(v)[:PARAM_VALUE_LIMIT] for k, v in flat.items()}


def route(key: str, policies: set[str], role_policy: dict[str, str]) -> str | None:
    """The policy whose child run also receives metric `key`, or None (parent only).

    >>> pol, roles = {"shared", "critic"}, {"coder": "shared", "tester": "shared"}
    >>> route("loss/shared", pol, roles), route("grad_norm/critic", pol, roles)
    ('shared', 'critic')
    >>> route("reward/tester/turn1", pol, roles), route("success/train", pol, roles)
    ('shared', None)
    >>> route("eval_reward/coder/turn0", pol, roles), route("reward/eval", pol, roles)
    ('shared', None)
    >>> route("cut/coder", pol, roles), route("eval_parse_fail/tester", pol, roles)
    ('shared', 'shared')
    >>> route("loss/unknown", pol, roles) is None
    True
    >>> route("entropy/critic", pol, roles), route("clip_frac/shared/tester", pol, roles), route("nonflat/coder", pol, roles)
    ('critic', 'shared', 'shared')
    >>> route("success/train/tester", pol, roles), route("success/eval", pol, roles)
    ('shared', None)
    """
    parts = key.split("/")
    if len(parts) < 2:
        return None
    if parts[0] in POLICY_METRICS and parts[1] in policies:
        return parts[1]
    if parts[0] in ROLE_METRICS:
        return role_policy.get(parts[1])
    if parts[:2] == ["success", "train"] and len(parts) == 3:  # a role's train success
        return role_policy.get(parts[2])
    return None


def git_commit(folder: Path | None) -> str | None:
    """HEAD of the git repository holding `folder`, or None outside one (or without git)."""
    if shutil.which("git") is None:
        return None
    try:
        out = subprocess.run(
            ["git", "-C", str(folder or Path.cwd()), "rev-parse", "HEAD"],
            capture_output=True, text=True, timeout=5, check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    sha = out.stdout.strip()
    return sha if out.returncode == 0 and len(sha) == 40 else None


def parent_tags(workflow: Workflow, record: RunRecord, kind: str) -> dict[str, str]:
    """Tags of the parent run: the workflow's identity and which roles train which policy."""
    tags = {
        "masdsl.kind": kind,
        "masdsl.workflow": workflow.name,
        "masdsl.env": workflow.env,
        "masdsl.file_hash": workflow.file_hash or "",
        "masdsl.grouping": str(record.params["train.grouping"]),
        "masdsl.policies": ",".join(workflow.policies),
    }
    for policy in workflow.policies:
        tags[f"masdsl.roles.{policy}"] = ",".join(workflow.roles_of_policy(policy))
    tags["mlflow.note.content"] = f"{workflow.description}\n\n{KEY_NOTE}" if workflow.description else KEY_NOTE
    if workflow.path is not None:
        tags["mlflow.source.name"] = str(workflow.path)
    commit = git_commit(Path(workflow.path).resolve().parent if workflow.path else None)
    if commit:
        tags["masdsl.git_commit"] = commit
        tags["mlflow.source.git.commit"] = commit
    return tags


def child_tags(workflow: Workflow, policy: str, kind: str) -> dict[str, str]:
    spec = workflow.policies[policy]
    return {
        "masdsl.kind": kind,
        "masdsl.workflow": workflow.name,
        "masdsl.policy": policy,
        "masdsl.roles": ",".join(workflow.roles_of_policy(policy)),
        "masdsl.model": str(spec.model),
        "masdsl.frozen": str(bool(spec.frozen)).lower(),
    }


def child_params(workflow: Workflow, policy: str) -> dict[str, str]:
    spec = workflow.policies[policy]
    raw = {"policy": policy, "model": spec.model, "lora": spec.lora, "frozen": spec.frozen, "lr": spec.lr,
           "train_every": spec.train_every, "frozen_until": spec.frozen_until}
    raw |= {f"options.{k}": v for k, v in dict(spec.options).items()}
    raw["roles"] = ",".join(workflow.roles_of_policy(policy))
    return params_of(raw)


def graph_texts(workflow: Workflow) -> dict[str, str]:
    """The compiled graph as artifact files: mermaid, dot and (with graphviz) svg.

    Uses the language's renderers (`masdsl.lang.graph`).
    """
    out = {"workflow.mmd": to_mermaid(workflow), "workflow.dot": to_dot(workflow)}
    svg = dot_to_svg(out["workflow.dot"])
    if svg:
        out["workflow.svg"] = svg
    return out


def dot_to_svg(dot_text: str, timeout_s: float = 20.0) -> str | None:
    """Render Graphviz text to SVG with the `dot` program; None when it is missing or fails."""
    exe = shutil.which("dot")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "-Tsvg"], input=dot_text, capture_output=True, text=True,
                             timeout=timeout_s, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 and "<svg" in out.stdout else None


def model_tags(workflow: Workflow, policy: str, step: int | None) -> dict[str, str]:
    """Lineage tags of a logged policy model; the sender adds the run ids when it is sent."""
    return {
        "masdsl.workflow": workflow.name,
        "masdsl.file_hash": workflow.file_hash or "",
        "masdsl.policy": policy,
        "masdsl.roles": ",".join(workflow.roles_of_policy(policy)),
        "masdsl.step": str(int(step or 0)),
    }
