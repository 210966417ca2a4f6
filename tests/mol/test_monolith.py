"""The versioned loop on one monolithic model: the same loop code with another layout (which adapter file answers,
and is updated for, each capability). A monolith's store holds one file, its update rewrites only that file, its
contract compares every capability (nothing is byte-identical by construction); forgetting is v0 minus the final
version on the earlier acceptance suites, per (capability, seed), and a claim over one loop run is "not tested"."""
import contextlib

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from paperworks.core.claims import EvidenceParams, evaluate_claims
from paperworks.core.io import save_safetensors
from paperworks.core.params import validate_section
from paperworks.mol import report
from paperworks.mol import versions as V
from paperworks.mol import world as W
from paperworks.mol.loop import mol_layout, monolith_layout
from paperworks.mol.params import ContractParams, Params
from tests.mol.test_params import CONF

EV = EvidenceParams(bootstrap_resamples=200)
CAPS = W.CAPABILITIES


def _params():
    return validate_section("mol", Params, yaml.safe_load((CONF / "default" / "mol.yaml").read_text()))


def test_layouts_route_every_capability():
    p = _params()
    mol, mono = mol_layout(p), monolith_layout(p)
    assert mol.slots == tuple(CAPS) and all(mol.slot(c) == c and mol.shares(c) == [c] for c in CAPS)
    assert mono.slots == (V.MONOLITH,) and all(mono.slot(c) == V.MONOLITH and mono.shares(c) == list(CAPS) for c in CAPS)
    # the monolith is the one LoRA on the mixture: the four specialists' trainable parameters in one adapter
    assert mono.rank == len(CAPS) * mol.rank and mono.update_lr == p.monolith.update_lr and mol.update_lr == p.versions.update_lr
    assert dict(mono.v0)["rank"] == len(CAPS) * p.adapters.rank and dict(mono.v0)["steps"] == len(CAPS) * p.adapters.steps
    # replay: the monolith's update replays every capability its one file answers (default), the mixture's only its own
    assert p.monolith.replay == "answered"
    assert all(mono.replay_capabilities(c) == list(CAPS) and mol.replay_capabilities(c) == [c] for c in CAPS)
    narrow = monolith_layout(p.model_copy(update={"monolith": p.monolith.model_copy(update={"replay": "updated"})}))
    assert all(narrow.replay_capabilities(c) == [c] for c in CAPS)
    # the monolith's update has its own steps (default 600: trained to its plateau); None falls back to versions'
    assert mono.update_steps == p.monolith.update_steps == 1200 and mol.update_steps is None
    same = monolith_layout(p.model_copy(update={"monolith": p.monolith.model_copy(update={"update_steps": None})}))
    assert same.update_steps is None


def test_update_data_check_verifies_each_item_with_its_own_capability():
    """Mixture replay puts other capabilities' training items into the monolith's update: each is verified with its
    own verifier (verifying them as the updated capability would fail the contract's data check on every cycle)."""
    world_tables = [W.hidden_tables(np.random.default_rng(i)) for i in range(3)]
    items = {c: W.make_items(np.random.default_rng(1), c, 4, 0.0, frozenset(), 0.0, W.VERBS) for c in CAPS}
    mixed = [x for c in CAPS for x in items[c]]
    assert V.verified_share_of(mixed, "agent", world_tables) == 1.0
    # a wrong target stays a failure, whatever capability the item names
    broken = [{**mixed[0], "target": mixed[-1]["target"]}] + mixed[1:]
    assert V.verified_share_of(broken, "agent", world_tables) == pytest.approx((len(mixed) - 1) / len(mixed))


def _adapter(path, value: float):
    save_safetensors(path, {"lora_A": torch.full((2, 3), value), "lora_B": torch.zeros(3, 2)}, metadata={"rank": "8"})
    return path


