"""The numpy tree walk must choose the same leaf as sklearn on the hardest states: exactly on a
split threshold (sklearn sends ``x <= threshold`` left) and just beside one, where comparing the
float64 state instead of its float32 cast (what sklearn compares) picks the other branch."""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.tree import DecisionTreeRegressor

from paperworks.control.tree import TreePolicy
from paperworks.core.io import ArtifactError


def _on_threshold_states(reg, X: np.ndarray, candidates) -> np.ndarray:
    """For every split node: the training rows that reach it, with the split feature replaced by
    each candidate value built from the threshold (they still reach the node: the threshold lies
    between two values that reached it)."""
    t = reg.tree_
    paths = reg.decision_path(X.astype(np.float32)).tocsc()
    out = []
    for node in np.flatnonzero(t.children_left != -1):
        rows = paths[:, node].nonzero()[0][:3]
        for value in candidates(t.threshold[node]):
            S = X[rows].copy()
            S[:, t.feature[node]] = value
            out.append(S)
    return np.concatenate(out)


def test_states_exactly_on_thresholds_go_left_like_sklearn():
    # integer features: every threshold is k + 0.5, exact in float32, so the state sits ON it
    rng = np.random.default_rng(0)
    X = rng.integers(-8, 9, size=(3000, 4)).astype(np.float64)
    y = np.clip(0.4 * X[:, 1] + 0.2 * X[:, 3] - 0.1 * X[:, 0], -3, 3) + rng.normal(scale=0.05, size=len(X))
    reg = DecisionTreeRegressor(max_depth=7, random_state=0).fit(X, y)
    tree = TreePolicy.from_sklearn(reg, kd=None)
    S = _on_threshold_states(reg, X, lambda th: [th])
    assert np.all(np.float32(S) == S)                       # nothing rounded: the ties are real ties
    want = reg.predict(S)
    np.testing.assert_array_equal(tree.batch(S), want)
    np.testing.assert_array_equal([tree(s) for s in S], want)
    # the ties decide something: sending them right would change some predictions
    right = reg.predict(_on_threshold_states(reg, X, lambda th: [np.nextafter(np.float32(th), np.float32(np.inf))]))
    assert np.any(right != want)


def test_float64_states_beside_a_threshold_are_walked_as_float32():
    # continuous features: thresholds are float64 midpoints of float32 values; a float64 state a hair
    # above one can round (in float32, as sklearn compares) to a value at or below it
    rng = np.random.default_rng(1)
    X = rng.normal(scale=[0.5, 0.1, 0.5, 0.5], size=(3000, 4))
    y = np.clip(-20 * X[:, 1] - 3 * X[:, 3], -3, 3)
    reg = DecisionTreeRegressor(max_depth=7, random_state=0).fit(X, y)
    tree = TreePolicy.from_sklearn(reg, kd=None)

    def beside(th):
        return [np.nextafter(th, np.inf), np.nextafter(th, -np.inf), th + 1e-9, th - 1e-9]

    S = _on_threshold_states(reg, X, beside)
    # the test has teeth: for some states float64 and float32 comparisons disagree at their split
    flips = sum(1 for th in reg.tree_.threshold[reg.tree_.children_left != -1] for v in beside(th)
                if (v <= th) != (np.float32(v) <= th))
    assert flips > 0
    want = reg.predict(S)
    np.testing.assert_array_equal(tree.batch(S), want)
    np.testing.assert_array_equal([tree(s) for s in S], want)


def _small_tree_dict():
    X = np.random.default_rng(2).normal(size=(200, 4))
    reg = DecisionTreeRegressor(max_depth=3, random_state=0).fit(X, X[:, 1])
    return TreePolicy.from_sklearn(reg, kd=None).to_dict()


@pytest.mark.parametrize("key,index,value,match", [
    ("children_left", 0, "n", "child index"),          # points past the last node
    ("children_right", 0, "n", "child index"),
    ("children_left", 0, -2, "child index"),           # -1 is the only negative (leaf)
    ("children_right", 0, 0, "child index"),           # a child at or before its parent: a cycle
    ("feature", 0, 4, "feature index"),                # 4 raw state features, no urgency column
])
def test_loading_a_tree_checks_child_and_feature_indices(key, index, value, match):
    d = _small_tree_dict()
    n = len(d["children_left"])
    d[key][index] = n if value == "n" else value
    with pytest.raises(ArtifactError, match=match):
        TreePolicy.from_dict(d, "t.json")


def test_loading_a_tree_rejects_a_half_leaf():
    d = _small_tree_dict()
    leaf = d["children_left"].index(-1)
    d["children_right"][leaf] = 1
    with pytest.raises(ArtifactError, match="leaf"):
        TreePolicy.from_dict(d, "t.json")
