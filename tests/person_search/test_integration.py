"""The track's smoke profile end to end through DVC, in a temporary copy of the repository."""
import json

import pandas as pd
import pytest
from PIL import Image

from tests.conftest import assert_claims_meet_standard, dvc

VIEWS = ("full", "structured", "appearance", "action", "object", "scene")
METHODS = {"fusion", "fusion_no_anchor", "fusion_zscore", "fusion_no_agreement", "fusion+consensus", "fusion+always_rerank",
           "fusion+cross", "fusion+cloze", "fusion+verify", "backbone_cnn", "backbone_resnet", "backbone_vit",
           *[f"view_{v}" for v in VIEWS], *[f"branch_{b}_{v}" for b in ("cnn", "resnet", "vit") for v in VIEWS]}


@pytest.mark.integration
def test_smoke_pipeline(smoke_repo):
    dvc(smoke_repo, "repro", "--glob", "person_search_*")
    metrics = json.loads((smoke_repo / "metrics/person_search.json").read_text())
    claims = {c["id"]: c for c in assert_claims_meet_standard(metrics, "person_search", smoke_repo)}
    headline = {"fusion_vs_best_single_view", "gated_vs_always_rerank", "gated_vs_never_rerank"}
    assert headline == {c["id"] for c in claims.values() if c["role"] == "headline"}
    assert metrics["best_single_view"] in {f"view_{v}" for v in VIEWS} | {f"branch_{b}_{v}" for b in ("cnn", "resnet", "vit") for v in VIEWS}
    for gate_claim in ("gated_vs_always_rerank", "gated_vs_never_rerank"):  # tested only if the gate fired in every run
        fired = all(0 < c["val_kept_stage1_fraction"] < 1 for c in metrics["consensus"].values())
        assert ("the consensus gate fires on validation" in claims[gate_claim]["verdict"]) != fired
    for split in ("val", "test"):
        for source in ("cross", "cloze", "verify", "always_rerank", "gated"):
            f = metrics["rerank_flips"][split][source]  # summed over the training runs
            assert 0 <= f["flipped_to_wrong"] <= f["stage1_top1_correct"]
            assert f["stage1_top1_correct"] == sum(r[split][source]["stage1_top1_correct"]
                                                   for r in metrics["rerank_flips_by_seed"].values())
    assert 0 < metrics["data_card"]["share_single_edits_outside_cloze_slots"] < 1
    card = metrics["data_card"]  # the planted blind twins (landmark-only distractors) are in the gallery as declared
    assert card["blind_attributes"] == ["landmark"] and card["blind_twin_share_declared"] > 0
    n_queries = metrics["n_test_queries"] + metrics["n_val_queries"]
    assert card["share_queries_with_blind_twin"] == round(round(card["blind_twin_share_declared"] * n_queries) / n_queries, 4)
    n_twin = sum(metrics["rerank_flips"][split]["gated"]["blind_twin_queries"] for split in ("val", "test"))
    assert n_twin == round(card["blind_twin_share_declared"] * n_queries) * len(metrics["seeds"])  # summed over runs
    # the coarse targets (distractors agree with the target in every cloze slot) are in the gallery as declared
    n_coarse = round(card["coarse_target_share_declared"] * n_queries)
    assert card["share_queries_coarse"] == round(n_coarse / n_queries, 4)
    assert sum(metrics["rerank_flips"][split]["gated"]["coarse_queries"] for split in ("val", "test")) == n_coarse * len(metrics["seeds"])
    assert card["share_distractors_outside_cloze_slots"] >= card["share_single_edits_outside_cloze_slots"]
    for split in ("val", "test"):
        order = metrics["blind_twin_order"][split]
        assert set(order) == {"fusion", "cross", "cloze", "verify"}
        assert all(0 <= o["target_above_twin"] <= o["pairs_in_pool"] for o in order.values())
    seeds = metrics["seeds"]
    assert len(seeds) >= 2 and set(metrics["consensus"]) == {str(s) for s in seeds}
    for s in seeds:  # every candidate gate confidence's separation, and a view-agreement table covering every query
        sep = metrics["gate_confidence_separation"][str(s)]
        assert set(sep["val"]["auc"]) == {"margin", "entropy", "agreement"}
        assert all(a is None or 0 <= a <= 1 for split in ("val", "test") for a in sep[split]["auc"].values())
        assert sum(r["queries"] for r in sep["val"]["by_agreement"].values()) == metrics["n_val_queries"]
        assert all(0 <= int(k) <= len(VIEWS) for k in sep["test"]["by_agreement"])
    for c in claims.values():  # training runs (seeds) are the clusters, test queries sit inside them
        assert c["units"]["cluster"] == "seed" and c["units"]["n_clusters"] == len(seeds)
    results = pd.read_csv(smoke_repo / "plots/person_search/results.csv")
    assert METHODS <= set(results["method"])
    assert results[["map@10", "r@1", "r@5", "r@10"]].apply(lambda c: c.between(0, 1)).all().all()
    assert (results["r@1"] <= results["r@5"] + 1e-9).all() and (results["r@5"] <= results["r@10"] + 1e-9).all()
    sheet = Image.open(smoke_repo / "plots/person_search/contact_sheet.png")
    assert sheet.format == "PNG" and sheet.size[0] > 300
    for s in seeds:  # every model of every run logged its held-out curve (what the convergence precondition reads)
        for name in ("encoder_cnn", "encoder_resnet", "encoder_vit", "expert_cross", "expert_cloze", "expert_verify"):
            assert (smoke_repo / f"plots/person_search/live/{name}_s{s}/plots/metrics/val/loss.tsv").exists()
    # a second repro has nothing to do: every stage is cached
    out = dvc(smoke_repo, "repro", "--glob", "person_search_*").stdout
    assert "didn't change" in out or "up to date" in out.lower()