def test_one_slot_store_accepts_rejects_and_rolls_back(tmp_path):
    store = V.VersionStore(tmp_path / "mono", (V.MONOLITH,))
    store.init({V.MONOLITH: _adapter(tmp_path / "v0.safetensors", 1.0)}, {"candidate": "-"})
    v0 = store.path("v0", V.MONOLITH).read_bytes()
    with pytest.raises(ValueError, match="slot 'agent'"):  # a capability is not a slot of a monolith's store
        store.propose("cand1", "agent", _adapter(tmp_path / "c.safetensors", 2.0), [{"name": "ok", "passed": True}], {})
    rec = store.propose("cand1", "agent", tmp_path / "c.safetensors", [{"name": "ok", "passed": True}], {}, slot=V.MONOLITH)
    assert rec["status"] == "accepted" and rec["capability"] == "agent" and set(rec["adapters"]) == {V.MONOLITH}
    assert sorted(p.name for p in (store.root / "accepted" / "v1").iterdir()) == ["monolith.safetensors"]
    assert store.path("v0", V.MONOLITH).read_bytes() == v0 and store.serving()["version"] == "v1"
    reopened = V.VersionStore(store.root)  # slots read back from the lineage (the CLI opens a store this way)
    assert reopened.slots == (V.MONOLITH,) and reopened.serving()["version"] == "v1"
    V.main(["rollback", "v0", "--root", str(store.root)])
    assert reopened.serving()["version"] == "v0"
    row = V.lineage_rows(store.lineage())[1]
    assert row["capability"] == "agent" and row["adapter_sha256"] == rec["adapters"][V.MONOLITH][:12]
    assert V.VersionStore(tmp_path / "mol_store").slots == tuple(CAPS)  # a new store without slots: the mixture


def test_monolith_contract_checks_every_capability():
    cp = ContractParams(min_success=0.8, require_improvement=False, retention_margin=0.05)
    keep = ([True] * 40, [True] * 40)
    forgot = ([True] * 28 + [False] * 12, [True] * 40)  # chat lost 30 points although agent was the one updated
    retention = {"0": {c: (forgot if c == "chat" else keep) for c in CAPS}}
    checks = {c["name"]: c for c in V.contract_checks(cp, "agent", data_verified=1.0, new_suite=([True] * 40, [False] * 40),
                                                     retention=retention, identical={c: False for c in CAPS}, alpha=0.05,
                                                     n_boot=300, seed=0, others=[])}
    assert checks["other adapters untouched"]["passed"] and checks["other adapters untouched"]["threshold"] == 0  # none exist
    assert not checks["retention: chat on suite 0"]["passed"]
    assert all(checks[f"retention: {c} on suite 0"]["passed"] for c in CAPS if c != "chat")
    assert all("byte-identical" not in checks[f"retention: {c} on suite 0"]["detail"] for c in CAPS)
    # the mixture's default: the other three are byte-identical and must be (identical=False would fail them)
    mol = {c["name"]: c["passed"] for c in V.contract_checks(cp, "agent", data_verified=1.0, new_suite=([True] * 40, [False] * 40),
                                                            retention={"0": {c: (keep if c == "agent" else None) for c in CAPS}},
                                                            identical={c: False for c in CAPS}, alpha=0.05, n_boot=300, seed=0)}
    assert not mol["other adapters untouched"] and not mol["retention: chat on suite 0"]


# ------------------------------------------------------------------ forgetting on a hand example
def _items(k: int, n: int = 10) -> list[bool]:
    return [i < k for i in range(n)]


def _answers(per_version: dict[str, dict[str, dict[str, int]]], suite_of: dict[str, str]) -> dict:
    """version → suite → capability → items right (of 10)."""
    return {"suite_of": suite_of,
            "answers": {v: {sid: {c: _items(per[sid][c]) for c in CAPS} for sid in per} for v, per in per_version.items()}}


def _flat(k):
    return {c: k for c in CAPS}


# the mixture: v0 → v1 → v2, only genui's adapter was updated (its suite-2 score rose); nothing else moved
MOL = _answers({"v0": {"0": _flat(9), "1": _flat(8), "2": _flat(3)},
                "v1": {"0": _flat(9), "1": _flat(8), "2": _flat(5)},
                "v2": {"0": _flat(9), "1": {**_flat(8), "genui": 9}, "2": _flat(9)}}, {"v0": "0", "v1": "1", "v2": "2"})
