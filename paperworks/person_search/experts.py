"""Stage 2: three independent expert rerankers for the top-10 pool, trained on *sim* data only.

1. ``CrossReranker`` — discriminative cross-modal reranker: the query's view tokens
   (MiniLM embeddings of full/structured/facet texts) cross-attend over image patches;
   trained listwise within hard families (one matching image among single-edit variants).
2. ``ClozeExpert`` — cloze completion: each key word of the query (action verb, object,
   clothing colours, headwear, bag) is masked and the image must fill the blank from the
   slot's closed vocabulary; the score is the mean log-probability of the query's word.
3. ``FacetVerifier`` — structured verification: one checker per facet (appearance, action,
   object, scene) answers P(facet text holds for the image), temperature-calibrated on
   held-out sim families; the checkers' log-confidences are summed, never exchanged.

The experts never see each other's outputs; ``consensus.py`` combines them.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F
from tqdm import tqdm

from paperworks.person_search.data import ATTR_VALUES
from paperworks.person_search.embed import MINILM_DIM
from paperworks.person_search.text import CLOZE_SLOTS, FACETS, VIEWS
from paperworks.person_search.towers import EarlyStopping, eval_points, holdout_families, images_to_tensor

log = logging.getLogger("paperworks.person_search")

EXPERTS = ("cross", "cloze", "verify")


class PatchEncoder(nn.Module):
    """Small CNN → grid of patch features [B, (H/8)(W/8), C] (each expert owns one)."""

    def __init__(self, width: int, height: int, img_width: int):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, width, 5, stride=2, padding=2), nn.ReLU(),
            nn.Conv2d(width, width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.n_patches = (height // 8) * (img_width // 8)
        self.dim = 2 * width
        self.pos = nn.Parameter(torch.randn(1, self.n_patches, self.dim) * 0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).flatten(2).transpose(1, 2) + self.pos


class CrossReranker(nn.Module):
    """Text view tokens (plus a global image summary) attend over image patches (2 cross-attention blocks) → one match logit."""

    def __init__(self, width: int, height: int, img_width: int, heads: int = 4):
        super().__init__()
        self.patches = PatchEncoder(width, height, img_width)
        d = self.patches.dim
        self.text_in = nn.Linear(MINILM_DIM, d)
        # a direct path from the whole patch grid (where each colour sits) into every text token
        self.img_global = nn.Linear(self.patches.n_patches * d, d)
        self.view_type = nn.Parameter(torch.randn(len(VIEWS), d) * 0.02)
        self.blocks = nn.ModuleList([nn.MultiheadAttention(d, heads, batch_first=True) for _ in range(2)])
        self.norms = nn.ModuleList([nn.LayerNorm(d) for _ in range(4)])
        self.ffn = nn.ModuleList([nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d)) for _ in range(2)])
        self.out = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.Linear(d, 1))

    def score(self, patches: torch.Tensor, text: torch.Tensor, present: torch.Tensor) -> torch.Tensor:
        """patches [N, P, d], text [N, 6, 384], present [N, 6] → logits [N]."""
        h = self.text_in(text) + self.view_type + self.img_global(patches.flatten(1)).unsqueeze(1)
        for attn, n1, n2, ffn in zip(self.blocks, self.norms[::2], self.norms[1::2], self.ffn):
            h = h + attn(n1(h), patches, patches, need_weights=False)[0]
            h = h + ffn(n2(h))
        m = present.float().unsqueeze(-1)
        pooled = (h * m).sum(1) / m.sum(1).clamp_min(1)
        return self.out(pooled).squeeze(-1)


class ClozeExpert(nn.Module):
    """Fill-in-the-blank over each slot's closed vocabulary, from the image."""

    def __init__(self, width: int, height: int, img_width: int):
        super().__init__()
        self.patches = PatchEncoder(width, height, img_width)
        d = self.patches.dim * self.patches.n_patches
        self.trunk = nn.Sequential(nn.Flatten(), nn.Linear(d, 256), nn.ReLU())
        self.heads = nn.ModuleDict({s: nn.Linear(256, len(ATTR_VALUES[s])) for s in CLOZE_SLOTS})

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        h = self.trunk(self.patches(x))
        return {s: F.log_softmax(head(h), dim=-1) for s, head in self.heads.items()}


