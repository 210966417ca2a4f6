"""Readable tree pictures (issue 22, item 8): control's depth-7 tree was 6,667 × 728 px with 5-px text."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

from paperworks.core.tree_plot import Tree, draw_tree, merge_equal_leaves


def fitted(target: str, depth: int = 7) -> tuple[Tree, np.ndarray]:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(4000, 5))
    urgency = X[:, 1] + 0.1 * X[:, 3]
    if target == "bang-bang":  # a torque class per leaf, as a distilled controller gives: many leaves repeat one
        y = 3.0 * np.sign(urgency + 0.7 * rng.normal(size=len(X)))
        clf = DecisionTreeClassifier(max_depth=depth, random_state=0).fit(X, y)
        t = clf.tree_
        return Tree(t.children_left, t.children_right, t.feature, t.threshold, clf.classes_[t.value[:, 0].argmax(1)]), X
    y = np.tanh(urgency) + 0.3 * X[:, 0]
    t = DecisionTreeRegressor(max_depth=depth, random_state=0).fit(X, y).tree_
    return Tree(t.children_left, t.children_right, t.feature, t.threshold, t.value[:, 0, 0]), X


def test_merging_equal_sides_keeps_the_function() -> None:
    for target in ("bang-bang", "smooth"):
        tree, X = fitted(target)
        merged, n = merge_equal_leaves(tree)
        assert np.array_equal(merged.predict(X), tree.predict(X))
        probe = np.random.default_rng(1).normal(scale=3, size=(2000, 5))
        assert np.array_equal(merged.predict(probe), tree.predict(probe))
        assert (n > 0) == (target == "bang-bang")


def test_a_depth_7_tree_is_drawn_at_a_readable_size(tmp_path: Path) -> None:
    names = ["x", "x_dot", "theta", "theta_dot", "urgency"]
    for target in ("bang-bang", "smooth"):
        tree, _ = fitted(target)
        assert int((tree.left == -1).sum()) > 60  # as many leaves as control's headline tree
        out = tmp_path / f"{target}.png"
        drawn = draw_tree(tree.left, tree.right, tree.feature, tree.threshold, tree.value, names, out, title=target)
        w, h = Image.open(out).size
        assert (w, h) == (drawn["width_px"], drawn["height_px"])
        assert w <= 2000 and h <= 2000, (w, h)
        assert drawn["font_px"] >= 12
        assert drawn["leaves_drawn"] <= 48
    assert drawn["folded_subtrees"] > 0  # the smooth tree keeps > 48 distinct leaves: deep levels folded