# the monolith: the final version v2 lost chat on suite 0 (9 → 5) and agent on suite 1 (8 → 6); suite 2 (the final
# traffic's, not an earlier one) improved a lot — a reader of the wrong suite would see gains, not forgetting
MONO = _answers({"v0": {"0": _flat(9), "1": _flat(8), "2": _flat(3)},
                 "v1": {"0": _flat(8), "1": _flat(8), "2": _flat(6)},
                 "v2": {"0": {**_flat(9), "chat": 5}, "1": {**_flat(8), "agent": 6}, "2": _flat(10)}}, {"v0": "0", "v1": "2", "v2": "2"})


def test_forgetting_on_a_hand_example():
    suites = report.earlier_suites(MOL, final_shift=2)
    assert suites == ["0", "1"]  # the final traffic's suite 2 is not an earlier one
    mono = report.forgetting(MONO, suites)
    assert mono == pytest.approx({"chat": 0.2, "agent": 0.1, "coding": 0.0, "genui": 0.0})  # (0.4 + 0) / 2, (0 + 0.2) / 2
    mol = report.forgetting(MOL, suites)
    assert mol == pytest.approx({"chat": 0.0, "agent": 0.0, "coding": 0.0, "genui": -0.05})  # genui gained on suite 1
    # the final version, not an intermediate one: v1 of the monolith dropped every capability on suite 0 by 0.1
    assert report.forgetting({**MONO, "answers": {k: MONO["answers"][k] for k in ("v0", "v1")}}, suites)["coding"] == pytest.approx(0.05)
    table = report.forgetting_table({"mol": MOL, "monolith": MONO}, suites, seed=0)["forgetting"]
    assert len(table) == 2 * 4 and set(table["cluster"]) == {"0"} and set(table["unit"]) == set(CAPS)
    assert table.set_index(["arm", "unit"]).loc[("monolith", "chat"), "value"] == pytest.approx(0.2)
    assert report.forgetting_table({"mol": MOL, "monolith": MONO}, [], seed=0) == {}
    summary = report.forgetting_summary({"mol": MOL, "monolith": MONO}, suites)
    assert summary["arms"]["monolith"]["final_version"] == "v2" and summary["arms"]["monolith"]["mean"] == pytest.approx(0.075)


def _lineage(suite_hash="h0", accepted=True):
    hist = [{"step": s, "dev_success": min(1.0, s / 50)} for s in range(10, 310, 30)]
    ret = {"0": {c: {"candidate": 0.9 - 0.4 * (c == "chat"), "parent": 0.9} for c in CAPS}}
    return [{"candidate": "-", "status": "accepted", "version": "v0", "data": {"suites_sha256": {"0": suite_hash}}},
            {"candidate": "cand1", "status": "accepted" if accepted else "rejected", "version": "v1" if accepted else None,
             "capability": "agent", "history": hist, "retention_by_capability": ret,
             "data": {"suites_sha256": {"0": suite_hash, "1": "h1"}}}]


def _rates(single_ok=1.0):
    rows = [{"arm": arm, "seed": 0, "capability": c, "success": v} for c in CAPS
            for arm, v in (("specialists", 1.0), ("single_lora", single_ok), ("base", 0.0))]
    return pd.DataFrame(rows)


def test_forgetting_preconditions():
    p = _params()
    ok = {r["name"]: r["passed"] for r in report.forgetting_preconditions(p, _rates(), {0: {"mol": _lineage(), "monolith": _lineage()}}, EV)}
    assert all(ok[n] for n in (report.MONOLITH_LEARNED, report.BOTH_ACCEPTED, report.MONOLITH_UPDATES_CONVERGED, report.SAME_SUITES)), ok
    bad = {r["name"]: r["passed"] for r in report.forgetting_preconditions(
        p, _rates(single_ok=0.5), {0: {"mol": _lineage(), "monolith": _lineage("other", accepted=False)}}, EV)}
    assert not bad[report.MONOLITH_LEARNED] and not bad[report.BOTH_ACCEPTED] and not bad[report.SAME_SUITES]
    assert not bad[report.MONOLITH_UPDATES_CONVERGED]