class FacetVerifier(nn.Module):
    """One checker per facet: P(facet text holds for the image) = σ(⟨img_f, txt_f⟩ + b_f) / T_f."""

    def __init__(self, width: int, height: int, img_width: int, dim: int = 128):
        super().__init__()
        self.patches = PatchEncoder(width, height, img_width)
        d = self.patches.dim * self.patches.n_patches
        self.trunk = nn.Sequential(nn.Flatten(), nn.Linear(d, 256), nn.ReLU())
        self.img_heads = nn.ModuleDict({f: nn.Linear(256, dim) for f in FACETS})
        self.txt_heads = nn.ModuleDict({f: nn.Sequential(nn.Linear(MINILM_DIM, dim), nn.GELU(), nn.Linear(dim, dim)) for f in FACETS})
        self.bias = nn.Parameter(torch.zeros(len(FACETS)))
        # Calibration temperatures (fitted after training, stored with the weights).
        self.register_buffer("temperature", torch.ones(len(FACETS)))

    def image_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.trunk(self.patches(x))

    def logits(self, feats: torch.Tensor, text: torch.Tensor, facet: str) -> torch.Tensor:
        """feats [N, 256], text [N, 384] → raw logits [N] of one facet's checker."""
        i = FACETS.index(facet)
        z = (self.img_heads[facet](feats) * self.txt_heads[facet](text)).sum(-1) / np.sqrt(self.img_heads[facet].out_features)
        return z + self.bias[i]


@dataclass
class ExpertConfig:
    epochs: int = 6  # the cap; early stopping on held-out sim families usually ends training before it
    families_per_batch: int = 8
    lr: float = 2e-3
    width: int = 32
    patience: int = 4  # held-out evaluations without improvement before stopping
    min_rel_delta: float = 0.01
    evals_per_epoch: int = 2
    holdout_fraction: float = 0.15  # held-out sim families: early stopping (and the verifier's temperatures)
    plateau_tail: float = 0.0  # > 0: also require the windowed plateau check before stopping (EarlyStopping)
    plateau_rel_tol: float = 0.05
    min_evals: int = 0


class HeldOut:
    """Early stopping for one expert: measure the held-out loss at fixed points of each epoch, log both
    curves to dvclive (``train/loss``, ``val/loss``), stop on a plateau and keep the best weights."""

    def __init__(self, name: str, cfg: ExpertConfig, steps_per_epoch: int, model: nn.Module, val_loss, live=None):
        self.name, self.cfg, self.model, self.val_loss, self.live = name, cfg, model, val_loss, live
        self.stopper = EarlyStopping(cfg.patience, cfg.min_rel_delta, cfg.plateau_tail, cfg.plateau_rel_tol, cfg.min_evals)
        self.checkpoints = eval_points(steps_per_epoch, cfg.evals_per_epoch)
        self.train_losses: list[float] = []
        self.extra: dict[str, list[float]] = {}
        self.stopped = False

    def after_step(self, b: int, loss: float, **extra: float) -> bool:
        """Record a training step; at a checkpoint, evaluate. True when training should stop."""
        self.train_losses.append(loss)
        for k, v in extra.items():
            self.extra.setdefault(k, []).append(v)
        if b not in self.checkpoints:
            return False
        self.model.eval()
        with torch.no_grad():
            val = float(self.val_loss())
        self.model.train()
        if self.live is not None:
            self.live.log_metric("train/loss", float(np.mean(self.train_losses)))
            for k, v in self.extra.items():
                self.live.log_metric(f"train/{k}", float(np.mean(v)))
            self.live.log_metric("val/loss", val)
            self.live.next_step()
        self.train_losses, self.extra = [], {}
        self.stopped = self.stopper.update(val, self.model)
        return self.stopped

    def finish(self) -> None:
        self.stopper.restore(self.model)
        if self.stopped:
            log.info(f"{self.name}: held-out loss plateaued (best {self.stopper.kept_loss:.4f} at evaluation "
                     f"{self.stopper.kept_eval + 1}); stopped")
        if self.live is not None:
            self.live.log_metric("stopped_early", int(self.stopped), plot=False)
            self.live.log_metric("best_evaluation", self.stopper.kept_eval + 1, plot=False)


