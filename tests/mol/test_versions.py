"""The versioned loop's registry and contract: an accepted candidate becomes the served version; a rejected one
leaves the accepted files byte-identical and serving; rollback; corruption detected; the contract's checks fail
where they should; trajectories are kept only when verified; update data never touches an acceptance suite."""
import json

import numpy as np
import pytest
import torch

from paperworks.core.io import ArtifactError, save_safetensors
from paperworks.mol import versions as V
from paperworks.mol import world as W
from paperworks.mol.params import ContractParams

TABLES = [W.hidden_tables(np.random.default_rng(k)) for k in range(2)]


def _adapter(path, value: float):
    save_safetensors(path, {"lora_A": torch.full((2, 3), value), "lora_B": torch.zeros(3, 2)}, metadata={"rank": "2"})
    return path


def _passing(cap="agent"):
    return [{"name": "all good", "passed": True}]


def _bytes(store, version):
    return {cap: store.path(version, cap).read_bytes() for cap in W.CAPABILITIES}


@pytest.fixture
def store(tmp_path):
    s = V.VersionStore(tmp_path / "versions")
    src = {cap: _adapter(tmp_path / f"{cap}.safetensors", float(i)) for i, cap in enumerate(W.CAPABILITIES)}
    s.init(src, {"candidate": "-"})
    return s


def test_accept_then_reject_leaves_accepted_files_and_serving(store, tmp_path):
    rec = store.propose("cand1", "agent", _adapter(tmp_path / "new_agent.safetensors", 9.0), _passing(), {"shift": 1})
    assert rec["status"] == "accepted" and rec["version"] == "v1" and rec["parent"] == "v0"
    served = store.serving()
    assert served["version"] == "v1"
    assert served["adapters"]["agent"].read_bytes() == (tmp_path / "new_agent.safetensors").read_bytes()
    for cap in ("chat", "coding", "genui"):  # untouched adapters: the parent's bytes
        assert store.path("v1", cap).read_bytes() == store.path("v0", cap).read_bytes()
    before = {v: _bytes(store, v) for v in ("v0", "v1")}
    pointer = (store.root / V.SERVING).read_bytes()

    bad = [{"name": "update data verified", "passed": False}, {"name": "retention: agent on suite 0", "passed": True}]
    rec = store.propose("cand2", "agent", _adapter(tmp_path / "broken.safetensors", -5.0), bad, {"shift": 2})
    assert rec["status"] == "rejected" and rec["version"] is None and rec["parent"] == "v1"
    assert rec["failed_checks"] == ["update data verified"] and "update data verified" in rec["reason"]
    assert {v: _bytes(store, v) for v in ("v0", "v1")} == before          # byte-identical
    assert (store.root / V.SERVING).read_bytes() == pointer               # still serving v1
    assert store.serving()["version"] == "v1"
    assert (store.root / "candidates" / "cand2" / "agent.safetensors").exists()  # kept for inspection, not served
    assert not (store.root / "accepted" / "v2").exists()
    assert [r["status"] for r in store.lineage()] == ["accepted", "accepted", "rejected"]
    md = V.lineage_markdown(store.lineage(), "v1")
    assert "Serving: **v1**" in md and "| cand2 | - | v1 | rejected |" in md


def test_no_checks_is_a_rejection(store, tmp_path):
    rec = store.propose("cand1", "chat", _adapter(tmp_path / "c.safetensors", 3.0), [], {})
    assert rec["status"] == "rejected" and store.serving()["version"] == "v0"


def test_rollback_and_corruption(store, tmp_path):
    store.propose("cand1", "genui", _adapter(tmp_path / "g.safetensors", 7.0), _passing(), {})
    V.main(["rollback", "v0", "--root", str(store.root)])          # the one command
    assert store.serving()["version"] == "v0"
    assert (store.root / "lineage.md").read_text().startswith("Serving: **v0**")
    with pytest.raises(ValueError, match="accepted: v0, v1"):
        store.rollback("v7")
    store.rollback("v1")
    path = store.path("v1", "genui")
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(ArtifactError, match="altered"):
        store.serving()
    with pytest.raises(ArtifactError, match="already holds"):
        store.init({}, {})


CP = ContractParams(min_success=0.8, require_improvement=True, retention_margin=0.05, min_data_verified=1.0)
SAME = {c: c != "agent" for c in W.CAPABILITIES}


def _checks(**kw):
    args = dict(data_verified=1.0, new_suite=([True] * 40, [True] * 20 + [False] * 20),
                retention={"0": {c: (([True] * 40, [True] * 40) if c == "agent" else None) for c in W.CAPABILITIES}},
                identical=SAME, alpha=0.05, n_boot=500, seed=0)
    args.update(kw)
    return {c["name"]: c["passed"] for c in V.contract_checks(CP, "agent", **args)}


def test_contract_passes_a_good_candidate():
    checks = _checks()
    assert all(checks.values()), checks
    assert "retention: chat on suite 0" in checks  # identity stands in for the untouched adapters


