"""Every loss × freezing strategy trains a tiny random cross-encoder; freezing fixes what it says."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from paperworks.insurance import backbone as bb
from paperworks.insurance import crossencoder as ce


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    model, tok = bb.base_bert("tiny_random", 16, 4, seed=0)
    path = tmp_path_factory.mktemp("tiny") / "general"
    bb.save_backbone(model, tok, path)
    return path


def lists(n=4):
    return pd.DataFrame([{"query_id": i, "query": "my knee is swollen", "intent": "symptom",
                          "docs": ["arthrocentesis of the knee joint", "x-ray of the hip joint", "mri of the knee joint"],
                          "labels": [3.0, 0.0, 2.0], "ideal_labels": [3.0, 2.0, 0.0]} for i in range(n)])


@pytest.mark.parametrize("loss", ce.LOSSES)
@pytest.mark.parametrize("freeze", ce.FREEZES)
def test_each_loss_and_freezing_trains(tiny_dir, loss, freeze):
    model = ce.load_cross_encoder(tiny_dir, 32, seed=0)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    rec = ce.train_listwise(model, lists(), ce.TrainConfig(loss=loss, freeze=freeze, lr=1e-3, batch_lists=2))
    assert rec["steps"] == 2 and np.isfinite(rec["final_loss"])
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    emb = {n for n in before if ".embeddings." in n}
    lower = {n for n in before if ".encoder.layer.0." in n or ".encoder.layer.1." in n}
    upper = {n for n in before if ".encoder.layer.3." in n}
    assert changed & upper  # the top layer always trains
    if freeze == "none":
        assert changed & emb
    else:
        assert not changed & emb
    if freeze == "embeddings_lower_half":
        assert not changed & lower
    scores = ce.score_lists(model, lists(2))
    assert len(scores) == 2 and all(len(s) == 3 for s in scores)


@pytest.mark.parametrize("n_layers", [4, 5, 6])
def test_lower_half_freezing_stops_exactly_at_the_middle_layer(tmp_path, n_layers):
    """Layers 0 … n//2 - 1 and the embeddings are frozen; layer n//2 and above, the pooler and the
    head train (MiniLM-L6: layers 0–2 frozen, 3–5 train)."""
    model_, tok = bb.base_bert("tiny_random", 8, n_layers, seed=0)
    bb.save_backbone(model_, tok, tmp_path / "m")
    model = ce.load_cross_encoder(tmp_path / "m", 16, seed=0)
    trainable, total = ce.apply_freezing(model, "embeddings_lower_half")
    layers = {}
    for name, p in model.named_parameters():
        if (m := ce._LAYER.search(name)):
            layers.setdefault(int(m.group(1)), set()).add(p.requires_grad)
    assert sorted(layers) == list(range(n_layers))
    assert {i for i, flags in layers.items() if flags == {False}} == set(range(n_layers // 2))
    assert {i for i, flags in layers.items() if flags == {True}} == set(range(n_layers // 2, n_layers))
    assert all(not p.requires_grad for n, p in model.named_parameters() if ".embeddings." in n)
    assert all(p.requires_grad for n, p in model.named_parameters() if "classifier" in n or "pooler" in n)
    assert trainable == sum(p.numel() for p in model.parameters() if p.requires_grad) < total


def test_early_stopping_waits_min_epochs_then_patience_and_keeps_the_best_point(tiny_dir):
    model = ce.load_cross_encoder(tiny_dir, 32, seed=0)
    values = iter([0.5, 0.6, 0.9, 0.4, 0.3, 0.2, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1])
    snapshots = []

    def validate(m):
        snapshots.append({n: p.detach().clone() for n, p in m.named_parameters()})
        return next(values)

    cfg = ce.TrainConfig(loss="listnet", freeze="none", lr=1e-2, epochs=5, min_epochs=2, evals_per_epoch=2, patience=2,
                         batch_lists=2)  # 4 lists: 2 steps per epoch, a point after every step
    rec = ce.train_listwise(model, lists(), cfg, validate=validate)
    # points at steps 0 (before training), 1, 2, 3, 4: the best is step 2; after 2 stale points (steps 3, 4) it stops,
    # and not before the end of epoch 2 (step 4)
    assert [s for s, _ in rec["val_curve"]] == [0, 1, 2, 3, 4]
    assert rec["stopped_early"] and rec["steps"] == 4 and rec["best_step"] == 2 and rec["best_val_ndcg@3"] == 0.9
    assert rec["epochs_run"] == 2.0 and len(rec["loss_curve"]) == 4
    best = snapshots[2]  # weights as they were at step 2
    assert all(torch.equal(p, best[n]) for n, p in model.named_parameters())


def test_min_epochs_hold_off_early_stopping(tiny_dir):
    model = ce.load_cross_encoder(tiny_dir, 32, seed=0)
    cfg = ce.TrainConfig(loss="listnet", freeze="none", lr=1e-3, epochs=3, min_epochs=3, evals_per_epoch=1, patience=1,
                         batch_lists=2)
    rec = ce.train_listwise(model, lists(), cfg, validate=lambda m: 0.5)  # never improves
    assert rec["steps"] == 6 and not rec["stopped_early"] and [s for s, _ in rec["val_curve"]] == [0, 2, 4, 6]


def test_unknown_freezing_is_rejected(tiny_dir):
    model = ce.load_cross_encoder(tiny_dir, 32, seed=0)
    with pytest.raises(ValueError, match="allowed: none, embeddings, embeddings_lower_half"):
        ce.apply_freezing(model, "top_half")


def test_mlm_adaptation_changes_encoder_and_keeps_pooler(tiny_dir):
    from transformers import BertModel

    corpus = ["arthrocentesis of the knee joint is also called a joint tap."] * 8
    enc, _tok = bb.mlm_adapt(tiny_dir, corpus, bb.MLMConfig(steps=3, batch_size=4, lr=1e-3, mlm_probability=0.3,
                                                              max_length=24, seed=0))
    general = BertModel.from_pretrained(tiny_dir)
    assert not torch.equal(enc.encoder.layer[0].attention.self.query.weight, general.encoder.layer[0].attention.self.query.weight)
    assert torch.equal(enc.pooler.dense.weight, general.pooler.dense.weight)