def test_forgetting_preconditions_hold_in_every_loop_run():
    """Over seed → arm → lineage: one replicate whose monolith accepted nothing, or whose suites differ, or whose
    single LoRA did not learn, fails the precondition for the whole claim."""
    p = _params()
    rates = pd.concat([_rates(), _rates().assign(seed=1)], ignore_index=True)
    good = {0: {"mol": _lineage(), "monolith": _lineage()}, 1: {"mol": _lineage(), "monolith": _lineage()}}
    ok = {r["name"]: r for r in report.forgetting_preconditions(p, rates, good, EV)}
    assert all(ok[n]["passed"] for n in (report.MONOLITH_LEARNED, report.BOTH_ACCEPTED, report.MONOLITH_UPDATES_CONVERGED,
                                         report.SAME_SUITES)), ok
    assert "seed 1 monolith: 1 accepted" in ok[report.BOTH_ACCEPTED]["detail"]
    one_rejects = {**good, 1: {"mol": _lineage(), "monolith": _lineage(accepted=False)}}
    assert not {r["name"]: r["passed"] for r in report.forgetting_preconditions(p, rates, one_rejects, EV)}[report.BOTH_ACCEPTED]
    other_suite = {**good, 1: {"mol": _lineage("h9"), "monolith": _lineage("h9")}}
    assert not {r["name"]: r["passed"] for r in report.forgetting_preconditions(p, rates, other_suite, EV)}[report.SAME_SUITES]
    weak = pd.concat([_rates(), _rates(single_ok=0.5).assign(seed=1)], ignore_index=True)
    rec = {r["name"]: r for r in report.forgetting_preconditions(p, weak, good, EV)}[report.MONOLITH_LEARNED]
    assert not rec["passed"] and "seed 1 chat" in rec["detail"]
    # a seed with no single-LoRA results at all is a failure, not a skip
    assert not {r["name"]: r["passed"] for r in report.forgetting_preconditions(p, _rates(), good, EV)}[report.MONOLITH_LEARNED]


def test_forgetting_claim_one_loop_run_is_not_tested_two_are():
    p = _params()
    suites = report.earlier_suites(MOL, 2)
    pre = [{"name": n, "passed": True} for n in report.C3F_PRE]
    specs = report.forgetting_claim_specs(p, suites)
    one = report.forgetting_table({"mol": MOL, "monolith": MONO}, suites, seed=0)
    claim = evaluate_claims(specs, one, pre, EV, seed=0, track="mol")[0]
    # items and capabilities sit inside one loop run: no interval over them, the claim waits for a second seed
    assert claim["verdict"] == "not tested: at least 2 independent seeds" and claim["units"]["cluster"] == "seed"
    assert claim["method_mean"] == pytest.approx(-0.0125) and claim["baseline_mean"] == pytest.approx(0.075)
    two = {"forgetting": pd.concat([one["forgetting"], report.forgetting_table({"mol": MOL, "monolith": MONO}, suites, seed=1)["forgetting"]])}
    claim = evaluate_claims(specs, two, pre, EV, seed=0, track="mol")[0]
    assert not claim["verdict"].startswith("not tested") and claim["units"]["n_clusters"] == 2 and claim["units"]["n_units"] == 8
    assert claim["diff"] == pytest.approx(-0.0875) and not claim["higher_is_better"]  # the mixture forgot 0.0875 less
    failed = [dict(r, passed=r["name"] != report.SAME_SUITES) for r in pre]
    assert evaluate_claims(specs, two, failed, EV, seed=0, track="mol")[0]["verdict"] == f"not tested: {report.SAME_SUITES}"


def test_retention_rows_per_cycle_and_capability():
    rows = report.retention_rows({"mol": _lineage(), "monolith": _lineage()})
    assert len(rows) == 2 * 1 * 4  # two arms × one cycle × four capabilities on suite 0
    chat = rows[(rows["arm"] == "monolith") & (rows["capability"] == "chat")].iloc[0]
    assert chat["drop"] == pytest.approx(0.4) and chat["updated"] == "agent" and chat["suite"] == "0"
    assert set(report.retention_rows({"mol": _lineage()}, seed=1)["seed"]) == {1}


