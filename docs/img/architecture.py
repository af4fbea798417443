"""Draw docs/img/architecture.svg from the code: the rings, their packages, the imports between.

Run `python docs/img/architecture.py` after moving modules; the picture is the import graph
that `tests/redteam/test_architecture.py` checks (`gemkit.testing.imports`), so it cannot
drift from the code without that test or this script showing it.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

from gemkit.testing.imports import RINGS, build_graph, ring

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).with_name("architecture.svg")

TITLES = {
    "core": "gemkit (core)\nthe contract, registry,\ntools, LLM, rollout, records",
    "envs": "gemkit.envs\nenv families; each registers\nits ids (entry points)",
    "synth": "gemkit.synth\nsynthesis; registers the ids\nplayed on its records",
    "cli": "gemkit.cli\nthe command line\n(the only outer ring)",
}
COLORS = {"core": "#dbe9f6", "envs": "#e3f3df", "synth": "#fbeed7", "cli": "#eeeeee"}


def package(module: str) -> str:
    """The package a module is drawn in: `gemkit.tools`, `gemkit.envs.games`, ..."""
    parts = module.split(".")
    depth = 2 if ring(module) == "core" else 3
    name = ".".join(parts[:depth])
    return "gemkit.cli" if ring(module) == "cli" else name


def main() -> int:
    """Build the graph, then draw one column per ring and one arrow per ring-to-ring edge."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("this script draws with matplotlib: pip install matplotlib", file=sys.stderr)
        return 1
    graph = build_graph(ROOT)
    packages: dict[str, set[str]] = {r: set() for r in RINGS}
    for module in graph.modules:
        packages[ring(module)].add(package(module))
    edges = Counter(
        (ring(e.source), ring(e.target))
        for e in graph.edges
        if e.kind != "typing" and ring(e.source) != ring(e.target)
    )
    plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "gemkit", "font.size": 9})
    fig, ax = plt.subplots(figsize=(11, 6.4))
    ax.set_xlim(0, 4)
    ax.set_ylim(0, 1)
    ax.axis("off")
    x = {r: i + 0.5 for i, r in enumerate(RINGS)}
    roots = {"gemkit", "gemkit.envs", "gemkit.synth", "gemkit.cli"}
    for r in RINGS:
        names = sorted(p.rpartition(".")[2] for p in packages[r] if p not in roots)
        ax.add_patch(
            plt.Rectangle(
                (x[r] - 0.45, 0.06), 0.9, 0.68, facecolor=COLORS[r], edgecolor="#555", lw=1
            )
        )
        ax.text(x[r], 0.71, TITLES[r], ha="center", va="top", weight="bold", fontsize=9)
        if r == "cli":
            names = ["one module per subcommand"]
        half = (len(names) + 1) // 2 if len(names) > 12 else len(names)
        columns = [names[:half], names[half:]] if half < len(names) else [names]
        for i, col in enumerate(columns):
            dx = 0 if len(columns) == 1 else (-0.2 if i == 0 else 0.2)
            ax.text(x[r] + dx, 0.58, "\n".join(col), ha="center", va="top", fontsize=7.5,
                    linespacing=1.3)  # fmt: skip
    # arrows run from the importer to the imported: always right to left
    rows = {("envs", "core"): 0.93, ("synth", "envs"): 0.93, ("synth", "core"): 0.86,
            ("cli", "synth"): 0.93, ("cli", "envs"): 0.86, ("cli", "core"): 0.79}  # fmt: skip
    for (src, dst), count in sorted(edges.items()):
        y = rows.get((src, dst), 0.97)
        ax.annotate(
            "",
            xy=(x[dst] + 0.05, y),
            xytext=(x[src] - 0.05, y),
            arrowprops={"arrowstyle": "->", "color": "#333", "lw": 1.2},
        )
        ax.text((x[src] + x[dst]) / 2, y + 0.012, f"{src} imports {dst}: {count}", ha="center",
                fontsize=7.5)  # fmt: skip
    ax.text(
        2,
        0.01,
        "Every import points left (core <- envs <- synth <- cli); "
        f"{len(graph.modules)} modules, {len(graph.edges)} imports, no cycle "
        "(tests/redteam/test_architecture.py).",
        ha="center",
        fontsize=8,
        style="italic",
    )
    fig.savefig(OUT, format="svg", bbox_inches="tight", metadata={"Date": None})
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
