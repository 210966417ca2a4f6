"""Adding a fifth specialist: its verifier, its data, and the operation that must leave the four others byte-identical."""
import hashlib

import numpy as np
import pytest

from paperworks.mol import fifth as F
from paperworks.mol import world as W
from tests.mol.conftest import tables

REQ = W.Request(verb="show", obj="invoices", owner="ana", status="open", limit=3)


def test_sql_verifier_accepts_equivalent_queries_and_rejects_near_misses():
    t = tables()
    assert F.target(REQ) == " select id from invoices where owner=ana and status=open limit 3"
    assert F.verify_sql(REQ, F.target(REQ), t)
    assert F.verify_sql(REQ, " select id from invoices where status=open and owner=ana limit 3", t)  # reordered conditions
    for wrong in ("select id from invoices where owner=ana and status=open limit 4",   # another limit
                  "select id from invoices where owner=bob and status=open limit 3",   # another owner
                  "select id from files where owner=ana and status=open limit 3",      # another table
                  "select id from invoices where owner=ana limit 3",                   # a condition dropped
                  "select count from invoices where owner=ana and status=open limit 3",
                  "select id from invoices and owner=ana where status=open limit 3",   # conditions out of grammar
                  'select id from invoices where owner=ana; drop table invoices',
                  W.target(REQ, "coding"), W.target(REQ, "agent"), "", "{", "select"):
        assert not F.verify_sql(REQ, wrong, t), wrong
    assert F.run_sql("select count from invoices where owner=ana", t[0]) == sum(r["owner"] == "ana" for r in t[0]["invoices"])
    with pytest.raises(W.DSLError):
        F.run_sql("select id from nowhere limit 3", t[0])
    # the combined dispatcher keeps the four verifiers
    assert F.verify("agent", REQ, W.target(REQ, "agent"), t) and not F.verify("agent", REQ, F.target(REQ), t)


def test_fifth_data_is_disjoint_and_tokenizable():
    from paperworks.core.lm import train_tokenizer
    from tests.mol.test_world import SMALL

    world = W.build_world(SMALL, 4)
    from paperworks.core.seeding import derive_seed

    data = F.build_data(world, SMALL, lambda *parts: np.random.default_rng(derive_seed(4, "test", *parts)))
    assert [len(data[s]) for s in ("train", "dev", "test")] == [SMALL.train_per_capability, SMALL.dev_per_capability,
                                                                  SMALL.test_per_capability]
    body = lambda x: W.request_from_dict(x).body()  # noqa: E731
    used = {body(x) for s in ("train", "dev", "test") for items in world[s].values() for x in items} | {
        body(x) for x in world["test_conversations"]} | {body(x) for x in data["train"] + data["dev"]}
    assert not used & {body(x) for x in data["test"]}
    assert all(x["cue"] in F.CUES and x["prompt"].startswith(f"user: {x['cue']} ") for x in data["train"])
    assert not {w for c in F.CUES for w in c.replace(",", " ").replace(":", " ").split()} & {
        w for cap in W.CAPABILITIES for c in W.CUES[cap] for w in c.split()} - {"to", "a", "for", "with", "in"}
    tok = train_tokenizer(world["corpus_train"], vocab_size=300)
    assert all(tok.unk_token_id not in tok(x["prompt"] + x["target"])["input_ids"] for x in data["test"])
    data["test"].append(data["train"][0])  # a planted leak is caught
    with pytest.raises(ValueError, match="test suite"):
        F.check_disjoint(world, data)


def _sha(tensors: dict) -> str:
    h = hashlib.sha256()
    for k in sorted(tensors):
        h.update(k.encode() + tensors[k].numpy().tobytes())
    return h.hexdigest()


