"""Unit tests: Pole Urgency feature, tree export/predictor, quantization error, chattering measures."""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.tree import DecisionTreeRegressor

from paperworks.control.measures import (distinct_values, error_summary, quantization_error, sign_switches,
                                         steady_state_amplitude, switches_per_second)
from paperworks.control.tree import TreePolicy, feature_names, pole_urgency, tree_features
from paperworks.core.io import ArtifactError


def test_pole_urgency_is_theta_plus_kd_theta_dot():
    obs = np.array([[0.5, 0.1, -2.0, 0.4], [0.0, -0.05, 1.0, 0.2]])
    np.testing.assert_allclose(pole_urgency(obs, 0.3), [0.1 + 0.3 * 0.4, -0.05 + 0.3 * 0.2])
    np.testing.assert_allclose(pole_urgency(obs, 0.0), obs[:, 1])  # Kd = 0 is the angle alone


def test_tree_features_append_urgency_only_when_asked():
    obs = np.arange(8.0).reshape(2, 4)
    assert tree_features(obs, None).shape == (2, 4)
    f = tree_features(obs, 0.5)
    assert f.shape == (2, 5)
    np.testing.assert_allclose(f[:, 4], obs[:, 1] + 0.5 * obs[:, 3])
    assert tree_features(obs[0], 0.5).shape == (1, 5)  # a single state works too
    assert feature_names(0.5)[-1].startswith("urgency") and len(feature_names(None)) == 4


def _fitted(kd=0.3, depth=6, n=2000, seed=0):
    rng = np.random.default_rng(seed)
    S = rng.normal(scale=[0.5, 0.1, 0.5, 0.5], size=(n, 4))
    y = np.clip(-20 * S[:, 1] - 3 * S[:, 3], -3, 3)
    reg = DecisionTreeRegressor(max_depth=depth, random_state=0).fit(tree_features(S, kd), y)
    return reg, TreePolicy.from_sklearn(reg, kd), rng


@pytest.mark.parametrize("kd", [None, 0.3])
def test_numpy_tree_predicts_exactly_like_sklearn(kd):
    reg, tree, rng = _fitted(kd)
    X = rng.normal(scale=[0.5, 0.1, 0.5, 0.5], size=(500, 4))
    want = reg.predict(tree_features(X, kd))
    np.testing.assert_array_equal(tree.batch(X), want)
    assert tree(X[0]) == want[0]


def test_tree_json_round_trip_and_rules(tmp_path):
    _, tree, rng = _fitted()
    tree.save(tmp_path / "t.json")
    back = TreePolicy.load(tmp_path / "t.json")
    X = rng.normal(size=(50, 4)) * 0.1
    np.testing.assert_array_equal(back.batch(X), tree.batch(X))
    rules = tree.rules()
    assert rules.startswith("IF ") and rules.count("torque =") == tree.n_leaves


def test_corrupt_tree_is_an_artifact_error(tmp_path):
    _, tree, _ = _fitted()
    d = tree.to_dict()
    d["value"] = d["value"][:-1]
    with pytest.raises(ArtifactError, match="differ in length"):
        TreePolicy.from_dict(d)
    del d["feature"]
    with pytest.raises(ArtifactError, match="misses"):
        TreePolicy.from_dict(d)


def test_quantization_error_is_teacher_minus_student():
    eq = quantization_error([1.0, -2.0, 0.5], [0.75, -3.0, 0.5])
    np.testing.assert_allclose(eq, [0.25, 1.0, 0.0])
    s = error_summary(eq)
    assert s["mean_abs"] == pytest.approx(1.25 / 3) and s["max_abs"] == 1.0
    assert s["rms"] == pytest.approx(np.sqrt((0.0625 + 1.0) / 3))
    with pytest.raises(ValueError):
        quantization_error([1.0], [1.0, 2.0])


def test_chattering_counts_sign_flips_and_deadband_ignores_small_ones():
    bang = np.array([3.0, -3.0, 3.0, -3.0, 3.0])            # 4 flips
    assert sign_switches(bang) == 4
    jitter = np.array([2.0, 0.05, -0.05, 0.05, 2.0, -2.0])    # 3 flips, 2 of them inside a 0.1 dead-band
    assert sign_switches(jitter) == 3
    assert sign_switches(jitter, deadband=0.1) == 1
    assert switches_per_second(bang, dt=0.04) == pytest.approx(4 / (5 * 0.04))
    assert switches_per_second(np.array([1.0]), dt=0.04) == 0.0
    assert sign_switches(np.zeros(10)) == 0


def test_steady_state_amplitude_and_distinct_torques():
    theta = np.concatenate([np.full(10, 0.2), 0.01 * np.sin(np.linspace(0, 20, 200))])
    assert steady_state_amplitude(theta, 10) == pytest.approx(0.01, abs=1e-4)
    assert np.isnan(steady_state_amplitude(theta, 1000))
    assert distinct_values(np.array([3.0, -3.0, 3.0, 1.2, 1.2000000001])) == 3
