"""Report on hand-built results: success/contamination per (capability, seed), whole-conversation
success under a routing, the router fallback, and a failed precondition turning a claim into 'not tested'."""
import numpy as np
import pandas as pd
import pytest
import yaml

from paperworks.core.claims import EvidenceParams, evaluate_claims
from paperworks.core.params import validate_section
from paperworks.mol import report
from paperworks.mol.params import Params
from paperworks.mol.router import route_conversations, rule_probabilities
from paperworks.mol.world import CAPABILITIES
from tests.mol.test_params import CONF

EV = EvidenceParams(bootstrap_resamples=200)


def _params(**adapters):
    raw = yaml.safe_load((CONF / "default" / "mol.yaml").read_text())
    raw["adapters"].update(adapters)
    return validate_section("mol", Params, raw)


def _history(steps, start=2.0):
    return [{"step": s, "loss": 1.0, "dev_loss": start / (1 + 5 * s / steps) if s < steps * 0.6 else start / 4,
             "dev_success": min(1.0, s / (0.5 * steps))} for s in range(steps // 10, steps + 1, steps // 10)]


def _results(p, spec_ok: int, single_ok: int, n: int = 10, turn_ok=None):
    """Per seed: specialists answer `spec_ok` of n items right, the single LoRA `single_ok`, the base none."""
    out = {}
    for seed in p.adapters.seeds:
        suite = []
        for cap in CAPABILITIES:
            for i in range(n):
                suite.append({"arm": "specialists", "capability": cap, "item": i, "format": cap, "success": i < spec_ok})
                suite.append({"arm": "single_lora", "capability": cap, "item": i,
                              "format": cap if i < single_ok else "agent" if cap == "genui" else cap, "success": i < single_ok})
                suite.append({"arm": "base", "capability": cap, "item": i, "format": "other", "success": False})
        r, a = p.adapters.rank, p.adapters.steps
        hist = {f"specialist_{c}": _history(a) for c in CAPABILITIES} | {"single_lora": _history(4 * a)}
        turns = turn_ok or []
        out[seed] = {"seed": seed, "suite": suite, "turns": turns, "histories": hist,
                     "trainable": {f"specialist_{c}": 100 * r for c in CAPABILITIES} | {"single_lora": 400 * r}}
    return out


def test_success_rates_and_contamination_by_hand():
    p = _params(seeds=[0, 1], full_ft=False)
    rates = report.success_rates(_results(p, spec_ok=8, single_ok=5))
    row = rates.set_index(["arm", "seed", "capability"])
    assert row.loc[("specialists", 0, "chat"), "success"] == 0.8
    assert row.loc[("single_lora", 1, "genui"), "success"] == 0.5
    assert row.loc[("single_lora", 1, "genui"), "contamination"] == 0.5  # 5 of 10 genui answers were tool calls
    assert row.loc[("single_lora", 1, "chat"), "contamination"] == 0.0
    assert row.loc[("base", 0, "agent"), "contamination"] == 0.0          # 'other' is not another capability


def test_conversation_success_follows_the_routes():
    turns = [  # conversation 0: chat then agent; conversation 1: coding then (neutral) coding
        {"adapter": a, "conversation": c, "turn": t, "capability": cap, "success": ok}
        for c, t, cap, good in [(0, 0, "chat", {"chat"}), (0, 1, "agent", {"agent"}), (1, 0, "coding", {"coding"}), (1, 1, "coding", set())]
        for a in CAPABILITIES for ok in [a in good]]
    res = {0: {"turns": turns}}
    routes = {"rules": [{"conversation": 0, "turn": 0, "route": "chat"}, {"conversation": 0, "turn": 1, "route": "agent"},
                        {"conversation": 1, "turn": 0, "route": "coding"}, {"conversation": 1, "turn": 1, "route": "coding"}],
              "bad": [{"conversation": 0, "turn": 0, "route": "chat"}, {"conversation": 0, "turn": 1, "route": "genui"},
                      {"conversation": 1, "turn": 0, "route": "coding"}, {"conversation": 1, "turn": 1, "route": "coding"}]}
    conv = report.conversation_success(res, {"0": routes}).set_index(["policy", "conversation"])["success"]
    assert conv[("oracle", 0)] == 1.0 and conv[("oracle", 1)] == 0.0  # the second coding turn failed for every adapter
    assert conv[("router_rules", 0)] == 1.0
    assert conv[("router_bad", 0)] == 0.0                               # one wrong route fails the whole conversation


def test_conversation_success_uses_each_seeds_own_router():
    turns = [{"adapter": a, "conversation": 0, "turn": 0, "capability": "chat", "success": a == "chat"} for a in CAPABILITIES]
    res = {0: {"turns": turns}, 1: {"turns": turns}}
    routes = {"0": {"tfidf_lr": [{"conversation": 0, "turn": 0, "route": "chat"}]},
              "1": {"tfidf_lr": [{"conversation": 0, "turn": 0, "route": "agent"}]}}
    conv = report.conversation_success(res, routes).set_index(["policy", "seed"])["success"]
    assert conv[("router_tfidf_lr", 0)] == 1.0 and conv[("router_tfidf_lr", 1)] == 0.0
    with pytest.raises(ValueError, match="not for seed 1"):
        report.conversation_success(res, {"0": routes["0"]})


def test_routing_accuracy_averages_the_seeds_routers():
    row = lambda c, t, route, cap, fb=False: {"conversation": c, "turn": t, "route": route, "capability": cap, "fallback": fb}  # noqa: E731
    routes = {"0": {"rules": [row(0, 0, "chat", "chat"), row(0, 1, "agent", "agent", True)]},
              "1": {"rules": [row(0, 0, "chat", "chat"), row(0, 1, "genui", "agent")]}}
    acc = report.routing_accuracy(routes)["rules"]
    assert acc["per_seed"]["0"]["turn_accuracy"] == 1.0 and acc["per_seed"]["1"]["turn_accuracy"] == 0.5
    assert acc["turn_accuracy"] == 0.75 and acc["accuracy_after_first_turn"] == 0.5 and acc["fallback_share"] == 0.25


def test_router_fallback_keeps_previous_route():
    turns = [{"conversation": 0, "turn": t, "capability": "agent"} for t in range(3)] + [{"conversation": 1, "turn": 0, "capability": "chat"}]
    proba = np.array([[0.1, 0.8, 0.05, 0.05], [0.4, 0.3, 0.2, 0.1], [0.1, 0.1, 0.1, 0.7], [0.3, 0.2, 0.25, 0.25]])
    r = route_conversations(turns, proba, threshold=0.6)
    assert [x["route"] for x in r] == ["agent", "agent", "genui", "chat"]  # turn 1 unsure → keeps agent; a new conversation does not
    assert [x["fallback"] for x in r] == [False, True, False, False]
    assert rule_probabilities(["call a tool to get the files", "also, get the files"]).tolist() == [[0, 1, 0, 0], [0, 0, 0, 0]]


@pytest.mark.parametrize("spec_ok,verdict_prefix", [(9, "method better"), (5, "not tested")])
def test_specialist_precondition_gates_the_headline(spec_ok, verdict_prefix):
    p = _params(seeds=[0, 1, 2], full_ft=False)
    results = _results(p, spec_ok=spec_ok, single_ok=3)
    for seed, res in results.items():  # a little per-seed spread, so the interval is finite
        for row in res["suite"]:
            if row["arm"] == "single_lora" and row["item"] == 3 and seed == 1:
                row["success"] = True
    rates = report.success_rates(results)
    pre = report.preconditions(p, rates, results, _history(600), EV)
    byname = {x["name"]: x for x in pre}
    assert byname[report.SPECIALISTS_LEARNED]["passed"] is (spec_ok / 10 >= 0.6)
    assert byname[report.SAME_BUDGET]["passed"]
    tables = report.unit_tables(rates, report.conversation_success(results, {}))
    specs = [s for s in report.claim_specs(p) if s.table in tables]  # no conversations here: the C1 claims only
    claims = {c["id"]: c for c in evaluate_claims(specs, tables, pre, EV, seed=0, track="mol")}
    head = claims["specialists_beat_single_lora"]
    assert head["verdict"].startswith(verdict_prefix), head["verdict"]
    assert head["units"]["cluster"] == "seed" and head["units"]["n_clusters"] == 3 and head["units"]["n_units"] == 12


def test_loop_tables_and_preconditions():
    rng = np.random.default_rng(0)
    items = lambda p: {cap: [bool(x) for x in rng.random(10) < p] for cap in CAPABILITIES}  # noqa: E731
    answers = {"suite_of": {"v0": "0", "v1": "1", "v2": "2"},
               "answers": {"v0": {"0": items(0.9), "2": items(0.3)}, "v1": {"0": items(0.9), "2": items(0.5)},
                           "v2": {"0": items(0.9), "2": items(0.95)}}}
    tables = report.version_tables(answers, seed=0)
    new = tables["versions_new_suite"]
    assert set(new["arm"]) == {"latest", "v0"} and len(new) == 2 * 4 * 10
    latest = new[new["arm"] == "latest"].set_index("unit")["value"]
    assert latest["genui:3"] == float(answers["answers"]["v2"]["2"]["genui"][3])  # v2 (the latest), not v1, on suite 2
    assert report.version_tables({"suite_of": {"v0": "0"}, "answers": {"v0": {"0": items(1)}}}, seed=0) == {}
    hist = [{"step": s, "dev_success": min(1.0, s / 50)} for s in range(10, 310, 30)]
    lineage = [{"candidate": "-", "status": "accepted", "version": "v0"},
               {"candidate": "cand1", "status": "accepted", "version": "v1", "capability": "agent", "history": hist},
               {"candidate": "cand2", "status": "rejected", "version": None, "capability": "genui", "history": hist[:3]}]
    pre = {r["name"]: r for r in report.loop_preconditions({0: lineage}, EV)}
    assert pre[report.LOOP_ACCEPTED]["passed"] and pre[report.UPDATES_CONVERGED]["passed"]  # the rejected one is not counted
    pre = {r["name"]: r for r in report.loop_preconditions({0: lineage[:1] + lineage[2:]}, EV)}
    assert not pre[report.LOOP_ACCEPTED]["passed"] and not pre[report.UPDATES_CONVERGED]["passed"]
    # over loop runs (seed → lineage): every run must have accepted a version
    pre = {r["name"]: r for r in report.loop_preconditions({0: lineage, 1: lineage[:1] + lineage[2:]}, EV)}
    assert not pre[report.LOOP_ACCEPTED]["passed"] and "seed 1: 0 candidate(s) accepted" in pre[report.LOOP_ACCEPTED]["detail"]
    assert report.loop_preconditions({0: lineage, 1: lineage}, EV)[0]["passed"]


def test_loop_claims_are_over_loop_runs():
    """The loop claims' interval is over independent loop runs (adapter seeds), the items nested: one run reads
    "not tested", two give a verdict whose units say 2 seeds."""
    rng = np.random.default_rng(1)
    items = lambda p: {cap: [bool(x) for x in rng.random(20) < p] for cap in CAPABILITIES}  # noqa: E731

    def answers():
        return {"suite_of": {"v0": "0", "v1": "2"}, "answers": {"v0": {"0": items(0.9), "2": items(0.3)},
                                                              "v1": {"0": items(0.9), "2": items(0.95)}}}
    specs = report.loop_claim_specs(_params(seeds=[0, 1], full_ft=False))
    pre = [{"name": n, "passed": True} for n in report.C4_PRE]
    one = report.version_tables(answers(), seed=0)
    claim = {c["id"]: c for c in evaluate_claims(specs, one, pre, EV, seed=0, track="mol")}["latest_version_beats_v0_on_new_traffic"]
    assert claim["verdict"] == "not tested: at least 2 independent seeds" and claim["units"]["cluster"] == "seed"
    a, b = one, report.version_tables(answers(), seed=1)
    two = {k: pd.concat([a[k], b[k]], ignore_index=True) for k in a}
    claim = {c["id"]: c for c in evaluate_claims(specs, two, pre, EV, seed=0, track="mol")}["latest_version_beats_v0_on_new_traffic"]
    assert not claim["verdict"].startswith("not tested") and claim["units"]["n_clusters"] == 2


def test_weak_cue_rates_and_tables():
    p = _params(seeds=[0, 1], full_ft=False)
    results = _results(p, spec_ok=8, single_ok=5)
    for res in results.values():
        for row in res["suite"]:
            row["weak_cue"] = row["item"] >= 6  # items 6-9 weakly cued: the single LoRA fails all of them, in genui as tool calls
    rates = report.success_rates(results).set_index(["arm", "seed", "capability"])
    assert rates.loc[("specialists", 0, "chat"), "success_weak"] == 0.5       # items 6, 7 of 6-9 right
    assert rates.loc[("single_lora", 0, "chat"), "success_weak"] == 0.0
    assert rates.loc[("single_lora", 1, "genui"), "contamination_weak"] == 1.0
    assert rates.loc[("single_lora", 1, "genui"), "items_weak"] == 4
    tables = report.unit_tables(rates.reset_index(), report.conversation_success(results, {}))
    assert {"success_weak_cue", "contamination_weak_cue"} <= set(tables)
    assert "base" not in set(tables["contamination_weak_cue"]["arm"])
    ids = {s.id for s in report.claim_specs(p)}
    assert "specialists_beat_single_lora_weak_cues" in ids  # the default world has weak cues
