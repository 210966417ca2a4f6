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
                          "labels": [3.0, 0.0, 2.0]} for i in range(n)])


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