def one_cycle(opt, cfg: ExpertConfig, steps_per_epoch: int):
    """The encoders' schedule (warm-up 15 %, then cosine decay): training ends when the schedule does."""
    return torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=cfg.lr, total_steps=cfg.epochs * steps_per_epoch, pct_start=0.15)


def _family_batches(families: np.ndarray, per_batch: int, rng: np.random.Generator):
    fam_ids = np.unique(families)
    members = {f: np.flatnonzero(families == f) for f in fam_ids}
    perm = rng.permutation(fam_ids)
    for b in range(max(1, len(perm) // per_batch)):
        yield [members[f] for f in perm[b * per_batch : (b + 1) * per_batch]]


def view_tokens(view_ids: np.ndarray, text_emb: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """[N, 6] view ids → tokens [N, 6, 384] (zeros where missing) and the present mask."""
    present = view_ids >= 0
    tok = np.where(present[..., None], text_emb[np.maximum(view_ids, 0)], 0.0).astype(np.float32)
    return torch.from_numpy(tok), torch.from_numpy(present)


def _cross_family_loss(model: CrossReranker, x_all, tok_all, pres_all, fams: list[np.ndarray]) -> tuple[torch.Tensor, list[float]]:
    """Listwise loss of a batch of families: every caption of a family against every image of the family."""
    idx = np.concatenate(fams)
    patches = model.patches(x_all[idx])
    loss, offset, accs = 0.0, 0, []
    for fam in fams:
        n = len(fam)
        rows = np.arange(offset, offset + n)
        pi, ti = np.repeat(rows, n), np.tile(rows, n)  # pair (image, text)
        logits = model.score(patches[pi], tok_all[idx[ti]], pres_all[idx[ti]]).view(n, n).T  # [text, image]
        loss = loss + F.cross_entropy(logits, torch.arange(n))
        accs.append(float((logits.argmax(1) == torch.arange(n)).float().mean()))
        offset += n
    return loss / len(fams), accs


def _fixed_batches(families: np.ndarray, mask: np.ndarray, per_batch: int) -> list[list[np.ndarray]]:
    """The held-out families of ``mask`` in fixed batches (the same at every evaluation)."""
    fam_ids = np.unique(families[mask])
    members = [np.flatnonzero(families == f) for f in fam_ids]
    return [members[b : b + per_batch] for b in range(0, len(members), per_batch)]


def train_cross(cfg: ExpertConfig, images, families, view_ids, text_emb, seed: int, live=None) -> CrossReranker:
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = CrossReranker(cfg.width, images.shape[1], images.shape[2])
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    held = holdout_families(families, cfg.holdout_fraction, seed)
    train_fam = np.where(held, -1, families)
    train_idx = np.flatnonzero(~held)
    steps = max(1, len(np.unique(families[~held])) // cfg.families_per_batch)
    sched = one_cycle(opt, cfg, steps)
    x_all = images_to_tensor(images)
    tok_all, pres_all = view_tokens(view_ids, text_emb)
    val_batches = _fixed_batches(families, held, cfg.families_per_batch)
    watch = HeldOut("cross", cfg, steps, model,
                    lambda: np.mean([_cross_family_loss(model, x_all, tok_all, pres_all, f)[0].item() for f in val_batches]), live)
    for epoch in range(cfg.epochs):
        t0 = time.time()
        batches = list(_family_batches(train_fam[~held], cfg.families_per_batch, rng))
        for b, fams in enumerate(tqdm(batches, desc=f"cross {epoch + 1}/{cfg.epochs}", mininterval=5.0, leave=False)):
            loss, accs = _cross_family_loss(model, x_all, tok_all, pres_all, [train_idx[m] for m in fams])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            if watch.after_step(b, loss.item(), family_acc=float(np.mean(accs))):
                break
        # the wall time differs per run: a log line, not a tracked curve (byte-identical outputs)
        log.info(f"cross epoch {epoch + 1}/{cfg.epochs}: {time.time() - t0:.1f} s")
        if watch.stopped:
            break
    watch.finish()
    return model.eval()


def train_cloze(cfg: ExpertConfig, images, attrs: pd.DataFrame, seed: int, live=None) -> ClozeExpert:
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = ClozeExpert(cfg.width, images.shape[1], images.shape[2])
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    x_all = images_to_tensor(images)
    targets = {s: torch.from_numpy(attrs[s].map({v: i for i, v in enumerate(ATTR_VALUES[s])}).to_numpy().astype(np.int64))
               for s in CLOZE_SLOTS}
    held = holdout_families(attrs["family"].to_numpy(), cfg.holdout_fraction, seed)
    train_items, val_items = np.flatnonzero(~held), np.flatnonzero(held)
    batch = cfg.families_per_batch * 8
    steps = -(-len(train_items) // batch)
    sched = one_cycle(opt, cfg, steps)

    def slot_loss(idx: np.ndarray) -> tuple[torch.Tensor, float]:
        out = model(x_all[idx])
        loss = sum(F.nll_loss(out[s], targets[s][idx]) for s in CLOZE_SLOTS) / len(CLOZE_SLOTS)
        return loss, float(np.mean([(out[s].argmax(1) == targets[s][idx]).float().mean() for s in CLOZE_SLOTS]))

    def val_loss() -> float:
        parts = [(slot_loss(val_items[b : b + batch])[0].item(), len(val_items[b : b + batch])) for b in range(0, len(val_items), batch)]
        return sum(v * n for v, n in parts) / len(val_items)

    watch = HeldOut("cloze", cfg, steps, model, val_loss, live)
    for epoch in range(cfg.epochs):
        perm = rng.permutation(train_items)
        t0 = time.time()
        for b, start in enumerate(tqdm(range(0, len(perm), batch), desc=f"cloze {epoch + 1}/{cfg.epochs}", mininterval=5.0, leave=False)):
            loss, acc = slot_loss(perm[start : start + batch])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            if watch.after_step(b, loss.item(), slot_acc=acc):
                break
        # the wall time differs per run: a log line, not a tracked curve (byte-identical outputs)
        log.info(f"cloze epoch {epoch + 1}/{cfg.epochs}: {time.time() - t0:.1f} s")
        if watch.stopped:
            break
    watch.finish()
    return model.eval()


def _verifier_pairs(fams: list[np.ndarray], view_ids: np.ndarray, facet_keys: dict[str, np.ndarray]):
    """(image index, text id, label) per facet for every image × caption pair inside each family."""
    pairs = {}
    for f in FACETS:
        col = VIEWS.index(f)
        ii, tt, yy = [], [], []
        for fam in fams:
            for j in fam:
                if view_ids[j, col] < 0:
                    continue
                ii.append(fam)
                tt.append(np.full(len(fam), view_ids[j, col]))
                yy.append(facet_keys[f][fam] == facet_keys[f][j])
        if ii:
            pairs[f] = (np.concatenate(ii), np.concatenate(tt), np.concatenate(yy).astype(np.float32))
    return pairs


def train_verifier(cfg: ExpertConfig, images, families, view_ids, facet_keys, text_emb, seed: int, live=None) -> FacetVerifier:
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = FacetVerifier(cfg.width, images.shape[1], images.shape[2])
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    x_all = images_to_tensor(images)
    emb = torch.from_numpy(text_emb)
    # held-out sim families: early stopping, then the checkers' temperatures (never trained on)
    is_cal = holdout_families(families, cfg.holdout_fraction, seed)
    cal_fams = set(np.unique(families[is_cal]).tolist())
    train_fam = np.where(is_cal, -1, families)
    n_steps = max(1, len(np.unique(train_fam[~is_cal])) // cfg.families_per_batch)
    sched = one_cycle(opt, cfg, n_steps)
    train_idx = np.flatnonzero(~is_cal)
    val_batches = _fixed_batches(families, is_cal, cfg.families_per_batch)
    watch = HeldOut("verify", cfg, n_steps, model,
                    lambda: np.mean([_verifier_loss(model, x_all, emb, f, view_ids, facet_keys).item() for f in val_batches]), live)
    for epoch in range(cfg.epochs):
        t0 = time.time()
        batches = list(_family_batches(train_fam[~is_cal], cfg.families_per_batch, rng))
        for b, fams in enumerate(tqdm(batches, desc=f"verify {epoch + 1}/{cfg.epochs}", mininterval=5.0, leave=False)):
            loss = _verifier_loss(model, x_all, emb, [train_idx[m] for m in fams], view_ids, facet_keys)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            if watch.after_step(b, loss.item()):
                break
        # the wall time differs per run: a log line, not a tracked curve (byte-identical outputs)
        log.info(f"verify epoch {epoch + 1}/{cfg.epochs}: {time.time() - t0:.1f} s")
        if watch.stopped:
            break
    watch.finish()
    model.eval()
    # Temperature scaling per checker on held-out sim families (minimise the binary NLL).
    cal_members = [np.flatnonzero(families == f) for f in sorted(cal_fams)]
    with torch.no_grad():
        pairs = _verifier_pairs(cal_members, view_ids, facet_keys)
        feats = model.image_features(x_all)
        temps = []
        for f in FACETS:
            if f not in pairs:
                temps.append(1.0)
                continue
            ii, tt, yy = pairs[f]
            z = model.logits(feats[ii], emb[tt], f)
            grid = np.exp(np.linspace(np.log(0.25), np.log(8.0), 41))
            nll = [F.binary_cross_entropy_with_logits(z / t, torch.from_numpy(yy)).item() for t in grid]
            temps.append(float(grid[int(np.argmin(nll))]))
        model.temperature.copy_(torch.tensor(temps))
    if live is not None:
        for f, t in zip(FACETS, temps):
            live.log_metric(f"verify/temperature_{f}", t, plot=False)
    return model


def _verifier_loss(model: FacetVerifier, x_all, emb, fams, view_ids, facet_keys) -> torch.Tensor:
    idx = np.concatenate(fams)
    feats = model.image_features(x_all[idx])
    local = {g: i for i, g in enumerate(idx)}
    pairs = _verifier_pairs(fams, view_ids, facet_keys)
    loss = 0.0
    for f, (ii, tt, yy) in pairs.items():
        li = torch.from_numpy(np.array([local[g] for g in ii]))
        z = model.logits(feats[li], emb[tt], f)
        y = torch.from_numpy(yy)
        # balance: matches are rarer than mismatches for appearance/action
        w = torch.where(y > 0, 0.5 / y.mean().clamp_min(1e-3), 0.5 / (1 - y.mean()).clamp_min(1e-3))
        loss = loss + F.binary_cross_entropy_with_logits(z, y, weight=w)
    return loss / max(len(pairs), 1)


# ---------------------------------------------------------------- scoring the pools

@torch.no_grad()
def score_cross(model: CrossReranker, pool_images: torch.Tensor, tokens: torch.Tensor, present: torch.Tensor) -> np.ndarray:
    """pool_images [Q, P, 3, H, W], tokens [Q, 6, 384] → logits [Q, P]."""
    q, p = pool_images.shape[:2]
    patches = model.patches(pool_images.flatten(0, 1))
    return model.score(patches, tokens.repeat_interleave(p, 0), present.repeat_interleave(p, 0)).view(q, p).numpy()


@torch.no_grad()
def score_cloze(model: ClozeExpert, pool_images: torch.Tensor, slots: list[dict[str, str]]) -> np.ndarray:
    """Mean log-probability of the query's masked key words; 0 where no key word was parsed."""
    q, p = pool_images.shape[:2]
    logp = model(pool_images.flatten(0, 1))
    out = np.zeros((q, p), dtype=np.float32)
    for i, sl in enumerate(slots):
        terms = [logp[s].view(q, p, -1)[i, :, ATTR_VALUES[s].index(sl[s])].numpy() for s in CLOZE_SLOTS if s in sl]
        if terms:
            out[i] = np.mean(terms, axis=0)
    return out


@torch.no_grad()
def score_verify(model: FacetVerifier, pool_images: torch.Tensor, view_ids: np.ndarray, text_emb: np.ndarray) -> np.ndarray:
    """Σ over the query's present facets of log σ(calibrated checker logit) [Q, P]."""
    q, p = pool_images.shape[:2]
    feats = model.image_features(pool_images.flatten(0, 1))
    out = np.zeros((q, p), dtype=np.float32)
    emb = torch.from_numpy(text_emb)
    for k, f in enumerate(FACETS):
        col = VIEWS.index(f)
        has = view_ids[:, col] >= 0
        if not has.any():
            continue
        txt = emb[np.maximum(view_ids[:, col], 0)].repeat_interleave(p, 0)
        z = model.logits(feats, txt, f) / model.temperature[k]
        out += np.where(has[:, None], F.logsigmoid(z).view(q, p).numpy(), 0.0)
    return out
