"""One reranker run = load a backbone, (optionally) fine-tune listwise, score lists.

Shared by the grid, tuning and seed stages so every configuration is trained and
scored the same way.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import pandas as pd

from paperworks.insurance import crossencoder as ce
from paperworks.insurance.params import Params


def train_config(p: Params, loss: str, freeze: str, seed: int, **overrides) -> ce.TrainConfig:
    t = p.train
    base = dict(loss=loss, freeze=freeze, lr=t.lr, epochs=t.epochs, warmup_ratio=t.warmup_ratio,
                batch_lists=t.batch_lists, train_list_size=t.train_list_size, weight_decay=t.weight_decay,
                max_length=p.backbone.max_length, seed=seed)
    base.update(overrides)
    return ce.TrainConfig(**base)


def evaluate(model, lists: pd.DataFrame, ks) -> pd.DataFrame:
    return ce.per_query_metrics(lists, ce.score_lists(model, lists), ks)


def fine_tune(backbone_dir: Path, train: pd.DataFrame, cfg: ce.TrainConfig,
              on_step: Callable[[int, float], None] | None = None,
              on_epoch_model: Callable[[object, int], None] | None = None):
    """A fresh cross-encoder on ``backbone_dir`` fine-tuned with ``cfg``; returns (model, record)."""
    model = ce.load_cross_encoder(backbone_dir, cfg.max_length, cfg.seed)
    record = ce.train_listwise(model, train, cfg, on_step=on_step,
                               on_epoch=(lambda e: on_epoch_model(model, e)) if on_epoch_model else None)
    return model, record
