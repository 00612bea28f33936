"""The benchmark's three PNG plots, drawn from its summary (matplotlib, no display needed)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from .specbench import GROUPS, SHORT

if TYPE_CHECKING:
    from matplotlib.axes import Axes

SWEEP_LABEL = re.compile(r"^(?P<method>.+)@d(?P<depth>\d+)$")


def legend(ax: Axes) -> None:
    """The axes' legend, where something drawn on them has a label (a run of plain decoding
    alone has no curve to name: matplotlib would warn on the user's terminal)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)


def write_plots(summary: dict, method_depth: dict[str, int], out: Path,
                title: str) -> list[Path]:
    """speedup_by_group.png, acceptance_by_position.png, speedup_tau_vs_depth.png in `out`.
    method_depth: label -> its depth cap (drafting methods only)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = [out / "speedup_by_group.png", out / "acceptance_by_position.png",
             out / "speedup_tau_vs_depth.png"]
    overall = summary.get("overall", {})

    groups = [g for g in GROUPS if g in summary] + ["overall"]
    methods = [m for m in overall if m != "ar"]
    fig, ax = plt.subplots(figsize=(10, 4.8))
    width = 0.8 / max(1, len(methods))
    for i, m in enumerate(methods):
        values = [summary[g].get(m, {}).get("speedup_vs_ar") or 0.0 for g in groups]
        ax.bar([x + i * width for x in range(len(groups))], values, width, label=m)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xticks([x + width * (len(methods) - 1) / 2 for x in range(len(groups))],
                  [SHORT.get(g, g) for g in groups])
    ax.set_ylabel("speed-up over our plain decoding (×, tokens/s ratio)")
    ax.set_xlabel("Spec-Bench task group")
    ax.set_title(f"Speed-up by task group — {title}", fontsize=10)
    legend(ax)
    fig.tight_layout()
    fig.savefig(paths[0], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for m, acc in overall.items():
        rates = acc.get("acceptance_by_position") or []
        if rates:
            ax.plot(range(1, len(rates) + 1), [100 * r for r in rates], marker="o", label=m)
    ax.set_xlabel("draft position (1 = first drafted token)")
    ax.set_ylabel("drafts reaching this position whose token\nthere was accepted (%)")
    ax.set_ylim(0, 100)
    ax.set_title(f"Acceptance by draft position — {title}", fontsize=10)
    legend(ax)
    fig.tight_layout()
    fig.savefig(paths[1], dpi=110)
    plt.close(fig)

    curves: dict[str, list[tuple[int, float, float]]] = {}
    for label, acc in overall.items():
        match = SWEEP_LABEL.match(label)
        method, depth = ((match["method"], int(match["depth"])) if match
                         else (label, method_depth.get(label)))
        if depth is not None and acc.get("speedup_vs_ar") and acc.get("tau"):
            curves.setdefault(method, []).append((depth, acc["speedup_vs_ar"], acc["tau"]))
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.2))
    for method, points in curves.items():
        points.sort()
        depths = [p[0] for p in points]
        left.plot(depths, [p[1] for p in points], marker="o", label=method)
        right.plot(depths, [p[2] for p in points], marker="o", label=method)
    left.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    left.set_xlabel("depth cap (tokens)")
    left.set_ylabel("speed-up over plain decoding (×)")
    right.set_xlabel("depth cap (tokens)")
    right.set_ylabel("τ (tokens confirmed per target forward)")
    sweep = any(SWEEP_LABEL.match(label) for label in overall)
    fig.suptitle(f"Speed-up and τ against the depth cap — {title}"
                 + ("" if sweep else " (one cap per method: run with --sweep-depth for curves)"),
                 fontsize=10)
    for ax in (left, right):
        legend(ax)
    fig.tight_layout()
    fig.savefig(paths[2], dpi=110)
    plt.close(fig)
    return paths
