"""The evidence standard: clustered intervals, claim kinds, preconditions, Holm, records.

Several tests are written to fail under specific small bugs (named in each docstring), so a
plausible mistake in the core cannot pass silently.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from statsmodels.stats.weightstats import ttost_ind, ttost_paired

from paperworks.core import stats
from paperworks.core.io import as_json
from paperworks.core.claims import (
    ClaimSpec, EvidenceParams, adjust_and_decide, convergence, evaluate_claims, precondition, recompute,
    record_problems, unit_table, verdict, write_unit_tables,
)

EV = EvidenceParams()


def nested(rng, n_clusters: int, n_units: int, effect: float = 0.0, sd_cluster: float = 1.0, sd_unit: float = 1.0):
    """Paired nested data: a per-cluster training effect shared by every unit of the cluster."""
    shift = rng.normal(effect, sd_cluster, n_clusters)
    return [shift[c] + rng.normal(0, sd_unit, n_units) for c in range(n_clusters)]


# ------------------------------------------------------------------ intervals


def test_two_level_bootstrap_covers_zero_at_nominal_rate_and_naive_does_not() -> None:
    """Simulation: true difference 0, 40 clusters × 20 units with a cluster effect.

    The two-level interval covers 0 in 93–97 % of 1,000 repetitions; the naive interval over
    pooled units (what the landed protocol_distill claims did) covers far less often.
    """
    rng = np.random.default_rng(12345)
    reps, cover_two, cover_naive = 1000, 0, 0
    for r in range(reps):
        diffs = nested(rng, 40, 20)
        t = stats.compare_clustered(diffs, [np.zeros_like(d) for d in diffs], paired=True, n_boot=400, seed=r)
        cover_two += t.ci_low <= 0 <= t.ci_high
        pooled = np.concatenate(diffs)
        boot = pooled[rng.integers(0, len(pooled), size=(400, len(pooled)))].mean(axis=1)
        lo, hi = np.quantile(boot, [0.025, 0.975])
        cover_naive += lo <= 0 <= hi
    assert 0.93 <= cover_two / reps <= 0.97, cover_two / reps
    assert cover_naive / reps < 0.7, cover_naive / reps


def test_cluster_interval_is_wider_than_the_naive_unit_interval() -> None:
    rng = np.random.default_rng(3)
    diffs = nested(rng, 5, 100, effect=0.3)
    clustered = stats.compare_clustered(diffs, [np.zeros_like(d) for d in diffs], paired=True)
    pooled = np.concatenate(diffs)
    naive_half = sps.t.ppf(0.975, len(pooled) - 1) * pooled.std(ddof=1) / np.sqrt(len(pooled))
    assert clustered.method == "paired t on cluster means"
    assert (clustered.ci_high - clustered.ci_low) > 3 * 2 * naive_half


def test_paired_t_on_cluster_means_matches_a_hand_computation() -> None:
    a = [np.array([0.31, 0.33]), np.array([0.32]), np.array([0.312, 0.30, 0.33])]
    b = [np.array([0.30, 0.30]), np.array([0.30]), np.array([0.31, 0.29, 0.30])]
    t = stats.compare_clustered(a, b, paired=True)
    d = np.array([x.mean() - y.mean() for x, y in zip(a, b)])
    half = sps.t.ppf(0.975, 2) * d.std(ddof=1) / np.sqrt(3)
    assert (t.diff, t.ci_low, t.ci_high) == pytest.approx((d.mean(), d.mean() - half, d.mean() + half))
    assert t.p_superiority == pytest.approx(sps.ttest_1samp(d, 0).pvalue)


def test_welch_uses_welch_satterthwaite_degrees_of_freedom() -> None:
    """Kills: Welch interval with pooled degrees of freedom (n_a + n_b − 2)."""
    a = [np.array([v]) for v in (1.0, 9.0, 2.0, 8.0, 5.0, 11.0)]
    b = [np.array([v]) for v in (0.0, 0.1, 0.2)]
    t = stats.compare_clustered(a, b, paired=False)
    xa, xb = np.array([1.0, 9.0, 2.0, 8.0, 5.0, 11.0]), np.array([0.0, 0.1, 0.2])
    va, vb = xa.var(ddof=1) / 6, xb.var(ddof=1) / 3
    dof = (va + vb) ** 2 / (va**2 / 5 + vb**2 / 2)
    half = sps.t.ppf(0.975, dof) * np.sqrt(va + vb)
    assert t.ci_high - t.diff == pytest.approx(half)
    assert t.ci_high - t.diff != pytest.approx(sps.t.ppf(0.975, 7) * np.sqrt(va + vb))
    assert t.p_superiority == pytest.approx(sps.ttest_ind(xa, xb, equal_var=False).pvalue)


def test_paired_bootstrap_resamples_pairs_together() -> None:
    """Kills: the paired bootstrap resampling method and baseline independently.

    Method = baseline + 0.05 with large shared unit noise: paired, the difference is exact.
    """
    rng = np.random.default_rng(0)
    base = [rng.normal(0, 1, 10) for _ in range(40)]
    meth = [b + 0.05 for b in base]
    t = stats.compare_clustered(meth, base, paired=True, n_boot=500, seed=1)
    assert t.ci_low == pytest.approx(0.05) and t.ci_high == pytest.approx(0.05)
    unpaired = stats.compare_clustered(meth, base, paired=False, n_boot=500, seed=1)
    assert unpaired.ci_low < 0 < unpaired.ci_high


def test_small_sample_switch_is_at_30_clusters() -> None:
    """Kills: the small-sample switch off by one (29 clusters → t; 30 → bootstrap)."""
    rng = np.random.default_rng(1)
    for n, expect in ((29, "paired t on cluster means"), (30, "two-level paired bootstrap")):
        a = [rng.normal(0, 1, 3) for _ in range(n)]
        t = stats.compare_clustered(a, [np.zeros(3)] * n, paired=True, n_boot=300)
        assert t.method.startswith(expect), (n, t.method)


def test_tost_matches_statsmodels_paired_and_welch() -> None:
    rng = np.random.default_rng(7)
    a, b = rng.normal(0.50, 0.05, 8), rng.normal(0.49, 0.05, 8)
    t = stats.compare_clustered([np.array([x]) for x in a], [np.array([x]) for x in b], paired=True, margin=0.1)
    assert t.p_equivalence == pytest.approx(ttost_paired(a, b, -0.1, 0.1)[0])
    c = rng.normal(0.49, 0.08, 11)
    u = stats.compare_clustered([np.array([x]) for x in a], [np.array([x]) for x in c], paired=False, margin=0.1)
    assert u.p_equivalence == pytest.approx(ttost_ind(a, c, -0.1, 0.1, usevar="unequal")[0])
    # non-inferiority is the lower one-sided test of TOST
    assert t.p_noninferiority == pytest.approx(ttost_paired(a, b, -0.1, 0.1)[1][1])


def test_mean_ci_and_wilson() -> None:
    r = stats.mean_ci([1.0, 2.0, 3.0])
    assert r["mean"] == 2.0 and round(r["ci_high"] - 2.0, 3) == round(4.303 * 1.0 / np.sqrt(3), 3)
    lo, hi = stats.wilson_interval(20, 20)
    assert hi == pytest.approx(1.0) and 0.8 < lo < 0.85
    assert stats.wilson_interval(0, 10)[0] == pytest.approx(0.0)


# ------------------------------------------------------------------ verdicts


def test_verdict_needs_strict_significance() -> None:
    """Kills: significance at p <= alpha (an interval touching 0 is not a result)."""
    assert verdict("superiority", 0.05, 0.1, 0.0, 0.2, None, True, 0.05) == "unresolved"
    assert verdict("superiority", 0.0499, 0.1, 0.001, 0.2, None, True, 0.05) == "method better"


def test_verdict_respects_direction() -> None:
    """Kills: verdict ignoring higher_is_better (a lower loss is the method being better)."""
    assert verdict("superiority", 0.001, -0.2, -0.3, -0.1, None, False, 0.05) == "method better"
    assert verdict("superiority", 0.001, -0.2, -0.3, -0.1, None, True, 0.05) == "baseline better"
    assert verdict("non_inferiority", 0.5, 0.3, 0.2, 0.4, 0.1, False, 0.05) == "inferior beyond the margin (0.1)"


def test_as_well_as_is_never_superiority() -> None:
    """A method level with its baseline: superiority says unresolved, equivalence says equivalent."""
    rng = np.random.default_rng(2)
    rows = []
    for seed in range(12):
        base = rng.normal(0.8, 0.02)
        for q in range(5):
            v = base + rng.normal(0, 0.01)
            rows += [{"arm": "tree", "cluster": seed, "unit": q, "value": v + rng.normal(0, 0.002)},
                     {"arm": "teacher", "cluster": seed, "unit": q, "value": v}]
    table = unit_table(rows)
    common = dict(table="t", metric="acc", method="tree", baseline="teacher", unit="episode", cluster="seed")
    specs = [ClaimSpec(id="sup", statement="s", **common),
             ClaimSpec(id="eq", statement="e", kind="equivalence", margin=0.05, **common),
             ClaimSpec(id="ni", statement="n", kind="non_inferiority", margin=0.05, **common)]
    out = {r["id"]: r for r in evaluate_claims(specs, {"t": table}, [], EV, seed=0, track="x")}
    assert out["sup"]["verdict"] == "unresolved"
    assert out["eq"]["verdict"] == "equivalent (±0.05)"
    assert out["ni"]["verdict"] == "non-inferior (margin 0.05)"


def test_failed_precondition_gives_no_direction_and_no_holm_share() -> None:
    table = unit_table([{"arm": a, "cluster": s, "unit": 0, "value": v}
                        for s in range(6) for a, v in (("m", 1.0 + 0.1 * s), ("b", 0.0))])
    common = dict(table="t", metric="acc", method="m", baseline="b", unit="run", cluster="seed", role="headline")
    specs = [ClaimSpec(id="a", statement="a", preconditions=("teacher solved",), **common),
             ClaimSpec(id="b", statement="b", **common)]
    pre = [precondition("teacher solved", False, value=0.0, threshold=1.0, detail="teacher 2 balanced 0/20")]
    a, b = evaluate_claims(specs, {"t": table}, pre, EV, seed=0, track="x")
    assert a["verdict"] == "not tested: teacher solved" and a["p_holm"] is None
    assert b["verdict"] == "method better" and b["p_holm"] == pytest.approx(b["p_value"])  # a family of one
    assert record_problems(a) == [] and record_problems(b) == []
    bad = dict(a, verdict="method better")
    assert any("failed but the verdict" in p for p in record_problems(bad))


def test_holm_is_applied_within_each_family() -> None:
    recs = [{"id": f"h{i}", "role": "headline", "kind": "superiority", "p_value": p, "diff": 0.1, "ci_low": 0.01,
             "ci_high": 0.2, "margin": None, "higher_is_better": True, "preconditions": []}
            for i, p in enumerate([0.01, 0.04, 0.03])]
    recs.append({**recs[0], "id": "e0", "role": "exploratory", "p_value": 0.04})
    out = {r["id"]: r for r in adjust_and_decide(recs, EV)}
    assert out["h0"]["p_holm"] == pytest.approx(0.03) and out["h0"]["verdict"] == "method better"
    assert out["h2"]["p_holm"] == pytest.approx(0.06) and out["h2"]["verdict"] == "unresolved"
    assert out["h1"]["p_holm"] == pytest.approx(0.06)
    assert out["e0"]["p_holm"] == pytest.approx(0.04) and out["e0"]["verdict"] == "method better"
    with pytest.raises(ValueError, match="at most 3"):
        adjust_and_decide(recs[:3] + [{**recs[0], "id": "h9"}], EV)


def test_margin_rules_on_specs() -> None:
    with pytest.raises(ValueError, match="needs a positive margin"):
        ClaimSpec(id="x", statement="x", table="t", metric="m", method="a", baseline="b", unit="u", cluster=None,
                  kind="non_inferiority")
    with pytest.raises(ValueError, match="takes no margin"):
        ClaimSpec(id="x", statement="x", table="t", metric="m", method="a", baseline="b", unit="u", cluster=None, margin=0.1)


# ------------------------------------------------------------------ preconditions


def test_convergence_check_tells_a_plateau_from_a_falling_curve() -> None:
    steps = np.arange(200)
    falling = 2.0 * np.exp(-steps / 400)          # still halving: stopped early
    flat = 0.1 + np.exp(-steps / 10)               # plateaued long ago
    assert not convergence("trace SFT", falling, EV)["passed"]
    assert convergence("warm start", flat, EV)["passed"]
    rising_reward = 1 - np.exp(-steps / 400)
    assert not convergence("reward", rising_reward, EV, lower_is_better=False)["passed"]
    short = convergence("20 steps", flat[:5], EV)
    assert not short["passed"] and "only 5 logged points" in short["detail"]


def test_convergence_floor_passes_a_near_zero_loss_only_when_asked() -> None:
    # the 2026-12-03 encoder_fusion 3D curve: dev loss ≈ 0.0014 still falling ≈ 10 % per window
    steps = np.arange(81)
    near_zero = 0.0022 * np.exp(-steps / 150)
    assert not convergence("anchored", near_zero, EV)["passed"]                      # relative rule alone
    floored = convergence("anchored", near_zero, EV, abs_tol=EV.convergence_abs_tol_nats)
    assert floored["passed"] and "< the floor 0.001" in floored["detail"]
    # the floor never excuses a loss that still moves by more than it
    falling = 2.0 * np.exp(-np.arange(200) / 400)
    assert not convergence("trace SFT", falling, EV, abs_tol=EV.convergence_abs_tol_nats)["passed"]
    # a bigger loss moving by a little more than the floor is still not converged
    slow = 0.02 * np.exp(-steps / 150)
    rec = convergence("slow", slow, EV, abs_tol=EV.convergence_abs_tol_nats)
    assert not rec["passed"] and "≥ the floor" in rec["detail"]


# ------------------------------------------------------------------ records round trip


def test_records_recompute_from_committed_unit_tables(tmp_path) -> None:
    rng = np.random.default_rng(5)
    rows = [{"arm": arm, "cluster": f"s{s}", "unit": f"q{q}", "value": float(rng.random() < p)}
            for s in range(5) for q in range(40) for arm, p in (("mapd", 0.45), ("grpo", 0.4))]
    tables = {"em": pd.DataFrame(rows)}
    spec = ClaimSpec(id="mapd_vs_grpo", statement="MAPD beats GRPO", table="em", metric="EM", method="mapd",
                     baseline="grpo", unit="question", cluster="seed", role="headline")
    records = evaluate_claims([spec], tables, [], EV, seed=11, track="toy")
    assert records[0]["units"]["label"] == "5 seeds × 40 questions"
    write_unit_tables("toy", tables, root=tmp_path)
    metrics = {"claims": records, "evidence": {**EV.model_dump(), "seed": 11}}
    assert recompute(metrics, root=tmp_path) == as_json(records)


def test_one_cluster_cannot_carry_an_interval(tmp_path) -> None:
    """One teacher (the smoke grid): the claim says it is not tested, whatever the draws show."""
    table = unit_table([{"arm": a, "cluster": 0, "unit": d, "value": v} for d in range(3) for a, v in (("m", 1.0), ("b", 0.0))])
    spec = ClaimSpec(id="x", statement="x", table="t", metric="m", method="m", baseline="b", unit="draw", cluster="teacher")
    records = evaluate_claims([spec], {"t": table}, [], EV, seed=0, track="x")
    assert records[0]["verdict"] == "not tested: at least 2 independent teachers"
    write_unit_tables("x", {"t": table}, root=tmp_path)
    assert records[0]["ci_low"] == -np.inf
    stored = as_json(records)  # as the metrics file holds it: the unbounded sides are null
    assert stored[0]["ci_low"] is None
    assert recompute({"claims": stored, "evidence": {**EV.model_dump(), "seed": 0}}, root=tmp_path) == stored


def test_unit_labels_are_plural_english() -> None:
    from paperworks.core.claims import plural

    assert [plural(w) for w in ("query", "seed", "day", "teacher")] == ["queries", "seeds", "days", "teachers"]


def test_units_label_of_unequal_clusters_gives_the_total() -> None:
    """Videos with 2 or 3 questions each: the label names both counts instead of a fractional per-cluster size."""
    rows = [{"arm": arm, "cluster": f"v{v}", "unit": f"v{v}-q{q}", "value": float((v + q) % 2)}
            for v in range(6) for q in range(2 + v % 2) for arm in ("gate", "global")]
    spec = ClaimSpec(id="gate_vs_global", statement="gate beats global", table="acc", metric="accuracy",
                     method="gate", baseline="global", unit="question", cluster="video", role="headline")
    record = evaluate_claims([spec], {"acc": pd.DataFrame(rows)}, [], EV, seed=3, track="toy")[0]
    assert record["units"]["label"] == "6 videos, 15 questions"
