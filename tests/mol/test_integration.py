"""The track's smoke profile end to end through DVC, in a temporary copy of the repository."""
import json

import pandas as pd
import pytest
from PIL import Image

from tests.conftest import assert_claims_meet_standard, dvc

HEADLINE = {"specialists_beat_single_lora", "router_matches_oracle"}


@pytest.mark.integration
def test_smoke_pipeline(smoke_repo):
    dvc(smoke_repo, "repro", "--glob", "mol_*")
    metrics = json.loads((smoke_repo / "metrics/mol.json").read_text())
    claims = {c["id"]: c for c in assert_claims_meet_standard(metrics, "mol", smoke_repo)}
    assert {c for c, r in claims.items() if r["role"] == "headline"} == HEADLINE
    head = claims["specialists_beat_single_lora"]
    assert head["units"]["cluster"] == "seed" and head["units"]["n_units"] == 2 * 4  # (capability, seed): 2 seeds × 4
    names = {p["name"] for p in metrics["preconditions"]}
    assert {"each specialist learned its capability", "baselines had the specialists' parameters and steps"} <= names
    budget = next(p for p in metrics["preconditions"] if p["name"] == "baselines had the specialists' parameters and steps")
    assert budget["passed"]  # rank 4r and 4× steps: checked on the trained models, not assumed
    units = pd.read_csv(smoke_repo / "metrics/units/mol/success.csv")
    assert set(units["arm"]) >= {"specialists", "single_lora", "base"} and set(units["unit"]) == {"chat", "agent", "coding", "genui"}
    conv = pd.read_csv(smoke_repo / "metrics/units/mol/conversation_success.csv")
    assert {"oracle", "router_rules", "router_tfidf_lr", "single_lora"} <= set(conv["arm"])
    assert set(metrics["summary"]["routing"]) == {"rules", "tfidf_lr"}
    assert (smoke_repo / "data/mol/train/seed_0/adapters/agent.safetensors").exists()
    # the versioned loop: the faulty candidate is rejected with its failed check; the accepted version keeps serving
    from paperworks.mol.versions import VersionStore, sha256_file

    loop = json.loads((smoke_repo / "metrics/mol_versions.json").read_text())
    assert loop["candidates"]["cand2"]["faulty"] and loop["candidates"]["cand2"]["status"] == "rejected"
    store = VersionStore(smoke_repo / "data/mol/versions")
    lineage = store.lineage()
    rejected = next(r for r in lineage if r.get("candidate") == "cand2")
    assert "update data verified" in rejected["failed_checks"] and rejected["version"] is None
    served = store.serving()  # re-hashes every served file against serving.json
    assert served["version"] == loop["serving_version"] == next(r for r in reversed(lineage) if r["status"] == "accepted")["version"]
    assert {c: sha256_file(f) for c, f in served["adapters"].items()} == next(r for r in lineage if r["version"] == served["version"])["adapters"]
    cap = rejected["capability"]
    assert sha256_file(smoke_repo / "data/mol/versions/candidates/cand2" / f"{cap}.safetensors") != served["sha256"][cap]
    assert (smoke_repo / "data/mol/versions/lineage.md").read_text().startswith(f"Serving: **{served['version']}**")
    assert set(pd.read_csv(smoke_repo / "plots/mol/lineage.csv")["status"]) == {"accepted", "rejected"}
    # the harness search ran in cycle 1 (Optuna, smoke: 2 trials, greedy first) and was skipped in the faulty cycle
    assert lineage[1]["harness"]["n_trials"] == 2 and lineage[1]["harness"]["trials"][0]["label"] == "greedy"
    assert rejected["harness"] == {"skipped": "faulty cycle"}
    assert list(pd.read_csv(smoke_repo / "plots/mol/lineage.csv")["harness"])[2] == "skipped (faulty cycle)"
    assert {"latest_version_beats_v0_on_new_traffic", "latest_version_retains_v0_suite"} <= set(claims)
    assert set(metrics["versions"]["rejected"]) >= {"cand2"} and metrics["versions"]["faulty_candidates_rejected"]
    # the same loop on one monolithic model: v0 = mol_train's single LoRA, one slot, every update rewrites it
    mono_store = VersionStore(smoke_repo / "data/mol/versions_monolith")
    mono_lineage = mono_store.lineage()
    assert mono_store.slots == ("monolith",) and set(mono_lineage[0]["adapters"]) == {"monolith"}
    assert mono_lineage[0]["adapters"]["monolith"] == sha256_file(smoke_repo / "data/mol/train/seed_0/single_lora.safetensors")
    assert [r.get("candidate") for r in mono_lineage] == [r.get("candidate") for r in lineage]  # the same cycles
    assert all(set(r["retention_by_capability"]["0"]) == {"chat", "agent", "coding", "genui"} for r in mono_lineage[1:])
    assert mono_lineage[1]["harness"]["n_trials"] == 2 and mono_lineage[2]["harness"] == {"skipped": "faulty cycle"}
    mono_metrics = json.loads((smoke_repo / "metrics/mol_versions_monolith.json").read_text())
    assert mono_metrics["candidates"]["cand2"]["status"] == "rejected"  # the same contract rejects the faulty update
    forgetting = claims["mol_forgets_less_than_monolith"]
    assert forgetting["role"] == "exploratory" and forgetting["units"]["unit"] == "capability" and forgetting["units"]["cluster"] == "seed"
    # the replicate loop runs (seed 1, both layouts) make the loop claims' level the loop run: two seeds
    assert "at least 2 independent seeds" not in forgetting["verdict"]
    assert claims["latest_version_beats_v0_on_new_traffic"]["units"]["cluster"] == "seed"
    for layout, v0 in (("mol", "data/mol/train/seed_1/adapters/chat.safetensors"), ("monolith", "data/mol/train/seed_1/single_lora.safetensors")):
        rep = VersionStore(smoke_repo / f"data/mol/versions_replicates/{layout}_seed_1")
        rep_lineage = rep.lineage()
        slot = "chat" if layout == "mol" else "monolith"
        assert rep_lineage[0]["adapters"][slot] == sha256_file(smoke_repo / v0)  # v0 = seed 1's own models
        assert [r.get("candidate") for r in rep_lineage] == [r.get("candidate") for r in lineage]
        assert json.loads((rep.root / "metrics.json").read_text())["candidates"]["cand2"]["status"] == "rejected"
        assert (rep.root / "lineage.csv").exists()
    assert set(metrics["versions_replicates"]) == {"1"} and set(metrics["forgetting"]["replicates"]) == {"1"}
    assert metrics["forgetting"]["earlier_suites"] == ["0", "1"] and set(metrics["forgetting"]["arms"]) == {"mol", "monolith"}
    retention = pd.read_csv(smoke_repo / "plots/mol/retention.csv")
    assert set(retention["arm"]) == {"mol", "monolith"} and set(retention["seed"]) == {0, 1}
    # the fifth specialist: one new adapter, the four read back byte-identical, their suites' per-item results unchanged
    fifth = json.loads((smoke_repo / "metrics/mol_fifth.json").read_text())
    assert fifth["all_checks_passed"] and {c["name"] for c in fifth["checks"]} >= {"the four adapters read back byte-identical",
                                                                                 "the four suites' per-item results unchanged"}
    assert "the fifth specialist learned its capability" in {p["name"] for p in fifth["preconditions"]}
    assert set(fifth["summary"]["router"]["per_route_accuracy"]) == {"chat", "agent", "coding", "genui", "sql"}
    for cap in ("chat", "agent", "coding", "genui", "sql"):
        assert (smoke_repo / "data/mol/fifth/adapters" / f"{cap}.safetensors").exists()
    for cap in ("chat", "agent", "coding", "genui"):
        assert sha256_file(smoke_repo / "data/mol/fifth/adapters" / f"{cap}.safetensors") == \
            sha256_file(smoke_repo / "data/mol/train/seed_0/adapters" / f"{cap}.safetensors")
    # the one-shot CLI of the endpoint answers with the served version
    import sys

    from tests.conftest import run

    out = json.loads(run([sys.executable, "-m", "paperworks.mol.service", "call a tool to show the open invoices of ana, limit 3",
                          "also, list the draft files of bob, limit 2"], cwd=smoke_repo).stdout)
    assert out["version"] == served["version"] and [t["turn"] for t in out["turns"]] == [0, 1]
    assert all(t["adapter"]["sha256"] == served["sha256"][t["route"]] and t["latency_ms"] > 0 for t in out["turns"])
    # learned-routing ablations (X-LoRA, Polytropon): exploratory claims over (capability, seed) and (conversation, seed)
    lr = json.loads((smoke_repo / "metrics/mol_learned_routing.json").read_text())
    lr_claims = {c["id"]: c for c in assert_claims_meet_standard(lr, "mol_learned_routing", smoke_repo)}
    assert set(lr_claims) == {"xlora_matches_oracle_specialists", "xlora_matches_router", "poly_matches_oracle_specialists",
                              "poly_routed_matches_router"} and all(c["role"] == "exploratory" for c in lr_claims.values())
    assert lr_claims["xlora_matches_oracle_specialists"]["units"]["n_units"] == 2 * 4
    pre = {p["name"]: p for p in lr["preconditions"]}
    assert pre["X-LoRA holds the trained specialists"]["passed"] and pre["learned routing had the baselines' steps and data"]["passed"]
    assert lr["not_run"] == {}
    img = Image.open(smoke_repo / "plots/mol/success.png")
    assert img.format == "PNG" and img.size[0] > 300
    out = dvc(smoke_repo, "repro", "--glob", "mol_*").stdout  # a second repro has nothing to do
    assert "didn't change" in out or "up to date" in out.lower()
