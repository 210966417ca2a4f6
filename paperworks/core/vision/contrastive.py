"""CLIP-style contrastive training of an image tower against cached (frozen) text embeddings.

The text side is a table of precomputed sentence embeddings (MiniLM, or anything ``T × D``)
and each image carries the row id of its text. Only the image encoder, two linear
projections into a shared space and the logit scale are trained.

Many images usually share one caption ("a red circle"), so the loss is the symmetric
InfoNCE of CLIP with duplicates handled: image → text is a softmax over the *distinct*
texts of the batch, and text → image puts equal target mass on every image of that text
(treating a same-caption image as a negative would push identical things apart).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from paperworks.core.vision.encoders import frames_to_tensor


@dataclass
class ContrastiveConfig:
    steps: int = 300
    batch_size: int = 64
    lr: float = 3e-3
    weight_decay: float = 0.01
    warmup_steps: int = 20
    shared_dim: int = 64
    init_temperature: float = 0.07   # CLIP's start: logit scale 1/0.07
    max_logit_scale: float = 100.0   # CLIP's clamp
    grad_clip: float = 1.0
    log_every: int = 25


class ImageTextModel(nn.Module):
    """Image encoder + projection, and a projection of the frozen text embeddings, into one normalised space."""

    def __init__(self, image_encoder: nn.Module, text_dim: int, shared_dim: int = 64, init_temperature: float = 0.07) -> None:
        super().__init__()
        self.image_encoder = image_encoder
        self.image_proj = nn.Linear(image_encoder.embed_dim, shared_dim)
        self.text_proj = nn.Linear(text_dim, shared_dim)
        self.log_logit_scale = nn.Parameter(torch.tensor(math.log(1.0 / init_temperature)))

    def embed_images(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.image_proj(self.image_encoder(x)), dim=-1)

    def embed_texts(self, text_emb: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.text_proj(text_emb), dim=-1)


def contrastive_loss(image_emb: torch.Tensor, text_emb: torch.Tensor, text_ids: torch.Tensor, logit_scale: torch.Tensor) -> torch.Tensor:
    """Symmetric InfoNCE for a batch whose images may share texts.

    ``image_emb``: ``B × d`` normalised; ``text_emb``: ``U × d`` normalised embeddings of the
    batch's distinct texts; ``text_ids``: ``B`` indices into those ``U`` rows.
    """
    logits = logit_scale * image_emb @ text_emb.T  # B × U
    image_to_text = F.cross_entropy(logits, text_ids)
    positives = (text_ids[None, :] == torch.arange(len(text_emb), device=text_ids.device)[:, None]).float()  # U × B
    targets = positives / positives.sum(dim=1, keepdim=True)
    text_to_image = -(targets * F.log_softmax(logits.T, dim=1)).sum(dim=1).mean()
    return (image_to_text + text_to_image) / 2


def _lr_factor(step: int, warmup: int, total: int) -> float:
    if step < warmup:
        return (step + 1) / warmup
    return 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, total - warmup))))


def train_contrastive(
    model: ImageTextModel,
    images: np.ndarray | torch.Tensor,
    text_ids: np.ndarray | torch.Tensor,
    text_table: np.ndarray | torch.Tensor,
    cfg: ContrastiveConfig,
    seed: int = 0,
    prepare: Callable[[torch.Tensor], torch.Tensor] = frames_to_tensor,
    eval_fn: Callable[[int], dict[str, float]] | None = None,
    live_dir: Path | str | None = None,
) -> list[dict[str, float]]:
    """Train ``model`` for ``cfg.steps`` minibatches; returns the log rows (step, loss, logit_scale, eval keys).

    ``images[i]`` (uint8 frames by default; ``prepare`` turns a batch into the encoder's input,
    e.g. :func:`~paperworks.core.vision.encoders.volumes_to_tensor`) has the text
    ``text_table[text_ids[i]]``. Batches are drawn from ``seed``, so same inputs + seed → same weights.
    """
    from tqdm import tqdm

    images = torch.as_tensor(images)
    text_ids = torch.as_tensor(text_ids, dtype=torch.long)
    text_table = torch.as_tensor(text_table, dtype=torch.float32)
    if len(images) != len(text_ids):
        raise ValueError(f"{len(images)} images but {len(text_ids)} text ids")
    if len(text_ids) and (text_ids.min() < 0 or text_ids.max() >= len(text_table)):
        raise ValueError(f"text ids must index the {len(text_table)}-row text table")
    if text_table.shape[1] != model.text_proj.in_features:
        raise ValueError(f"text table is {text_table.shape[1]}-d, the model expects {model.text_proj.in_features}")

    rng = np.random.default_rng(seed)
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.ndim >= 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}], lr=cfg.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: _lr_factor(s, cfg.warmup_steps, cfg.steps))
    live = None
    if live_dir is not None:
        from dvclive import Live

        live = Live(str(live_dir), dvcyaml=False, save_dvc_exp=False, report=None)
        live.log_params({k: v for k, v in asdict(cfg).items()})
    history: list[dict[str, float]] = []
    model.train()
    bar = tqdm(range(cfg.steps), desc="contrastive", disable=cfg.steps < 50, mininterval=5)
    for step in bar:
        idx = torch.from_numpy(rng.choice(len(images), size=min(cfg.batch_size, len(images)), replace=False))
        # distinct texts of the batch, and each image's position among them
        distinct, local_ids = torch.unique(text_ids[idx], return_inverse=True)
        image_emb = model.embed_images(prepare(images[idx]))
        text_emb = model.embed_texts(text_table[distinct])
        scale = model.log_logit_scale.exp().clamp(max=cfg.max_logit_scale)
        loss = contrastive_loss(image_emb, text_emb, local_ids, scale)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        opt.step()
        sched.step()
        last = step == cfg.steps - 1
        if step % cfg.log_every == 0 or last:
            row = {"step": step, "loss": float(loss.detach()), "logit_scale": float(scale.detach())}
            if eval_fn is not None and last:
                model.eval()
                row.update(eval_fn(step))
                model.train()
            history.append(row)
            bar.set_postfix(loss=f"{row['loss']:.3f}")
            if live is not None:
                from paperworks.core.lm.train import log_row

                log_row(live, row)
                live.next_step()
    if live is not None:
        live.end()
    model.eval()
    return history


@torch.no_grad()
def retrieval_accuracy(
    model: ImageTextModel,
    images: np.ndarray | torch.Tensor,
    text_ids: np.ndarray | torch.Tensor,
    text_table: np.ndarray | torch.Tensor,
    prepare: Callable[[torch.Tensor], torch.Tensor] = frames_to_tensor,
    batch_size: int = 256,
) -> dict[str, float]:
    """Image → text top-1 accuracy over the whole table (chance = 1 / rows), and the mean rank of the true text."""
    was_training = model.training
    model.eval()
    images = torch.as_tensor(images)
    text_ids = torch.as_tensor(text_ids, dtype=torch.long)
    texts = model.embed_texts(torch.as_tensor(text_table, dtype=torch.float32))
    correct, ranks = 0, []
    for i in range(0, len(images), batch_size):
        sims = model.embed_images(prepare(images[i: i + batch_size])) @ texts.T
        truth = text_ids[i: i + batch_size]
        correct += int((sims.argmax(dim=1) == truth).sum())
        true_sim = sims.gather(1, truth[:, None])
        ranks.append((sims > true_sim).sum(dim=1).float() + 1)
    model.train(was_training)
    n = max(1, len(images))
    return {"image_to_text_top1": correct / n, "mean_rank": float(torch.cat(ranks).mean()) if ranks else float("nan"),
            "chance_top1": 1.0 / len(texts)}