# ------------------------------------------------------------------ one cycle of the real loop, both layouts
def test_monolith_cycle_rewrites_only_its_one_adapter(tiny_repo, tiny_base, tmp_path):
    from paperworks.core.claims import load_evidence
    from paperworks.core.io import read_json
    from paperworks.core.params import global_seed, load_section, read_params_file
    from paperworks.mol.artifacts import read_world, seed_dir
    from paperworks.mol.loop import Loop
    from tests.mol.conftest import random_adapter

    base, cfg, tok = tiny_base
    tmp = tmp_path
    with contextlib.chdir(tiny_repo):
        p = load_section("mol", Params)
        g, world, ev = global_seed(read_params_file()), read_world(), load_evidence()
        mono_v0 = random_adapter(base, len(CAPS) * p.adapters.rank, p.adapters.alpha_over_rank, 7, tmp / "single_lora.safetensors")
        recs = {}
        for name, layout, v0 in (("mol", mol_layout(p), {c: seed_dir(p.versions.seed) / "adapters" / f"{c}.safetensors" for c in CAPS}),
                                 ("monolith", monolith_layout(p), {V.MONOLITH: mono_v0})):
            loop = Loop(p, g, world, tok, base, cfg, ev, layout)
            store = loop.new_store(tmp / name)
            loop.init_store(store, v0)
            before = {s: store.path("v0", s).read_bytes() for s in store.slots}
            recs[name] = loop.cycle(store, 1, tmp)
            assert {s: store.path("v0", s).read_bytes() for s in store.slots} == before  # v0 immutable
            recs[name]["store"] = store
    mol, mono = recs["mol"], recs["monolith"]
    assert set(mono["adapters"]) == {V.MONOLITH} and set(mol["adapters"]) == set(CAPS)
    assert [f.name for f in (mono["store"].root / "candidates" / "cand1").iterdir()] == ["monolith.safetensors"]
    assert mono["adapters"][V.MONOLITH] != read_json(mono["store"].root / "lineage.json")[0]["adapters"][V.MONOLITH]  # rewritten
    v0_mol = mol["store"].lineage()[0]["adapters"]
    assert [c for c in CAPS if mol["adapters"][c] != v0_mol[c]] == [mol["capability"]]  # the mixture: one of four files
    checks = {c["name"]: c for c in mono["checks"]}
    assert checks["other adapters untouched"]["passed"] and checks["other adapters untouched"]["threshold"] == 0
    assert all("byte-identical" not in checks[f"retention: {c} on suite 0"]["detail"] for c in CAPS)  # every capability compared
    assert sum("byte-identical" in c["detail"] for c in mol["checks"] if c["name"].startswith("retention")) == 3
    # the same loop: the same audit traffic, suites and (same weakest capability) the same seed problems and replay
    assert mol["config"]["update_steps"] == p.versions.update_steps and mono["config"]["rank"] == 4 * mol["config"]["rank"]
    assert mono["config"]["update_steps"] == (p.monolith.update_steps or p.versions.update_steps)
    assert mono["history"][-1]["step"] == mono["config"]["update_steps"]  # trained for its own steps
    assert mono["data"]["suites_sha256"] == mol["data"]["suites_sha256"]
    n_replay = min(p.versions.replay_items, sum(len(world["train"][c]) for c in CAPS))
    assert set(mono["data"]["replay_by_capability"]) == set(CAPS) and sum(mono["data"]["replay_by_capability"].values()) == n_replay
    assert all(v > 0 for v in mono["data"]["replay_by_capability"].values())  # every capability replayed
    assert mol["data"]["replay_by_capability"] == {mol["capability"]: mol["data"]["replay_items"]}
    if mono["weakest"] == mol["weakest"]:
        assert mono["data"]["problems_sha256"] == mol["data"]["problems_sha256"]
    for rec in (mol, mono):
        # the harness search ran on the file that answers the weakest capability (the monolith's one file)
        assert rec["harness"]["n_trials"] == p.versions.harness.trials and rec["harness"]["trials"][0]["label"] == "greedy"
        assert set(rec["retention_by_capability"]["0"]) == set(CAPS)
        assert rec["retention_by_capability"]["0"][rec["capability"]] == rec["retention"]["0"]
    untouched = [c for c in CAPS if c != mol["capability"]]
    assert all(mol["retention_by_capability"]["0"][c]["candidate"] == mol["retention_by_capability"]["0"][c]["parent"] for c in untouched)
    assert np.isfinite(mono["history"][-1]["dev_loss"])
