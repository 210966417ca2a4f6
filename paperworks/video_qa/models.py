"""The three trained models of the track, each read top to bottom with its training loop.

1. **Frame encoder** — ``core.vision.PatchifyEncoder2D`` pre-trained on per-frame truth (which
   (shape, colour) pairs are on screen, how many objects) through two linear probes, then frozen;
   the probes' probabilities (57 numbers per frame) are what the cache holds.
2. **Answerer** — each frame is encoded with the question and its deviation from the clip's mean
   frame; a question token reads those frames (with their times) through
   ``layers`` cross-attention blocks; a head scores the answer vocabulary and the 4 options'
   scores are the option logits. Trained on uniform frames and on dense clips (plain clip QA):
   no grounding, reflection or other tool-use traces.
3. **Relevance scorer** — per frame: is this frame evidence for the question? Input: the frame's
   embedding, its difference from the video's mean global-pass embedding (what is unusual here),
   the question. Trained on frame-level truth (the question's evidence span), a generic matching
   task — no tool-use data either.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from paperworks.core.render.scene import COLOURS, SHAPES
from paperworks.core.vision import EncoderConfig, PatchifyEncoder2D, frames_to_tensor
from paperworks.video_qa.params import QTYPES, AnswererParams, EncoderParams, ScorerParams
from paperworks.video_qa.world import MAX_COUNT, N_OPTIONS, N_PAIRS, VOCAB, Question

QTYPE_INDEX = {t: i for i, t in enumerate(QTYPES)}
SHAPE_INDEX = {s: i for i, s in enumerate(SHAPES)}
N_TIME_FEATURES = 8


def _live(live_dir: Path | str | None):
    if live_dir is None:
        return None
    from dvclive import Live

    return Live(str(live_dir), dvcyaml=False, save_dvc_exp=False, report=None)


def _log(live, history: list[dict], row: dict) -> None:
    history.append(row)
    if live is not None:
        live.step = int(row["step"])
        for k, v in row.items():
            if k != "step":
                live.log_metric(k, float(v))
        live.next_step()


def _adamw(model: nn.Module, lr: float) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)


def _cosine(opt: torch.optim.Optimizer, steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    warm = max(1, steps // 20)
    return torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)) + 0.02)


# ---------------------------------------------------------------- 1. frame encoder
def make_encoder(ep: EncoderParams) -> PatchifyEncoder2D:
    widths = tuple(ep.widths)
    return PatchifyEncoder2D(EncoderConfig(widths=widths, strides=tuple(ep.strides), embed_dim=ep.embed_dim))


class EncoderPretrainer(nn.Module):
    """The encoder plus two linear probes on its embedding: each shape's colour (or absent), object count."""

    def __init__(self, encoder: PatchifyEncoder2D) -> None:
        super().__init__()
        self.encoder = encoder
        width = encoder.cfg.widths[-1]
        # Max-pooling keeps "some place shows a red circle" (a mean dilutes it by the object's area).
        self.pool = nn.Sequential(nn.Linear(2 * width, encoder.embed_dim), nn.GELU())
        self.shape_colour = nn.Linear(encoder.embed_dim, len(SHAPES) * (len(COLOURS) + 1))
        self.count = nn.Linear(encoder.embed_dim, MAX_COUNT + 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        fmap = self.encoder.forward_features(x)
        z = self.pool(torch.cat([fmap.amax(dim=(2, 3)), fmap.mean(dim=(2, 3))], dim=1))
        return self.shape_colour(z).view(len(x), len(SHAPES), len(COLOURS) + 1), self.count(z)


def shape_colour_targets(pairs: np.ndarray) -> np.ndarray:
    """(shape, colour) multi-hot ``N × 50`` → per shape its colour index, or 10 when absent (``N × 5``).
    Shapes are distinct inside a video, so a frame shows each shape in at most one colour."""
    grid = pairs.reshape(len(pairs), len(SHAPES), len(COLOURS)) > 0
    return np.where(grid.any(axis=2), grid.argmax(axis=2), len(COLOURS)).astype(np.int64)


FEATURE_DIM = len(SHAPES) * (len(COLOURS) + 1) + MAX_COUNT + 1


class FrameFeaturizer(nn.Module):
    """The frozen frame representation that is cached: the probes' probabilities, ``P(colour of each
    shape | frame)`` (5 × 11, absent included) and ``P(object count)`` (7) — 62 numbers per frame."""

    def __init__(self, pretrainer: EncoderPretrainer) -> None:
        super().__init__()
        self.model = pretrainer
        self.embed_dim = FEATURE_DIM

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        colour_logits, count_logits = self.model(x)
        return torch.cat([torch.softmax(colour_logits, dim=-1).flatten(1), torch.softmax(count_logits, dim=-1)], dim=-1)


def make_featurizer(ep: EncoderParams) -> FrameFeaturizer:
    return FrameFeaturizer(EncoderPretrainer(make_encoder(ep))).eval()


def pretrain_encoder(frames: np.ndarray, pairs: np.ndarray, count: np.ndarray, ep: EncoderParams, seed: int,
                     live_dir: Path | str | None = None) -> tuple[FrameFeaturizer, list[dict]]:
    """Each shape's colour (CE over 11, averaged over shapes) + object count (CE) on truth-labelled
    frames; returns the frozen featurizer (encoder + probes) and the loss curve."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = EncoderPretrainer(make_encoder(ep))
    opt = _adamw(model, ep.lr)
    sched = _cosine(opt, ep.steps)
    frames_t, colour_t, count_t = torch.from_numpy(frames), torch.from_numpy(shape_colour_targets(pairs)), torch.from_numpy(count)
    live, history = _live(live_dir), []
    model.train()
    for step in tqdm(range(ep.steps), desc="encoder", mininterval=10, disable=ep.steps < 100):
        idx = torch.from_numpy(rng.integers(0, len(frames), size=ep.batch_size))
        colour_logits, count_logits = model(frames_to_tensor(frames_t[idx]))
        loss = F.cross_entropy(colour_logits.flatten(0, 1), colour_t[idx].flatten()) + F.cross_entropy(count_logits, count_t[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if step % ep.log_every == 0 or step == ep.steps - 1:
            with torch.no_grad():
                colour_acc = (colour_logits.argmax(-1) == colour_t[idx]).float().mean()
            _log(live, history, {"step": step, "loss": float(loss.detach()), "colour_accuracy": float(colour_acc)})
    if live is not None:
        live.end()
    model.eval()
    return FrameFeaturizer(model).eval(), history


# ---------------------------------------------------------------- shared inputs
def time_features(times: torch.Tensor) -> torch.Tensor:
    """Normalised times in [0, 1] → sin/cos at 4 frequencies (``… × 8``)."""
    freqs = torch.pi * 2.0 ** torch.arange(N_TIME_FEATURES // 2, dtype=torch.float32)
    ang = times[..., None] * freqs
    return torch.cat([ang.sin(), ang.cos()], dim=-1)


def question_ids(questions: list[Question]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Question type, subject shape and the 4 options as vocabulary ids."""
    return (torch.tensor([QTYPE_INDEX[q.qtype] for q in questions]), torch.tensor([SHAPE_INDEX[q.shape] for q in questions]),
            torch.tensor([q.option_ids for q in questions]))


# ---------------------------------------------------------------- 2. answerer
class Answerer(nn.Module):
    """Question token → ``layers`` × (cross-attention over frames, MLP) → vocabulary scores → option logits."""

    def __init__(self, embed_dim: int, ap: AnswererParams) -> None:
        super().__init__()
        d = ap.d_model
        # Each frame is read together with the question and with its deviation from the clip's mean
        # frame, so "the circle's colour here" and "what is unusual here" are one layer away.
        self.frame_in = nn.Sequential(nn.Linear(2 * embed_dim + N_TIME_FEATURES + d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        self.qtype = nn.Embedding(len(QTYPES), d)
        self.shape = nn.Embedding(len(SHAPES), d)
        self.attn = nn.ModuleList(nn.MultiheadAttention(d, ap.heads, batch_first=True) for _ in range(ap.layers))
        self.norm_q = nn.ModuleList(nn.LayerNorm(d) for _ in range(ap.layers))
        self.mlp = nn.ModuleList(nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
                                 for _ in range(ap.layers))
        self.norm_kv = nn.LayerNorm(d)
        self.head = nn.Sequential(nn.LayerNorm(2 * d), nn.Linear(2 * d, d), nn.GELU(), nn.Linear(d, len(VOCAB)))

    def forward(self, emb: torch.Tensor, times: torch.Tensor, qtype: torch.Tensor, shape: torch.Tensor,
                options: torch.Tensor) -> torch.Tensor:
        """``emb`` B × N × E, ``times`` B × N in [0, 1], ``options`` B × 4 vocabulary ids → B × 4 option logits."""
        q = (self.qtype(qtype) + self.shape(shape))[:, None]
        dev = emb - emb.mean(dim=1, keepdim=True)
        h = self.norm_kv(self.frame_in(torch.cat([emb, dev, time_features(times), q.expand(-1, emb.shape[1], -1)], dim=-1)))
        for attn, norm, mlp in zip(self.attn, self.norm_q, self.mlp):
            q = q + attn(norm(q), h, h, need_weights=False)[0]
            q = q + mlp(q)
        vocab = self.head(torch.cat([q[:, 0], h.mean(dim=1)], dim=-1))
        return vocab.gather(1, options)


def uniform_indices(n_frames: int, k: int, phase: float = 0.5) -> np.ndarray:
    """``k`` frames spread evenly over the video (``phase`` ∈ [0, 1) shifts them inside their slots)."""
    return np.minimum(((np.arange(k) + phase) * n_frames / k).astype(np.int64), n_frames - 1)


def window_indices(n_frames: int, centre: int, k: int) -> np.ndarray:
    """``k`` consecutive frames (a crop at full rate) centred on ``centre``, kept inside the video."""
    start = int(np.clip(centre - k // 2, 0, n_frames - k))
    return np.arange(start, start + k)


def train_answerer(table: torch.Tensor, video_row: dict[str, int], questions: list[Question], ap: AnswererParams,
                   global_frames: int, window_frames: int, seed: int, live_dir: Path | str | None = None
                   ) -> tuple[Answerer, list[dict]]:
    """Cross-entropy over the 4 option logits; each batch sees either uniform frames or dense clips.

    ``table``: all cached frame embeddings, ``V × T × E`` (float16), rows by ``video_row``.
    """
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    n_frames = table.shape[1]
    model = Answerer(table.shape[2], ap)
    opt = _adamw(model, ap.lr)
    sched = _cosine(opt, ap.steps)
    qt, sh, opts = question_ids(questions)
    labels = torch.tensor([q.answer for q in questions])
    rows = torch.tensor([video_row[q.video] for q in questions])
    live, history = _live(live_dir), []
    model.train()
    for step in tqdm(range(ap.steps), desc="answerer", mininterval=10, disable=ap.steps < 100):
        b = rng.integers(0, len(questions), size=ap.batch_size)
        if rng.random() < ap.window_view_share:
            centres = []
            for i in b:
                q = questions[i]
                if rng.random() < ap.evidence_clip_share:   # a clip holding the event (plain clip QA)
                    centres.append(int(rng.integers(q.ev_start, q.ev_end)) + int(rng.integers(-window_frames // 4, window_frames // 4 + 1)))
                else:
                    centres.append(int(rng.integers(0, n_frames)))
            idx = np.stack([window_indices(n_frames, c, window_frames) for c in centres])
        else:
            idx = np.stack([uniform_indices(n_frames, global_frames, rng.random()) for _ in b])
        idx_t = torch.from_numpy(idx)
        bt = torch.from_numpy(b)
        emb = table[rows[bt][:, None], idx_t].float()
        logits = model(emb, idx_t.float() / n_frames, qt[bt], sh[bt], opts[bt])
        loss = F.cross_entropy(logits, labels[bt])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % ap.log_every == 0 or step == ap.steps - 1:
            acc = float((logits.argmax(1) == labels[bt]).float().mean())
            _log(live, history, {"step": step, "loss": float(loss.detach()), "batch_accuracy": acc})
    if live is not None:
        live.end()
    model.eval()
    return model, history


# ---------------------------------------------------------------- 3. relevance scorer
class RelevanceScorer(nn.Module):
    """Frame embedding, its deviation from the video's mean frame, the question → relevance logit."""

    def __init__(self, embed_dim: int, sp: ScorerParams) -> None:
        super().__init__()
        self.qtype = nn.Embedding(len(QTYPES), 16)
        self.shape = nn.Embedding(len(SHAPES), 16)
        self.net = nn.Sequential(nn.Linear(2 * embed_dim + 32, sp.hidden), nn.GELU(), nn.Linear(sp.hidden, sp.hidden),
                                 nn.GELU(), nn.Linear(sp.hidden, 1))

    def forward(self, emb: torch.Tensor, context: torch.Tensor, qtype: torch.Tensor, shape: torch.Tensor) -> torch.Tensor:
        """``emb`` B × E (or B × N × E with ``context`` B × E) → relevance logits B (or B × N)."""
        q = torch.cat([self.qtype(qtype), self.shape(shape)], dim=-1)
        if emb.ndim == 3:
            context, q = context[:, None].expand_as(emb), q[:, None].expand(-1, emb.shape[1], -1)
        return self.net(torch.cat([emb, emb - context, q], dim=-1)).squeeze(-1)


def train_scorer(table: torch.Tensor, video_row: dict[str, int], questions: list[Question], sp: ScorerParams,
                 global_frames: int, seed: int, live_dir: Path | str | None = None) -> tuple[RelevanceScorer, list[dict]]:
    """BCE on (question, frame) pairs: half drawn from the evidence span (label 1), half uniform (label = in span)."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    n_frames = table.shape[1]
    model = RelevanceScorer(table.shape[2], sp)
    opt = _adamw(model, sp.lr)
    sched = _cosine(opt, sp.steps)
    qt, sh, _ = question_ids(questions)
    rows = torch.tensor([video_row[q.video] for q in questions])
    spans = np.array([(q.ev_start, q.ev_end) for q in questions])
    gidx = torch.from_numpy(uniform_indices(n_frames, global_frames))
    context = table[:, gidx].float().mean(dim=1)   # V × E: each video's mean global-pass frame
    live, history = _live(live_dir), []
    model.train()
    for step in tqdm(range(sp.steps), desc="scorer", mininterval=10, disable=sp.steps < 100):
        b = rng.integers(0, len(questions), size=sp.batch_size)
        lo, hi = spans[b, 0], spans[b, 1]
        inside = rng.random(sp.batch_size) < 0.5
        t = np.where(inside, lo + (rng.random(sp.batch_size) * (hi - lo)).astype(np.int64), rng.integers(0, n_frames, size=sp.batch_size))
        label = torch.from_numpy(((t >= lo) & (t < hi)).astype(np.float32))
        bt = torch.from_numpy(b)
        emb = table[rows[bt], torch.from_numpy(t)].float()
        logits = model(emb, context[rows[bt]], qt[bt], sh[bt])
        loss = F.binary_cross_entropy_with_logits(logits, label)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if step % sp.log_every == 0 or step == sp.steps - 1:
            acc = float(((logits > 0).float() == label).float().mean())
            _log(live, history, {"step": step, "loss": float(loss.detach()), "batch_accuracy": acc})
    if live is not None:
        live.end()
    model.eval()
    return model, history


def state_tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().contiguous() for k, v in model.state_dict().items()}


assert N_OPTIONS == 4 and len(COLOURS) == 10
