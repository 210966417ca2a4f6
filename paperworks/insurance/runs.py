"""One reranker run = load a backbone, fine-tune listwise with early stopping, score lists.

Shared by the grid, tuning and seed stages so every configuration is trained and
scored the same way.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from paperworks.insurance import crossencoder as ce
from paperworks.insurance.params import Params


def train_config(p: Params, loss: str, freeze: str, seed: int, **overrides) -> ce.TrainConfig:
    t = p.train
    base = dict(loss=loss, freeze=freeze, lr=t.lr, epochs=t.epochs, min_epochs=t.min_epochs,
                evals_per_epoch=t.evals_per_epoch, patience=t.patience, min_delta=t.min_delta,
                warmup_ratio=t.warmup_ratio, batch_lists=t.batch_lists, train_list_size=t.train_list_size,
                weight_decay=t.weight_decay, max_length=p.backbone.max_length, seed=seed)
    base.update(overrides)
    base["min_epochs"] = min(base["min_epochs"], base["epochs"])  # a tuned epoch cap below min_epochs wins
    return ce.TrainConfig(**base)


def early_stop_lists(val: pd.DataFrame, n: int, seed: int) -> pd.DataFrame:
    """The seeded validation subset scored at every early-stopping point (the whole set if smaller)."""
    if n >= len(val):
        return val
    return val.iloc[np.sort(np.random.default_rng(seed).choice(len(val), size=n, replace=False))].reset_index(drop=True)


def evaluate(model, lists: pd.DataFrame, ks) -> pd.DataFrame:
    return ce.per_query_metrics(lists, ce.score_lists(model, lists), ks)


def fine_tune(backbone_dir: Path, train: pd.DataFrame, cfg: ce.TrainConfig, val: pd.DataFrame,
              on_step: Callable[[int, float], None] | None = None,
              on_eval: Callable[[int, float], None] | None = None):
    """A fresh cross-encoder on ``backbone_dir`` fine-tuned with ``cfg``, early-stopped on ``val``
    (mean NDCG@3); returns (model at its best validation point, training record)."""
    model = ce.load_cross_encoder(backbone_dir, cfg.max_length, cfg.seed)
    record = ce.train_listwise(model, train, cfg, validate=lambda m: float(evaluate(m, val, [3])["ndcg@3"].mean()),
                               on_step=on_step, on_eval=on_eval)
    return model, record
