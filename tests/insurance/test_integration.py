"""The insurance smoke profile end to end through DVC."""
from __future__ import annotations

import json

import pytest

from tests.conftest import assert_claims_meet_standard, dvc


@pytest.mark.integration
def test_smoke_pipeline_through_dvc(smoke_repo):
    dvc(smoke_repo, "repro", "--glob", "insurance_*")
    metrics = json.loads((smoke_repo / "metrics/insurance.json").read_text())
    assert metrics["profile"] == "smoke"
    claims = {c["id"]: c for c in assert_claims_meet_standard(metrics, "insurance", smoke_repo)}
    assert set(claims) == {"tuned_ce_vs_zeroshot_ndcg3", "tuned_ce_vs_zeroshot_spearman"}
    head = claims["tuned_ce_vs_zeroshot_ndcg3"]
    assert head["units"]["cluster"] == "seed" and head["units"]["n_units"] > 0
    names = {p["name"] for p in head["preconditions"]}
    assert "tuning budget" in names and any("plateaued" in n for n in names)
    assert 0.0 <= metrics["label_audit"]["agreement"] <= 1.0
    card = metrics["data_card"]
    assert set(card["queries_per_intent"]) == {"direct", "symptom", "coverage"}
    assert set(card["relevance_histogram"]) == {"0", "1", "2", "3"}
    for name in ("zeroshot_curve.csv", "zeroshot_curve.png", "grid.csv", "results_by_intent.csv", "tuned_seeds.csv"):
        assert (smoke_repo / "plots/insurance" / name).stat().st_size > 0
    assert (smoke_repo / "models/insurance/best_cross_encoder").is_dir()
    # a second repro has nothing to do: every stage is cached
    out = dvc(smoke_repo, "status", "--json").stdout
    assert not any(k.startswith("insurance_") for k in json.loads(out or "{}"))