def test_contract_fails_where_it_should():
    assert not _checks(data_verified=0.9)["update data verified"]
    assert not _checks(new_suite=([True] * 30 + [False] * 10, [False] * 40))["agent on the new suite ≥ 0.8"]
    assert not _checks(new_suite=([True] * 40, [True] * 40))["agent better than the parent on the new suite"]
    forgot = {"0": {c: (([True] * 30 + [False] * 10, [True] * 40) if c == "agent" else None) for c in W.CAPABILITIES}}
    assert not _checks(retention=forgot)["retention: agent on suite 0"]          # lost 25 points of the old suite
    one_slip = {"0": {c: (([True] * 63 + [False], [True] * 64) if c == "agent" else None) for c in W.CAPABILITIES}}
    assert _checks(retention=one_slip)["retention: agent on suite 0"]            # one item of 64 is within 5 points
    touched = dict(SAME, chat=False)
    out = _checks(identical=touched)
    assert not out["other adapters untouched"] and not out["retention: chat on suite 0"]


def test_trajectories_kept_only_when_verified():
    rng = np.random.default_rng(0)
    problems = W.make_items(rng, "agent", 30, 0.0, verbs=("export",))
    wrong = [W.target(W.request_from_dict(x), "genui") for x in problems]  # the served adapter answers in the wrong format
    kept, stats = V.propose_trajectories(np.random.default_rng(1), problems, "agent", wrong, 3, 0.5, TABLES, faulty=False)
    assert stats["proposed"] == 30 * 4 and stats["kept_from_model"] == 0
    assert 0 < stats["kept"] < 30 * 3
    assert V.verified_share_of(kept, "agent", TABLES) == 1.0
    assert all(json.loads(x["target"])["tool"].startswith("export_") for x in kept)
    bad, _ = V.propose_trajectories(np.random.default_rng(1), problems, "agent", wrong, 3, 0.5, TABLES, faulty=True)
    assert V.verified_share_of(bad, "agent", TABLES) == 0.0  # the mislabelled data the contract must catch


def test_loop_data_disjoint_and_shifted():
    from paperworks.mol.params import CycleParams, VersionsParams
    from tests.mol.test_world import SMALL

    world = W.build_world(SMALL, 5)
    vp = VersionsParams(seed=0, cycles=[CycleParams(shift=1), CycleParams(shift=2, faulty=True)], audit_per_capability=6,
                        suite_per_capability=8, dev_per_capability=40, seed_problems=8, replay_items=4, update_steps=2, eval_every=1)
    from paperworks.core.seeding import derive_seed

    data = V.build_loop_data(world, vp, 0.25, lambda *parts: np.random.default_rng(derive_seed(5, "test", *parts)))
    assert set(data["suites"]) == {"0", "1", "2"} and len(data["audit"]) == 2
    assert {x["verb"] for x in data["suites"]["1"]["agent"]} <= {*W.VERBS, "export"}
    assert "plot" in {x["verb"] for cap in W.CAPABILITIES for x in data["suites"]["2"][cap]}
    trained = {V.body(x) for s in ("train", "dev") for items in world[s].values() for x in items}
    assert not trained & {V.body(x) for s in data["suites"].values() for items in s.values() for x in items}
    # dev pools pick the update's checkpoint: they must not repeat the training pool the update replays
    assert not trained & {V.body(x) for d in data["dev"].values() for items in d.values() for x in items}
    held = V.held_out_bodies(world, data["suites"])
    V.check_update_disjoint(world["train"]["agent"], held)
    with pytest.raises(ValueError, match="acceptance-suite"):
        V.check_update_disjoint([data["suites"]["1"]["genui"][0]], held)


def test_new_verbs_extend_registry_and_components():
    req = W.Request(verb="export", obj="files", owner="bob", status="draft", limit=2)
    assert json.loads(W.target(req, "agent"))["tool"] == "export_files"
    assert W.verify_agent(req, W.target(req, "agent"))
    assert not W.verify_agent(req, W.target(W.Request("show", "files", "bob", "draft", 2), "agent"))  # the old find_ tool
    plot = W.Request(verb="plot", obj="files", owner="bob", status="draft", limit=2)
    assert json.loads(W.target(plot, "genui"))["type"] == "chart" and W.verify_genui(plot, W.target(plot, "genui"))
    assert "export_files" not in W.registry(0) and "export_files" in W.registry(1)
    assert {"export_report", "find_files"} <= set(W.registry(0)) and len(W.registry(1)) == len(W.registry(0)) + 4
    assert "chart" not in W.components(1) and "chart" in W.components(2)
    assert W.prompt_text(req, W.WEAK_CUES["agent"]).endswith("limit 2, as json call\nassistant:")


def test_count_verb_breaks_only_the_coding_format():
    count = W.Request(verb="count", obj="files", owner="bob", status="draft", limit=3)
    show = W.Request(verb="show", obj="files", owner="bob", status="draft", limit=3)
    tables = [W.hidden_tables(np.random.default_rng(s)) for s in range(3)]
    assert W.target(count, "coding").endswith("|take(3)|count")
    assert W.verify_coding(count, W.target(count, "coding"), tables)
    assert isinstance(W.run_dsl(W.target(count, "coding"), tables[0]), int)
    # the shift-0 program (a list, not a number) fails the count request: coding is what shift 3 breaks
    assert not W.verify_coding(count, W.target(show, "coding"), tables)
    for cap in ("chat", "agent", "genui"):  # the other three formats answer a count request as before
        expected = W.target(show, cap).replace('"table"', '"card"') if cap == "genui" else W.target(show, cap)
        assert W.target(count, cap) == expected
        assert W.verify(cap, count, W.target(count, cap), tables)
    assert W.registry(3) == W.registry(2) and W.components(3) == W.components(2)
