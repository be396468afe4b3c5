"""The progress plot logged at the end of a run: success and reward by role over steps.

Built from the metrics the tracker saw (`history`: metric name -> [(step, value), ...]), so it
needs no round trip to the server and works during an outage.
"""

from __future__ import annotations

import re
from pathlib import Path

History = dict[str, list[tuple[int, float]]]

_REWARD_MEAN = re.compile(r"^reward/(?P<role>[^/]+)/turn(?P<turn>\d+)(?:/mean)?$")


def success_series(history: History) -> dict[str, list[tuple[int, float]]]:
    """`success/<split>` series, keyed by split (a role's `success/train/<role>` is left out).

    >>> success_series({"success/train": [(0, 0.5)], "loss/p": [(0, 1.0)], "success/train/coder": [(0, 1.0)]})
    {'train': [(0, 0.5)]}
    """
    return {k.split("/", 1)[1]: sorted(v) for k, v in history.items() if k.startswith("success/") and k.count("/") == 1}


def reward_by_role(history: History) -> dict[str, list[tuple[int, float]]]:
    """Mean reward of each role per step, averaged over its turns (`reward/<role>/turn<t>`).

    Standard deviations (`.../std`) and other reward metrics are left out.

    >>> h = {"reward/coder/turn0": [(0, 1.0), (1, 3.0)], "reward/coder/turn1": [(0, 0.0)],
    ...      "reward/coder/turn0/std": [(0, 9.0)], "reward/tester/turn0": [(1, 0.5)]}
    >>> reward_by_role(h)
    {'coder': [(0, 0.5), (1, 3.0)], 'tester': [(1, 0.5)]}
    """
    sums: dict[str, dict[int, list[float]]] = {}
    for key, points in history.items():
        m = _REWARD_MEAN.match(key)
        if not m:
            continue
        per_step = sums.setdefault(m["role"], {})
        for step, value in points:
            per_step.setdefault(step, []).append(value)
    return {
        role: [(s, sum(v) / len(v)) for s, v in sorted(per_step.items())]
        for role, per_step in sorted(sums.items())
    }


def plot_progress(history: History, path: Path, title: str = "") -> Path | None:
    """Write a two-panel PNG (success | reward by role); None when there is nothing to draw."""
    success, rewards = success_series(history), reward_by_role(history)
    if not success and not rewards:
        return None
    import matplotlib  # heavy, optional: matplotlib (masdsl[train]), only when there is a plot

    matplotlib.use("Agg", force=True)  # before pyplot: draw to files, never to a display
    import matplotlib.pyplot as plt  # heavy, optional: after choosing the backend above

    fig, (ax_s, ax_r) = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    try:
        for name, series in [(f"success/{k}", v) for k, v in success.items()]:
            ax_s.plot(*zip(*series), marker="o", label=name)
        ax_s.set(title="success", xlabel="step", ylabel="success rate", ylim=(-0.05, 1.05))
        for role, series in rewards.items():
            ax_r.plot(*zip(*series), marker="o", label=role)
        ax_r.set(title="reward by role (mean over turns)", xlabel="step", ylabel="reward")
        from matplotlib.ticker import MaxNLocator  # heavy, optional: as above

        for ax in (ax_s, ax_r):
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(loc="best", fontsize="small")
        if title:
            fig.suptitle(title)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)
    return path


def plot_arms(series: dict[str, list[tuple[int, float]]], path: Path, metric: str) -> Path | None:
    """One line per arm of a sweep (`arm -> [(step, mean over seeds)]`) for one metric; a PNG,
    or None when there is nothing to draw."""
    if not any(series.values()):
        return None
    import matplotlib  # heavy, optional: matplotlib (masdsl[train]), only when there is a plot

    matplotlib.use("Agg", force=True)  # before pyplot: draw to files, never to a display
    import matplotlib.pyplot as plt  # heavy, optional: after choosing the backend above
    from matplotlib.ticker import MaxNLocator  # heavy, optional: as above

    fig, ax = plt.subplots(figsize=(7, 4), constrained_layout=True)
    try:
        for arm, points in series.items():
            if points:
                ax.plot(*zip(*points), marker="o", label=arm)
        ax.set(title=f"{metric} (mean over seeds)", xlabel="step", ylabel=metric)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize="small")
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)
    return path
