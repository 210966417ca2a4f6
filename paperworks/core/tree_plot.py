"""Readable pictures of binary decision trees (sklearn-style arrays), for any track.

A depth-7 tree drawn top-down with one column per leaf was 6,667 px wide with 5-px text. Here:

1. splits whose two sides predict the same value are merged (the function is unchanged;
   bang-bang controllers saturate, so many leaves repeat ±max torque);
2. the tree is laid out left to right (depth across, leaves down), so long split labels sit on
   one line and the picture grows in the direction a page scrolls;
3. past ``max_leaves`` drawn leaves, the deepest levels are folded into one box per subtree
   ("k leaves, values a … b"); the full tree stays in the track's text rules.

Text is 9 pt at 100 dpi (12.5 px) whatever the tree's size.

    from paperworks.core.tree_plot import draw_tree
    draw_tree(left, right, feature, threshold, value, feature_names, path, title="…")
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

FONT_PT = 9.0
DPI = 100
LEAF_ROW_IN = 0.32    # vertical space per drawn leaf
LEVEL_COL_IN = 2.3    # horizontal space per depth level


@dataclass(frozen=True)
class Tree:
    """Children -1 mark a leaf; ``value`` is read at leaves only."""

    left: np.ndarray
    right: np.ndarray
    feature: np.ndarray
    threshold: np.ndarray
    value: np.ndarray

    def predict(self, X: np.ndarray) -> np.ndarray:
        out = np.empty(len(X))
        for i, x in enumerate(X):
            node = 0
            while self.left[node] != -1:
                node = self.left[node] if x[self.feature[node]] <= self.threshold[node] else self.right[node]
            out[i] = self.value[node]
        return out


def merge_equal_leaves(tree: Tree) -> tuple[Tree, int]:
    """The same function with every split whose sides predict one value turned into a leaf;
    returns the tree and how many splits were merged."""
    left, right = tree.left.copy(), tree.right.copy()
    value = tree.value.astype(float).copy()
    merged = 0

    def fold(node: int) -> float | None:
        """The single value the subtree predicts, or None when it predicts several."""
        nonlocal merged
        if left[node] == -1:
            return float(value[node])
        a, b = fold(int(left[node])), fold(int(right[node]))
        if a is not None and a == b:
            left[node] = right[node] = -1
            value[node] = a
            merged += 1
            return a
        return None

    fold(0)
    return Tree(left, right, tree.feature, tree.threshold, value), merged


def _subtree(tree: Tree, node: int) -> tuple[int, float, float]:
    """(leaves, min value, max value) below ``node``."""
    if tree.left[node] == -1:
        return 1, float(tree.value[node]), float(tree.value[node])
    a, b = _subtree(tree, int(tree.left[node])), _subtree(tree, int(tree.right[node]))
    return a[0] + b[0], min(a[1], b[1]), max(a[2], b[2])


def _drawn_leaves(tree: Tree, node: int, depth: int, limit: int) -> int:
    if tree.left[node] == -1 or depth >= limit:
        return 1
    return _drawn_leaves(tree, int(tree.left[node]), depth + 1, limit) + _drawn_leaves(tree, int(tree.right[node]), depth + 1, limit)


def draw_tree(left: Sequence[int], right: Sequence[int], feature: Sequence[int], threshold: Sequence[float],
              value: Sequence[float], feature_names: Sequence[str], path: Path | str, title: str = "",
              max_leaves: int = 48, value_format: str = "{:+.2f}") -> dict:
    """Draw the tree to a PNG at ``path``; return what was drawn (sizes, merged and folded parts)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    full = Tree(*(np.asarray(a) for a in (left, right, feature, threshold, value)))
    tree, merged = merge_equal_leaves(full)
    depth_limit = 64
    while depth_limit > 1 and _drawn_leaves(tree, 0, 0, depth_limit) > max_leaves:
        depth_limit -= 1
    pos: dict[int, tuple[int, float]] = {}
    folded: list[int] = []
    row = [0]

    def place(node: int, depth: int) -> float:
        if tree.left[node] == -1 or depth >= depth_limit:
            y = float(row[0])
            row[0] += 1
            if tree.left[node] != -1:
                folded.append(node)
        else:
            y = (place(int(tree.left[node]), depth + 1) + place(int(tree.right[node]), depth + 1)) / 2
        pos[node] = (depth, y)
        return y

    place(0, 0)
    n_rows, n_levels = row[0], max(d for d, _ in pos.values()) + 1
    lo, hi = float(np.min(tree.value[tree.left == -1])), float(np.max(tree.value[tree.left == -1]))
    span = (hi - lo) or 1.0
    fig_w, fig_h = max(6.0, n_levels * LEVEL_COL_IN + 1.5), max(3.0, n_rows * LEAF_ROW_IN + 1.0)
    fig, ax = plt.subplots(figsize=(fig_w, fig_h))
    for node, (d, y) in pos.items():
        if node in folded or tree.left[node] == -1:
            continue
        for child in (int(tree.left[node]), int(tree.right[node])):
            cd, cy = pos[child]
            ax.plot([d, cd], [-y, -cy], "-", color="0.65", lw=0.8, zorder=1)
    for node, (d, y) in pos.items():
        if node in folded:
            k, a, b = _subtree(tree, node)
            text, colour = f"{k} leaves: {value_format.format(a)} … {value_format.format(b)}", "0.92"
        elif tree.left[node] == -1:
            v = float(tree.value[node])
            text, colour = value_format.format(v), plt.cm.coolwarm((v - lo) / span)
        else:
            text, colour = f"{feature_names[int(tree.feature[node])]} ≤ {tree.threshold[node]:.3g}", "white"
        ax.text(d, -y, text, ha="center", va="center", fontsize=FONT_PT, zorder=2,
                bbox={"boxstyle": "round,pad=0.25", "fc": colour, "ec": "0.4", "lw": 0.6})
    ax.set_xlim(-0.6, n_levels - 0.4)
    ax.set_ylim(-(n_rows - 0.5), 0.5)
    ax.set_axis_off()
    note = [f"{merged} splits with equal sides merged" if merged else "",
            f"{len(folded)} subtrees below depth {depth_limit} folded" if folded else ""]
    ax.set_title("\n".join(x for x in [title, "; ".join(n for n in note if n)] if x), fontsize=FONT_PT + 1, loc="left")
    fig.tight_layout()
    fig.savefig(path, dpi=DPI, format="png")
    plt.close(fig)
    return {"width_px": round(fig_w * DPI), "height_px": round(fig_h * DPI), "font_px": FONT_PT * DPI / 72,
            "leaves_drawn": n_rows, "merged_splits": merged, "folded_subtrees": len(folded), "depth_drawn": depth_limit}
