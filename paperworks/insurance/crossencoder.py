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
    epochs: int = 1  # cap on full passes over the training lists
    min_epochs: int = 1  # early stopping may end training only after this many passes
    evals_per_epoch: int = 4  # validation points per epoch
    patience: int = 4  # validation points without improvement before stopping
    min_delta: float = 0.0
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
                   validate: Callable[[object], float] | None = None,
                   on_step: Callable[[int, float], None] | None = None,
                   on_eval: Callable[[int, float], None] | None = None) -> dict:
    """Fine-tune ``model`` in place with a listwise loss; returns a training record.

    Every epoch visits all training lists (shuffled). With ``validate`` (model → validation
    NDCG@3), the model is scored before training and ``evals_per_epoch`` times per epoch; after
    ``min_epochs`` full passes, training stops once ``patience`` points in a row failed to beat the
    best by more than ``min_delta``, and the best point's weights are restored. ``on_eval(step,
    value)`` sees every point (Optuna reports and prunes there).
    """
    loss_fn = make_loss(cfg.loss, model)
    trainable, total = apply_freezing(model, cfg.freeze)
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    params = [p for _, p in named]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    rows = list(train_lists.itertuples(index=False))
    steps_per_epoch = int(np.ceil(len(rows) / cfg.batch_lists))
    total_steps = steps_per_epoch * cfg.epochs
    warmup = int(cfg.warmup_ratio * total_steps)
    # linear warm-up then linear decay to 0 at the epoch cap
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / (warmup + 1) if s < warmup else max(0.0, (total_steps - s) / max(1, total_steps - warmup)))
    # validation points at evenly spaced steps of each epoch, the last one at the epoch's end
    eval_at = {e * steps_per_epoch + int(np.ceil((i + 1) * steps_per_epoch / cfg.evals_per_epoch))
               for e in range(cfg.epochs) for i in range(cfg.evals_per_epoch)}
    rng = np.random.default_rng(cfg.seed)
    losses: list[float] = []
    val_curve: list[tuple[int, float]] = []
    best = {"value": -np.inf, "step": 0, "state": None}
    stale = 0

    def evaluate(step: int) -> None:
        nonlocal stale
        model.eval()
        with torch.no_grad():
            value = float(validate(model))
        val_curve.append((step, value))
        if value > best["value"] + cfg.min_delta or best["state"] is None:
            best.update(value=value, step=step, state={n: p.detach().clone() for n, p in named})
            stale = 0
        else:
            stale += 1
        if on_eval is not None:
            on_eval(step, value)
        model.train()

    step, stopped_early = 0, False
    if validate is not None:
        evaluate(0)
    for epoch in range(cfg.epochs):
        model.train()
        order = rng.permutation(len(rows))
        for b in tqdm(range(steps_per_epoch), desc=f"{cfg.loss}/{cfg.freeze} epoch {epoch}", mininterval=10):
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
            if validate is not None and step in eval_at:
                evaluate(step)
                if cfg.min_epochs * steps_per_epoch <= step < total_steps and stale >= cfg.patience:
                    stopped_early = True
                    break
        if stopped_early:
            break
    model.eval()
    if best["state"] is not None:  # keep the best validation checkpoint
        with torch.no_grad():
            for n, p in named:
                p.copy_(best["state"][n])
    return {"steps": step, "epochs_run": round(step / steps_per_epoch, 3), "steps_per_epoch": steps_per_epoch,
            "stopped_early": stopped_early, "best_step": best["step"],
            "best_val_ndcg@3": None if validate is None else best["value"],
            "val_curve": [[s, v] for s, v in val_curve], "loss_curve": losses,
            "final_loss": losses[-1] if losses else float("nan"), "trainable_params": trainable, "total_params": total}


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
    """NDCG@k, MRR (grade ≥ 2 relevant) and Spearman(score, grade) for every list.

    NDCG's ideal ranking comes from the query's judged grades over the whole catalogue
    (``ideal_labels``), not from the list alone: a relevant procedure the first stage missed
    still counts against the list, so NDCG is end to end and equal lists compare equally.
    """
    rows = []
    for r, s in zip(lists.itertuples(index=False), scores):
        labels = np.asarray(r.labels, dtype=float)
        ideal = np.asarray(r.ideal_labels, dtype=float)
        ranked = rank_by_score(s, labels)
        row = {"query_id": int(r.query_id), "intent": r.intent}
        for k in ks:
            row[f"ndcg@{k}"] = ndcg_at_k(ranked, k, all_rels=ideal)
        row["mrr"] = reciprocal_rank(ranked, threshold=MRR_GRADE)
        row["spearman"] = spearman(s, labels)
        rows.append(row)
    return pd.DataFrame(rows)


def metrics_schema(ks: Sequence[int]):
    import pyarrow as pa

    return pa.schema([("query_id", pa.int32()), ("intent", pa.string())]
                     + [(f"ndcg@{k}", pa.float64()) for k in ks] + [("mrr", pa.float64()), ("spearman", pa.float64())])
