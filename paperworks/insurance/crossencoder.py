"""Listwise fine-tuning of a cross-encoder — one readable training loop (CleanRL style).

The model and the losses are sentence-transformers' own (``CrossEncoder``,
``LambdaLoss`` / ``ListNetLoss`` / ``PListMLELoss``); the loop around them is explicit
so freezing, warm-up, per-epoch validation (Optuna pruning) and dvclive logging are
visible in one place.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from paperworks.core.ranking import ndcg_at_k, rank_by_score, reciprocal_rank, spearman

LOSSES = ("lambdaloss", "listnet", "plistmle")
FREEZES = ("none", "embeddings", "embeddings_lower_half")
MRR_GRADE = 2.0  # a candidate counts as relevant for MRR from grade 2 up


@dataclass
class TrainConfig:
    loss: str
    freeze: str
    lr: float = 5e-5
    epochs: int = 1
    warmup_ratio: float = 0.1
    batch_lists: int = 4
    train_list_size: int = 8
    weight_decay: float = 0.01
    max_length: int = 48
    seed: int = 0


def load_cross_encoder(backbone_dir: Path | str, max_length: int, seed: int):
    """A CrossEncoder with one output (listwise losses need ``num_labels=1``); the head is seeded."""
    from sentence_transformers.cross_encoder import CrossEncoder

    torch.manual_seed(seed)
    return CrossEncoder(str(backbone_dir), num_labels=1, max_length=max_length, device="cpu")


def make_loss(name: str, model):
    from sentence_transformers.cross_encoder import losses

    if name == "lambdaloss":
        return losses.LambdaLoss(model, weighting_scheme=losses.NDCGLoss2PPScheme())
    if name == "listnet":
        return losses.ListNetLoss(model)
    if name == "plistmle":
        # lists are sorted by label before the loss sees them (see listwise_batch)
        return losses.PListMLELoss(model, respect_input_order=True)
    raise ValueError(f"unknown loss '{name}' (allowed: {', '.join(LOSSES)})")


_LAYER = re.compile(r"\.encoder\.layer\.(\d+)\.")


def apply_freezing(model, strategy: str) -> tuple[int, int]:
    """Freeze by strategy; returns (trainable, total) parameter counts.

    none: everything trains; embeddings: the embedding block is fixed;
    embeddings_lower_half: embeddings and the lower half of the transformer layers are fixed.
    """
    if strategy not in FREEZES:
        raise ValueError(f"unknown freezing strategy '{strategy}' (allowed: {', '.join(FREEZES)})")
    names = [n for n, _ in model.named_parameters()]
    n_layers = 1 + max((int(m.group(1)) for n in names if (m := _LAYER.search(n))), default=-1)
    for name, p in model.named_parameters():
        frozen = False
        if strategy != "none" and ".embeddings." in name:
            frozen = True
        if strategy == "embeddings_lower_half" and (m := _LAYER.search(name)) and int(m.group(1)) < n_layers // 2:
            frozen = True
        p.requires_grad_(not frozen)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable, sum(p.numel() for p in model.parameters())


def listwise_batch(rows: Sequence, list_size: int) -> tuple[list[str], list[list[str]], list[torch.Tensor]]:
    """(queries, docs per query, labels per query), each list cut to its first-stage top ``list_size``
    and sorted by label (stable), the order PListMLE's Plackett–Luce likelihood expects."""
    queries, docs, labels = [], [], []
    for r in rows:
        d, l = list(r.docs)[:list_size], np.asarray(r.labels, dtype=np.float32)[:list_size]
        order = np.argsort(-l, kind="stable")
        queries.append(r.query)
        docs.append([d[i] for i in order])
        labels.append(torch.tensor(l[order]))
    return queries, docs, labels


def train_listwise(model, train_lists: pd.DataFrame, cfg: TrainConfig,
                   on_step: Callable[[int, float], None] | None = None,
                   on_epoch: Callable[[int], None] | None = None) -> dict:
    """Fine-tune ``model`` in place with a listwise loss; returns a small training record."""
    loss_fn = make_loss(cfg.loss, model)
    trainable, total = apply_freezing(model, cfg.freeze)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    rows = list(train_lists.itertuples(index=False))
    steps_per_epoch = int(np.ceil(len(rows) / cfg.batch_lists))
    total_steps = steps_per_epoch * cfg.epochs
    warmup = int(cfg.warmup_ratio * total_steps)
    # linear warm-up then linear decay to 0
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / (warmup + 1) if s < warmup else max(0.0, (total_steps - s) / max(1, total_steps - warmup)))
    rng = np.random.default_rng(cfg.seed)
    step = 0
    losses = []
    for epoch in range(cfg.epochs):
        model.train()
        order = rng.permutation(len(rows))
        for b in tqdm(range(steps_per_epoch), desc=f"{cfg.loss}/{cfg.freeze} epoch {epoch}", mininterval=2):
            batch = [rows[i] for i in order[b * cfg.batch_lists:(b + 1) * cfg.batch_lists]]
            queries, docs, labels = listwise_batch(batch, cfg.train_list_size)
            loss = loss_fn([queries, docs], labels)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            sched.step()
            losses.append(float(loss.detach()))
            if on_step is not None:
                on_step(step, losses[-1])
            step += 1
        model.eval()
        if on_epoch is not None:
            on_epoch(epoch)
    return {"steps": step, "final_loss": losses[-1] if losses else float("nan"),
            "trainable_params": trainable, "total_params": total}


def score_lists(model, lists: pd.DataFrame, batch_size: int = 64) -> list[np.ndarray]:
    """Cross-encoder score of every (query, candidate) pair, one array per list."""
    pairs = [(r.query, d) for r in lists.itertuples(index=False) for d in r.docs]
    flat = np.asarray(model.predict(pairs, batch_size=batch_size, show_progress_bar=False, convert_to_numpy=True),
                      dtype=np.float64).reshape(-1) if pairs else np.zeros(0)
    out, i = [], 0
    for r in lists.itertuples(index=False):
        out.append(flat[i:i + len(r.docs)])
        i += len(r.docs)
    return out


def per_query_metrics(lists: pd.DataFrame, scores: Sequence[np.ndarray], ks: Sequence[int]) -> pd.DataFrame:
    """NDCG@k, MRR (grade ≥ 2 relevant) and Spearman(score, grade) for every list."""
    rows = []
    for r, s in zip(lists.itertuples(index=False), scores):
        labels = np.asarray(r.labels, dtype=float)
        ranked = rank_by_score(s, labels)
        row = {"query_id": int(r.query_id), "intent": r.intent}
        for k in ks:
            row[f"ndcg@{k}"] = ndcg_at_k(ranked, k, all_rels=labels)
        row["mrr"] = reciprocal_rank(ranked, threshold=MRR_GRADE)
        row["spearman"] = spearman(s, labels)
        rows.append(row)
    return pd.DataFrame(rows)


def metrics_schema(ks: Sequence[int]):
    import pyarrow as pa

    return pa.schema([("query_id", pa.int32()), ("intent", pa.string())]
                     + [(f"ndcg@{k}", pa.float64()) for k in ks] + [("mrr", pa.float64()), ("spearman", pa.float64())])
