"""The mol world: deterministic, disjoint suites, and verifiers that accept the reference answer and
reject near-misses (never executing model text)."""
import json

import numpy as np
import pytest

from paperworks.mol import world as W
from paperworks.mol.params import WorldParams

SMALL = WorldParams(train_per_capability=40, dev_per_capability=4, test_per_capability=10, router_train_conversations=6,
                    test_conversations=6, pretrain_docs=60)
REQ = W.Request(verb="show", obj="invoices", owner="ana", status="open", limit=3)
TABLES = [W.hidden_tables(np.random.default_rng(k)) for k in range(3)]


def test_world_is_deterministic_and_seed_dependent():
    a, b = W.build_world(SMALL, 7), W.build_world(SMALL, 7)
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert json.dumps(W.build_world(SMALL, 8), sort_keys=True) != json.dumps(a, sort_keys=True)


def test_default_profile_world_builds():
    """At the default sizes the suites still find unused requests (the draw space is 3,888 requests)."""
    import yaml

    from paperworks.core.params import validate_section
    from paperworks.mol.params import Params
    from tests.mol.test_params import CONF

    p = validate_section("mol", Params, yaml.safe_load((CONF / "default" / "mol.yaml").read_text()))
    w = W.build_world(p.world, 20261130)
    assert len(w["test"]["agent"]) == p.world.test_per_capability


def test_suites_never_repeat_a_training_request():
    w = W.build_world(SMALL, 3)
    body = lambda x: W.request_from_dict(x).body()  # noqa: E731
    train = {body(x) for s in ("train", "dev") for items in w[s].values() for x in items}
    test = {body(x) for items in w["test"].values() for x in items} | {body(x) for x in w["test_conversations"]}
    assert train and test and not train & test
    w["test"]["chat"].append(w["train"]["agent"][0])  # a planted leak is caught
    with pytest.raises(ValueError, match="share no|test"):
        W.check_disjoint(w)


def test_conversations_switch_and_neutral_turns_continue():
    rows = W.make_conversations(np.random.default_rng(0), 200, (2, 4), 0.3)
    by = {}
    for r in rows:
        by.setdefault(r["conversation"], []).append(r)
    for turns in by.values():
        assert 2 <= len(turns) <= 4
        for prev, cur in zip(turns, turns[1:]):
            if cur["cue"] == W.NEUTRAL_CUE:
                assert cur["capability"] == prev["capability"]
            else:
                assert cur["capability"] != prev["capability"]
    assert any(r["cue"] == W.NEUTRAL_CUE for r in rows)


@pytest.mark.parametrize("cap", W.CAPABILITIES)
def test_reference_answers_verify_and_have_their_format(cap):
    out = W.target(REQ, cap)
    assert W.verify(cap, REQ, out, TABLES)
    assert W.output_format(out) == cap
    for other in W.CAPABILITIES:  # another capability's answer to the same request fails
        if other != cap:
            assert not W.verify(cap, REQ, W.target(REQ, other), TABLES)


def test_near_misses_fail():
    assert W.target(REQ, "chat") == " here are three open invoices of ana."
    assert not W.verify_chat(REQ, " here are 3 open invoices of ana.")        # digits in prose
    assert not W.verify_chat(REQ, " here are three open invoices of bob.")    # wrong owner
    assert not W.verify_chat(REQ, " here are three two open invoices of ana.")  # two numbers
    call = json.loads(W.target(REQ, "agent"))
    call["args"]["limit"] = 4
    assert not W.verify_agent(REQ, json.dumps(call))                           # wrong argument
    call["args"]["limit"] = "3"
    assert not W.verify_agent(REQ, json.dumps(call))                           # schema: integer
    assert not W.verify_agent(REQ, '{"tool": "find_invoices", "args": {"owner": "ana", "status": "open", "limit": 3}, "x": 1}')
    spec = json.loads(W.target(REQ, "genui"))
    spec["type"] = "list"                                                      # content rule: show → table
    assert not W.verify_genui(REQ, json.dumps(spec))


def test_dsl_verifier_accepts_equivalent_programs_and_rejects_code():
    swapped = " invoices|where(status=open)|where(owner=ana)|take(3)"
    assert W.verify_coding(REQ, swapped, TABLES)
    assert not W.verify_coding(REQ, " invoices|where(owner=ana)|take(3)", TABLES)
    for bad in ("__import__('os').system('true')", "invoices|eval(1)", "invoices|take(3)|where(owner=ana", ""):
        assert not W.verify_coding(REQ, bad, TABLES)
    t = {"invoices": [{"id": i, "owner": o, "status": s} for i, (o, s) in enumerate([("ana", "open"), ("bob", "open"), ("ana", "draft")])]}
    assert W.run_dsl("invoices|where(status=open)|count", t) == 2
    assert W.run_dsl("invoices|sort(owner)|take(1)", t) == [t["invoices"][0]]
    with pytest.raises(W.DSLError):
        W.run_dsl("invoices|count|take(1)", t)


def test_output_format_classifies_contamination():
    assert W.output_format(' {"tool": "find_files", "args": {}}') == "agent"
    assert W.output_format(' {"type": "table", "props": {"source": "files"') == "genui"  # broken JSON still classified
    assert W.output_format(" files|take(2)") == "coding"
    assert W.output_format(" here are two files.") == "chat"
    assert W.output_format(" 12 ") == "other"


def test_router_train_draw_is_one_stream_per_adapter_seed_and_disjoint_from_the_suites():
    w = W.build_world(SMALL, 3)
    a0, a0_again, a1 = W.router_train_draw(SMALL, 3, 0, w), W.router_train_draw(SMALL, 3, 0, w), W.router_train_draw(SMALL, 3, 1, w)
    assert a0 == a0_again
    assert [x["prompt"] for x in a0] != [x["prompt"] for x in a1]  # the two seeds' routers see different conversations
    assert len({x["conversation"] for x in a0}) == SMALL.router_train_conversations
    body = lambda x: W.request_from_dict(x).body()  # noqa: E731
    suites = {body(x) for items in w["test"].values() for x in items} | {body(x) for x in w["test_conversations"]}
    assert not suites & {body(x) for x in a0 + a1}
