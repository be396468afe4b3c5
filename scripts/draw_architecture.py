"""Draw docs/img/architecture.png: the import graph between masdsl's packages, one row per layer.

    .venv/bin/python scripts/draw_architecture.py [--out docs/img/architecture.png]

An arrow A -> B means "a module of A imports from B"; its label counts the module pairs. The
graph is read from the source (`masdsl.testing.layout.import_graph`), so the picture is the code.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import networkx as nx  # noqa: E402

from masdsl.testing.layout import LAYERS, ROOT, import_graph, layer_of, package_of  # noqa: E402


def package_graph() -> nx.DiGraph:
    counts = Counter((package_of(a), package_of(b)) for a, b in import_graph().edges
                     if package_of(a) != package_of(b))
    graph = nx.DiGraph()
    for (a, b), n in counts.items():
        graph.add_edge(a, b, weight=n)
    return graph


def positions(graph: nx.DiGraph) -> dict[str, tuple[float, float]]:
    rows: dict[int, list[str]] = {}
    for node in sorted(graph.nodes):
        rows.setdefault(layer_of(node), []).append(node)
    pos = {}
    for layer, nodes in rows.items():
        shift = 1.6 * (-1) ** layer if len(nodes) == 1 else 0.0  # zig-zag: arrows between neighbours stay visible
        for i, node in enumerate(nodes):
            pos[node] = (shift + 2.2 * (i - (len(nodes) - 1) / 2), 1.4 * layer)
    return pos


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "docs" / "img" / "architecture.png"))
    args = ap.parse_args()
    graph = package_graph()
    pos = positions(graph)
    fig, ax = plt.subplots(figsize=(10, 12))
    nx.draw_networkx_nodes(graph, pos, ax=ax, node_size=3200, node_color="#dde8f5", edgecolors="#4a6fa5")
    nx.draw_networkx_labels(graph, pos, ax=ax, labels={n: n.removeprefix("masdsl.") for n in graph}, font_size=9)
    nx.draw_networkx_edges(graph, pos, ax=ax, node_size=3200, arrowsize=14, edge_color="#777777",
                           connectionstyle="arc3,rad=0.12")
    nx.draw_networkx_edge_labels(graph, pos, ax=ax, font_size=7,
                                 edge_labels={(a, b): d["weight"] for a, b, d in graph.edges(data=True)})
    ax.set_title("masdsl: imports between packages (top: entry points, bottom: errors and config)")
    ax.axis("off")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110, bbox_inches="tight")
    print(f"wrote {args.out}: {graph.number_of_nodes()} packages, {graph.number_of_edges()} arrows")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
