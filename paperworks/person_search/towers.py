"""Dual encoders: three small image towers (CNN, ResNet, ViT) × a projection of cached MiniLM
text embeddings, trained contrastively on *sim* pairs only (CleanRL-style, top to bottom).

Batches are whole training families (a base spec and its single-edit variants), so every
batch is full of hard negatives. Each image is paired with one of its caption's views
(full, structured or one facet); a text's positives are all batch images its view matches
(a facet text like "falling over" matches every falling person), handled with soft targets.
"""
from __future__ import annotations

import copy
import logging
import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from tqdm import tqdm

from paperworks.person_search.embed import MINILM_DIM
from paperworks.person_search.text import VIEWS

log = logging.getLogger("paperworks.person_search")


def images_to_tensor(images: np.ndarray) -> torch.Tensor:
    """uint8 [N, H, W, 3] → float [N, 3, H, W], roughly zero-mean unit-range."""
    x = torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).float()
    return (x / 255.0 - 0.5) / 0.25


class SmallCNN(nn.Module):
    """Plain conv stack; keeps the coarse spatial map (upper vs lower clothing matters)."""

    def __init__(self, out_dim: int, height: int, width: int, ch: int = 24):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, ch, 5, stride=2, padding=2), nn.ReLU(),
            nn.Conv2d(ch, 2 * ch, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(2 * ch, 3 * ch, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(3 * ch * (height // 8) * (width // 8), 256), nn.ReLU(),
                                  nn.Linear(256, out_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.net(x))


class ResBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.n1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.n2 = nn.BatchNorm2d(cout)
        self.skip = nn.Identity() if stride == 1 and cin == cout else nn.Conv2d(cin, cout, 1, stride=stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.n1(self.c1(x)))
        return F.relu(self.n2(self.c2(h)) + self.skip(x))


class SmallResNet(nn.Module):
    """Three residual stages with batch norm; a different inductive bias from the plain CNN."""

    def __init__(self, out_dim: int, height: int, width: int, ch: int = 16):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, ch, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(ch), nn.ReLU(),
            ResBlock(ch, 2 * ch, 2), ResBlock(2 * ch, 4 * ch, 2),
        )
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(4 * ch * (height // 8) * (width // 8), 256), nn.ReLU(),
                                  nn.Linear(256, out_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.net(x))


class SmallViT(nn.Module):
    """Small ViT with a convolutional stem (Xiao et al. 2021, "Early convolutions help transformers
    see better"): two stride-2 convs, then 2×2 patches → (H/8)·(W/8) tokens + CLS, pre-norm layers,
    and every output token read out in place. A plain patch-8 embedding with a CLS readout did not
    train on a few thousand sim images within the budget."""

    def __init__(self, out_dim: int, height: int, width: int, dim: int = 96, depth: int = 3, heads: int = 4):
        super().__init__()
        self.patch = nn.Sequential(
            nn.Conv2d(3, 32, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(64, dim, 2, stride=2),
        )
        n = (height // 8) * (width // 8)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, n + 1, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, heads, 2 * dim, dropout=0.0, batch_first=True, norm_first=True, activation="gelu")
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.out = nn.Linear(dim * (n + 1), out_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.patch(x).flatten(2).transpose(1, 2)
        tokens = torch.cat([self.cls.expand(len(x), -1, -1), tokens], dim=1) + self.pos
        # read out every token in place (not CLS / mean): keeps which patch holds which colour
        return self.out(self.norm(self.encoder(tokens)).flatten(1))


TOWERS = {"cnn": SmallCNN, "resnet": SmallResNet, "vit": SmallViT}


class DualEncoder(nn.Module):
    """Image tower + projection of the frozen MiniLM view embedding into one cosine space."""

    def __init__(self, backbone: str, embed_dim: int, height: int, width: int):
        super().__init__()
        self.image = TOWERS[backbone](embed_dim, height, width)
        self.text = nn.Sequential(nn.Linear(MINILM_DIM, 256), nn.GELU(), nn.Linear(256, embed_dim))

    def encode_images(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.image(x), dim=-1)

    def encode_texts(self, e: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.text(e), dim=-1)


@dataclass
class EarlyStopping:
    """Train until the held-out loss stops improving: stop after ``patience`` evaluations without a
    relative improvement of at least ``min_rel_delta`` on ``best`` (the patience reference); the weights
    kept are those of the lowest held-out loss (``kept_loss``), also where it beat ``best`` by less.

    With ``plateau_tail`` > 0 the curve must *also* have levelled off by the evidence standard's
    convergence check (``paperworks.core.claims.convergence``): at least ``min_evals`` evaluations,
    and the mean of its last ``plateau_tail`` share improves on the mean of the share before it by at
    most ``plateau_rel_tol``. Without it, a curve that gains 0.9 % per evaluation stops on patience
    while its last window still beats the one before by 5–6 % (the first default run: 3 encoders), and
    an expert stuck at chance during the warm-up stops after patience + 1 = 5 evaluations, too few
    for the check (6 experts).

    The training runs to a plateau of the *held-out* curve (what the claims' convergence precondition
    reads), not for a fixed number of epochs; the epoch budget is only a cap."""

    patience: int
    min_rel_delta: float
    plateau_tail: float = 0.0
    plateau_rel_tol: float = 0.05
    min_evals: int = 0
    best: float = math.inf  # the last loss that improved on its predecessor by ``min_rel_delta``: patience counts from it
    best_eval: int = -1
    kept_loss: float = math.inf  # the lowest loss so far, whose weights ``restore`` loads
    kept_eval: int = -1
    evals: int = 0
    wait_from: int = -1  # patience also counts from here (the last learning-rate decay), not only from the best
    history: list = field(default_factory=list, repr=False)
    best_state: dict = field(default_factory=dict, repr=False)

    def plateaued(self) -> bool:
        """The recorded curve passes the windowed plateau check (always True when ``plateau_tail`` = 0)."""
        if len(self.history) < self.min_evals:
            return False
        if self.plateau_tail <= 0:
            return True
        from paperworks.core.claims import EvidenceParams, convergence

        # the claims' own check, so stopping and the precondition can never disagree (min_evals gates length above)
        ev = EvidenceParams.model_construct(convergence_tail=self.plateau_tail, convergence_rel_tol=self.plateau_rel_tol,
                                            convergence_min_points=1)
        return convergence("plateau", self.history, ev)["passed"]

    def update(self, loss: float, model: nn.Module) -> bool:
        """Record one evaluation; True when training should stop."""
        if not math.isfinite(loss):
            raise FloatingPointError(f"held-out loss is {loss} after {self.evals} evaluations")
        if loss < self.best - self.min_rel_delta * abs(self.best) or self.best_eval < 0:
            self.best, self.best_eval = loss, self.evals
        # gains under min_rel_delta do not reset patience, but the weights of the lowest loss are the ones kept
        # (after a learning-rate decay the gains come in steps under 1 %)
        if loss < self.kept_loss:
            self.kept_loss, self.kept_eval = loss, self.evals
            self.best_state = copy.deepcopy(model.state_dict())
        self.evals += 1
        self.history.append(float(loss))
        return self.stalled() and self.plateaued()

    def stalled(self) -> bool:
        """``patience`` evaluations without a ``min_rel_delta`` improvement (counted from the last restart too)."""
        return self.evals - 1 - max(self.best_eval, self.wait_from) >= self.patience

    def restart_patience(self) -> None:
        """Give the model ``patience`` fresh evaluations (after a learning-rate decay)."""
        self.wait_from = self.evals - 1

    def restore(self, model: nn.Module) -> None:
        if self.best_state:
            model.load_state_dict(self.best_state)


def holdout_families(families: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """Boolean mask of the items whose family is held out (whole families: no variant leaks into training)."""
    fam_ids = np.unique(families)
    n = min(len(fam_ids) - 1, max(1, int(round(len(fam_ids) * fraction))))
    held = np.random.default_rng(seed).permutation(fam_ids)[:n]
    return np.isin(families, held)


def eval_points(steps_per_epoch: int, evals_per_epoch: int) -> set[int]:
    """Batch indices (within an epoch) after which the held-out loss is measured."""
    k = min(evals_per_epoch, steps_per_epoch)
    return {int(round((i + 1) * steps_per_epoch / k)) - 1 for i in range(k)}


@dataclass
class EncoderConfig:
    backbone: str
    embed_dim: int = 128
    epochs: int = 10  # the cap; early stopping on held-out families usually ends training before it
    families_per_batch: int = 8
    lr: float = 2e-3
    weight_decay: float = 1e-4
    temperature: float = 0.07
    full_view_prob: float = 0.5
    structured_view_prob: float = 0.2
    augment: bool = False
    patience: int = 4  # held-out evaluations without improvement before stopping
    min_rel_delta: float = 0.01
    evals_per_epoch: int = 2
    holdout_fraction: float = 0.1  # sim families held out for the held-out loss (never trained on)
    plateau_tail: float = 0.0  # > 0: also require the windowed plateau check before stopping (EarlyStopping)
    plateau_rel_tol: float = 0.05
    min_evals: int = 0
    # one_cycle: OneCycleLR over the whole cap (the learning rate anneals only at the cap, so a run stopped early
    # never anneals). step_on_plateau: linear warm-up over ``warmup_epochs``, then constant; each time the held-out
    # loss stalls (patience) the rate is multiplied by ``lr_decay``, ``lr_decays`` times, and only a stall after the
    # last decay (with the plateau check) stops training
    schedule: str = "one_cycle"
    warmup_epochs: float = 1.0
    lr_decay: float = 0.3
    lr_decays: int = 2


SCHEDULES = ("one_cycle", "step_on_plateau")


def photometric_jitter(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Generic augmentation of a sim batch: brightness, per-channel gain, pixel noise, horizontal flip.

    Deliberately *not* the real-domain transform (no texture, blur or occluders): the gallery's
    degradations stay unseen, as in the paper's synthetic-to-real setting.
    """
    n = x.shape[0]
    gain = torch.empty(n, 1, 1, 1).uniform_(0.75, 1.25, generator=gen) * torch.empty(n, 3, 1, 1).uniform_(0.9, 1.1, generator=gen)
    x = (x * 0.25 + 0.5) * gain  # back to [0, 1] scale, jitter
    x = x + torch.randn(x.shape, generator=gen) * torch.empty(n, 1, 1, 1).uniform_(0.0, 0.04, generator=gen)
    flip = torch.rand(n, generator=gen) < 0.5
    x = torch.where(flip[:, None, None, None], x.flip(-1), x)
    return (x.clamp(0, 1) - 0.5) / 0.25


def sample_views(view_ids: np.ndarray, cfg: EncoderConfig, rng: np.random.Generator) -> np.ndarray:
    """Pick one view column per item: full / structured / a random present facet."""
    n = len(view_ids)
    u = rng.random(n)
    cols = np.where(u < cfg.full_view_prob, 0, 1)
    facet = u >= cfg.full_view_prob + cfg.structured_view_prob
    for i in np.flatnonzero(facet):
        present = [j for j in range(2, len(VIEWS)) if view_ids[i, j] >= 0]
        cols[i] = present[int(rng.integers(len(present)))] if present else 0
    return cols


def soft_contrastive_loss(img: torch.Tensor, txt: torch.Tensor, positives: torch.Tensor, temperature: float) -> torch.Tensor:
    """Symmetric InfoNCE with multi-positive soft targets (``positives[t, i]`` = text t matches image i)."""
    logits = txt @ img.T / temperature
    pos = positives.float()
    t2i = -(pos / pos.sum(1, keepdim=True) * F.log_softmax(logits, dim=1)).sum(1).mean()
    i2t = -(pos.T / pos.T.sum(1, keepdim=True) * F.log_softmax(logits.T, dim=1)).sum(1).mean()
    return (t2i + i2t) / 2


def _encoder_batch(model: DualEncoder, x: torch.Tensor, emb_all: torch.Tensor, idx: np.ndarray, cols: np.ndarray,
                   view_ids: np.ndarray, view_keys: np.ndarray, temperature: float) -> tuple[torch.Tensor, float]:
    """Contrastive loss and text→image top-1 accuracy of one batch (items ``idx``, view column ``cols`` each)."""
    tid = view_ids[idx, cols]
    keys = view_keys[idx, cols]  # each text's key under its own view
    # positives[t, i]: image i has the same key as text t's item under text t's view
    positives = torch.from_numpy(view_keys[idx][:, cols].T == keys[:, None])
    img = model.encode_images(x)
    txt = model.encode_texts(emb_all[tid])
    loss = soft_contrastive_loss(img, txt, positives, temperature)
    acc = float(positives[torch.arange(len(idx)), (txt @ img.T).argmax(1)].float().mean())
    return loss, acc


def train_dual_encoder(
    cfg: EncoderConfig,
    images: np.ndarray,
    families: np.ndarray,
    view_ids: np.ndarray,
    view_keys: np.ndarray,
    text_emb: np.ndarray,
    seed: int,
    live=None,
) -> DualEncoder:
    """Train one backbone on sim pairs until the loss on held-out sim families plateaus (early stopping).
    ``view_keys[i, v]``: items i, j match view v iff keys equal."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    h, w = images.shape[1:3]
    model = DualEncoder(cfg.backbone, cfg.embed_dim, h, w)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    held = holdout_families(families, cfg.holdout_fraction, seed)
    fam_ids = np.unique(families[~held])
    members = {f: np.flatnonzero(families == f) for f in np.unique(families)}
    steps_per_epoch = max(1, len(fam_ids) // cfg.families_per_batch)
    if cfg.schedule not in SCHEDULES:
        raise ValueError(f"encoder schedule '{cfg.schedule}' is not one of {SCHEDULES}")
    decays_done = [0]  # mutable for the lambda: the multiplier follows the learning-rate decays taken so far
    if cfg.schedule == "one_cycle":
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=cfg.lr, total_steps=cfg.epochs * steps_per_epoch, pct_start=0.15)
    else:
        warmup_steps = max(1, int(round(cfg.warmup_epochs * steps_per_epoch)))
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda step: min(1.0, (step + 1) / warmup_steps) * cfg.lr_decay ** decays_done[0])
    x_all = images_to_tensor(images)
    emb_all = torch.from_numpy(text_emb)
    gen = torch.Generator().manual_seed(seed)
    # held-out batches and their views are drawn once, so every evaluation measures the same thing
    val_fams = np.unique(families[held])
    val_batches = [np.concatenate([members[f] for f in val_fams[b : b + cfg.families_per_batch]])
                   for b in range(0, len(val_fams), cfg.families_per_batch)]
    val_rng = np.random.default_rng(seed + 1)
    val_cols = [sample_views(view_ids[idx], cfg, val_rng) for idx in val_batches]
    stopper = EarlyStopping(cfg.patience, cfg.min_rel_delta, cfg.plateau_tail, cfg.plateau_rel_tol, cfg.min_evals)
    checkpoints = eval_points(steps_per_epoch, cfg.evals_per_epoch)
    losses, accs, stop = [], [], False
    for epoch in range(cfg.epochs):
        model.train()
        perm = rng.permutation(fam_ids)
        t0 = time.time()
        for b in tqdm(range(steps_per_epoch), desc=f"{cfg.backbone} epoch {epoch + 1}/{cfg.epochs}", mininterval=5.0, leave=False):
            idx = np.concatenate([members[f] for f in perm[b * cfg.families_per_batch : (b + 1) * cfg.families_per_batch]])
            cols = sample_views(view_ids[idx], cfg, rng)
            x = photometric_jitter(x_all[idx], gen) if cfg.augment else x_all[idx]
            loss, acc = _encoder_batch(model, x, emb_all, idx, cols, view_ids, view_keys, cfg.temperature)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            losses.append(loss.item())
            accs.append(acc)
            if b in checkpoints:
                model.eval()
                with torch.no_grad():
                    val = [_encoder_batch(model, x_all[idx], emb_all, idx, c, view_ids, view_keys, cfg.temperature)
                           for idx, c in zip(val_batches, val_cols)]
                model.train()
                val_loss = float(np.mean([v[0].item() for v in val]))
                if live is not None:
                    live.log_metric("train/loss", float(np.mean(losses)))
                    live.log_metric("train/text_to_image_acc", float(np.mean(accs)))
                    live.log_metric("val/loss", val_loss)
                    live.log_metric("val/text_to_image_acc", float(np.mean([v[1] for v in val])))
                    live.log_metric("train/lr", float(opt.param_groups[0]["lr"]))
                    live.next_step()
                losses, accs = [], []
                stop_now = stopper.update(val_loss, model)
                if cfg.schedule == "step_on_plateau" and stopper.stalled() and decays_done[0] < cfg.lr_decays:
                    decays_done[0] += 1
                    for group in opt.param_groups:  # now, not at the scheduler's next step (LambdaLR reads it there)
                        group["lr"] *= cfg.lr_decay
                    stopper.restart_patience()
                    stop_now = False
                    log.info(f"{cfg.backbone}: held-out loss stalled at evaluation {stopper.evals}; "
                             f"learning rate × {cfg.lr_decay} (decay {decays_done[0]}/{cfg.lr_decays})")
                if stop_now:
                    stop = True
                    break
        # the wall time differs per run: a log line, not a tracked curve (byte-identical outputs)
        log.info(f"{cfg.backbone} epoch {epoch + 1}/{cfg.epochs}: {time.time() - t0:.1f} s")
        if stop:
            log.info(f"{cfg.backbone}: held-out loss plateaued (best {stopper.kept_loss:.4f} at evaluation {stopper.kept_eval + 1}); stopped")
            break
    stopper.restore(model)
    if live is not None:
        live.log_metric("stopped_early", int(stop), plot=False)
        live.log_metric("best_evaluation", stopper.kept_eval + 1, plot=False)
    model.eval()
    return model


@torch.no_grad()
def embed_images(model: DualEncoder, images: np.ndarray, batch: int = 512) -> np.ndarray:
    out = [model.encode_images(images_to_tensor(images[i : i + batch])).numpy() for i in range(0, len(images), batch)]
    return np.concatenate(out).astype(np.float32)


@torch.no_grad()
def embed_texts(model: DualEncoder, text_emb: np.ndarray) -> np.ndarray:
    return model.encode_texts(torch.from_numpy(text_emb)).numpy().astype(np.float32)