def test_adding_a_specialist_leaves_the_four_byte_identical(tiny_repo, tiny_base, tmp_path):
    """Train the fifth adapter inside the model that holds the four: each of the four reads back identical, saved again it
    is the same file, and answers the same; the new adapter moved."""
    from paperworks.core.io import load_safetensors, save_safetensors
    from paperworks.mol.artifacts import seed_dir
    from paperworks.mol.models import LORA_TARGETS, generate, train_on
    from paperworks.mol.params import AdapterParams

    base, cfg, tok = tiny_base
    src = {cap: tiny_repo / seed_dir(0) / "adapters" / f"{cap}.safetensors" for cap in W.CAPABILITIES}
    served = {cap: load_safetensors(f) for cap, f in src.items()}
    model = F.deployment(base, 2, 2.0, served, seed=0)
    prompts = [x["prompt"] for x in F.make_items(np.random.default_rng(3), 6)]
    before = {}
    for cap in W.CAPABILITIES:
        model.set_adapter(cap)
        before[cap] = generate(model, tok, prompts, 12)
    assert len({tuple(v) for v in before.values()}) == 4  # the four answer differently: the check below can see a swap

    F.add_specialist(model, F.CAPABILITY, 2, 2.0, seed=5)
    init = {k: v.clone() for k, v in F.adapter_tensors(model, F.CAPABILITY).items()}
    a = AdapterParams(seeds=[0], rank=2, steps=8, eval_every=4, batch_size=4, max_new_tokens=12, lr=1e-2)
    items = F.make_items(np.random.default_rng(1), 24)
    train_on(model, tok, items, items[:4], 8, 1e-2, a, cfg.max_positions, 0, 4, None, "sql")
    assert _sha(F.adapter_tensors(model, F.CAPABILITY)) != _sha(init)  # the new one trained
    meta = {"rank": "2", "alpha": "4.0", "targets": ",".join(LORA_TARGETS)}
    for cap in W.CAPABILITIES:
        again = F.adapter_tensors(model, cap)
        assert _sha(again) == _sha(served[cap]), cap
        save_safetensors(tmp_path / f"{cap}.safetensors", again, metadata=meta)
        assert (tmp_path / f"{cap}.safetensors").read_bytes() == src[cap].read_bytes(), cap  # byte-identical file
        model.set_adapter(cap)
        assert generate(model, tok, prompts, 12) == before[cap], cap


def test_add_specialist_refuses_when_anything_else_would_train(tiny_repo, tiny_base):
    from paperworks.core.io import load_safetensors
    from paperworks.mol.artifacts import seed_dir

    base, _, _ = tiny_base
    model = F.deployment(base, 2, 2.0, {"chat": load_safetensors(tiny_repo / seed_dir(0) / "adapters" / "chat.safetensors")}, seed=0)
    assert not any(p.requires_grad for p in model.parameters())
    next(p for n, p in model.named_parameters() if "embed_tokens" in n).requires_grad_(True)  # a base weight left trainable
    with pytest.raises(RuntimeError, match="would train"):
        F.add_specialist(model, F.CAPABILITY, 2, 2.0, seed=5)


def test_five_route_router_and_rules_refusal():
    from paperworks.mol.router import fit_router, route_conversations
    from tests.mol.test_world import SMALL

    world = W.build_world(SMALL, 4)
    sql = F.make_items(np.random.default_rng(0), 40)
    texts = [x["prompt"] for x in world["train"]["agent"] + world["train"]["chat"]] + [x["prompt"] for x in sql[:20]]
    labels = ["agent"] * SMALL.train_per_capability + ["chat"] * SMALL.train_per_capability + ["sql"] * 20
    routes = (*W.CAPABILITIES, F.CAPABILITY)
    router = fit_router("tfidf_lr", texts, labels, 0, labels=routes)
    proba = router([x["prompt"] for x in sql[20:]])
    assert proba.shape == (20, 5) and (proba.argmax(1) == 4).all()
    turns = [{"conversation": 0, "turn": i, "capability": "sql"} for i in range(20)]
    assert {r["route"] for r in route_conversations(turns, proba, 0.5, routes)} == {"sql"}
    with pytest.raises(ValueError, match="rules"):
        fit_router("rules", texts, labels, 0, labels=routes)
    with pytest.raises(ValueError, match="not among the routes"):
        fit_router("tfidf_lr", texts, labels, 0)
