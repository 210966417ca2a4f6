"""Beyond the paper: the degradation transform, calibration / abstention helpers and the per-unit tables."""
import numpy as np
import pandas as pd
import pytest
import torch

from paperworks.encoder_fusion.params import DegradeParams
from paperworks.encoder_fusion.reliability import (abstention_threshold, calibrate, check_tokens_match, confidence, degrade,
                                                   selective_curve)


def _images(n=3, s=16, seed=0):
    grey = np.random.default_rng(seed).integers(40, 200, size=(n, s, s, 1), dtype=np.uint8)
    return np.repeat(grey, 3, axis=3)  # the world's images are grey in every channel


def test_degrade_is_seeded_shape_preserving_and_applies_each_part():
    x = _images()
    p = DegradeParams(blur=0.5, gain=0.9, offset=8, noise=6)
    a, b, c = degrade(x, p, 1), degrade(x, p, 1), degrade(x, p, 2)
    assert a.dtype == np.uint8 and a.shape == x.shape
    assert (a == b).all() and not (a == c).all()
    assert (a[..., 0] == a[..., 1]).all()  # grey images stay grey
    drift = degrade(x, DegradeParams(blur=0, gain=0.5, offset=10, noise=0), 1)
    assert (drift.astype(int) == np.clip(np.rint(0.5 * x.astype(float) + 10), 0, 255).astype(int)).all()
    yy, xx = np.mgrid[0:16, 0:16]
    for pattern in ((yy + xx) % 2, yy % 2, xx % 2):  # a pixel checkerboard (a small lesion), then stripes each way
        board = np.repeat(np.where(pattern == 0, 160, 80).astype(np.uint8)[None, :, :, None], 3, axis=3)
        blurred = degrade(board, DegradeParams(blur=0.8, gain=1, offset=0, noise=0), 1)
        assert np.ptp(blurred[0, 4:12, 4:12, 0]) < 0.5 * np.ptp(board)  # fades: the blur acts along both image axes
    with pytest.raises(ValueError, match="uint8"):
        degrade(x.astype(np.float32), p, 1)


def test_abstention_threshold_answers_at_most_the_target_share():
    rng = np.random.default_rng(0)
    conf = rng.uniform(0.3, 1.0, 200)
    correct = rng.uniform(size=200) < conf
    tau = abstention_threshold(conf, correct, 0.9)
    assert (conf >= tau).mean() == pytest.approx(0.9, abs=0.006) and (conf >= tau).mean() <= 0.9
    assert abstention_threshold(conf, correct, 1.0) == float("-inf")


def test_selective_curve_by_hand_and_calibration_helpers():
    conf = np.array([0.9, 0.8, 0.7, 0.6])
    correct = np.array([1, 1, 0, 1])
    curve = selective_curve(conf, correct, np.array([0.5, 0.75, 1.0]))
    assert curve["answered"].tolist() == [2, 3, 4] and curve["accuracy"].tolist() == pytest.approx([1.0, 2 / 3, 0.75])
    logits = np.array([[4.0, 0.0], [0.0, 4.0]])
    assert confidence(logits, 1.0) == pytest.approx(1 / (1 + np.exp(-4)))
    assert confidence(logits, 1e6) == pytest.approx(0.5, abs=1e-5)
    # over-confident logits (right 70 % of the time at confidence ≈ 1): the fitted temperature softens them
    y = (np.random.default_rng(1).uniform(size=400) < 0.7).astype(int)
    z = np.stack([np.zeros(400), np.full(400, 8.0)], 1)
    assert calibrate(z, y) > 3


def test_token_check_names_the_encoder():
    t = torch.randn(4, 9, 8)
    assert check_tokens_match(t, t.clone(), "xray") == 0.0
    with pytest.raises(ValueError, match="xray: re-encoding"):
        check_tokens_match(t, t + 1e-2, "xray")
    with pytest.raises(ValueError, match="xray: cached tokens"):
        check_tokens_match(t, t[:2], "xray")


def _rel(fusions=("foundation", "cascade")):
    rows = []
    for fusion in fusions:
        for seed in (0, 1):
            for k in range(4):
                for split, correct in (("test", k % 2), ("test_degraded", 0), ("dev", 1)):
                    rows.append({"fusion": fusion, "seed": seed, "split": split, "key": f"q{k}", "modality": "xray", "small": k == 0,
                                 "answer": 1, "pred": 1, "correct": float(correct), "confidence_raw": 0.9, "confidence": 0.5 + 0.1 * k,
                                 "answered": k >= 1})
    return pd.DataFrame(rows)


def test_reliability_units_answered_arm_and_drop():
    from paperworks.core.profile import compose
    from paperworks.encoder_fusion import report
    from paperworks.encoder_fusion.params import Params
    from tests.encoder_fusion.test_params import CONF

    p = Params(**compose("smoke", CONF)["encoder_fusion"])
    units = report.reliability_units(_rel(), p)
    sel = units["selective_accuracy"]
    assert set(sel["arm"]) == {"foundation_answered", "foundation_all", "cascade_answered", "cascade_all"}
    assert sorted(sel[(sel["arm"] == "cascade_answered") & (sel["cluster"] == "0")]["unit"]) == ["q1", "q2", "q3"]
    assert sel[sel["arm"] == "cascade_all"]["value"].mean() == 0.5
    drop = units["degradation_drop"]
    assert drop.set_index(["arm", "cluster", "unit"])["value"].to_dict()[("cascade", "1", "q1")] == 1.0  # right clean, wrong degraded
    assert drop[drop["unit"] == "q0"]["value"].eq(0).all()
    # a fusion no claim reads (here `parallel`) stays out of the unit tables (its numbers are in the plot tables)
    with_parallel = report.reliability_units(_rel(("foundation", "parallel", "cascade")), p)
    assert set(with_parallel["selective_accuracy"]["arm"]) == set(sel["arm"]) and set(with_parallel["degradation_drop"]["arm"]) == {"foundation", "cascade"}
    bad = _rel()
    bad = bad.drop(bad[(bad["split"] == "test_degraded") & (bad["key"] == "q3")].index[0])
    with pytest.raises(ValueError, match="degraded predictions do not cover"):
        report.reliability_units(bad, p)
    ids = {s.id for s in report.reliability_claim_specs(p)}
    assert ids == {"abstention_raises_accuracy_foundation", "abstention_raises_accuracy_cascade", "selective_cascade_vs_foundation",
                   "degradation_cascade_vs_foundation"}
    tables = report.reliability_plot_tables(_rel(), p)
    assert set(tables) == {"reliability.csv", "selective_accuracy.csv", "degradation.csv"}
    assert tables["degradation.csv"]["drop"].between(0, 1).all()
    assert tables["reliability.csv"].groupby(["fusion", "confidence_kind"])["count"].sum().eq(8).all()
