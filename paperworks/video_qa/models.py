"""The three trained models of the track, each read top to bottom with its training loop.

1. **Frame encoder** — ``core.vision.PatchifyEncoder2D`` pre-trained on per-frame truth (which
   (shape, colour) pairs are on screen, how many objects) through two probes, then frozen;
   the probes' probabilities (62 numbers per frame) are what the cache holds.
2. **Answerer** — reads the queried shape's colour-probability track (and the count probe) over
   the frames it is given and describes each option by a few numbers shared by every shape and
   colour (its share of the shape's frames, its peak above the clip mean, early-minus-late share,
   the count inside the clip's most unusual frames …); a small MLP per question type turns them
   into the option's logit. Trained on uniform frames and on dense clips (plain clip QA): no
   grounding, reflection or other tool-use traces.
3. **Relevance scorer** — per frame: is this frame evidence for the question? Input: the queried
   shape's probe track, its difference from the video's mean global-pass frame (what is unusual
   here), the count probe, the question type. Trained on frame-level truth (the question's evidence
   span), a generic matching task — no tool-use data either.
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
from paperworks.video_qa.world import COUNTS, MAX_COUNT, N_OPTIONS, VOCAB, Question

QTYPE_INDEX = {t: i for i, t in enumerate(QTYPES)}
SHAPE_INDEX = {s: i for i, s in enumerate(SHAPES)}


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


def _log_interval(live, history: list[dict], step: int, since: list[dict]) -> None:
    """One logged point: each value averaged over the batches since the last point (then cleared), so
    the curve the plateau check reads is the training loss of the interval, not one batch's draw."""
    keys = dict.fromkeys(k for r in since for k in r)   # a key measured only at the logged step is its value there
    _log(live, history, {"step": step, **{k: float(np.mean([r[k] for r in since if k in r])) for k in keys}})
    since.clear()


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
    """The encoder plus two probes: each shape's colour (or absent), and the object count.

    The colour probe reads every cell of the feature map (a 1 × 1 convolution scoring all 50
    (shape, colour) pairs there) and keeps each pair's best cell: "a red circle is somewhere" is
    one cell's evidence, and a shape with no convincing cell falls to its learned "absent" score.
    The count probe reads the max- and mean-pooled map.
    """

    def __init__(self, encoder: PatchifyEncoder2D) -> None:
        super().__init__()
        self.encoder = encoder
        width = encoder.cfg.widths[-1]
        self.pair_per_cell = nn.Sequential(nn.Conv2d(width, encoder.embed_dim, 1), nn.GELU(),
                                           nn.Conv2d(encoder.embed_dim, len(SHAPES) * len(COLOURS), 1))
        self.absent = nn.Parameter(torch.zeros(len(SHAPES)))
        self.pool = nn.Sequential(nn.Linear(2 * width, encoder.embed_dim), nn.GELU())
        self.count = nn.Linear(encoder.embed_dim, MAX_COUNT + 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        fmap = self.encoder.forward_features(x)
        pairs = self.pair_per_cell(fmap).amax(dim=(2, 3)).view(len(x), len(SHAPES), len(COLOURS))
        colour_logits = torch.cat([pairs, self.absent.expand(len(x), -1)[..., None]], dim=-1)
        z = self.pool(torch.cat([fmap.amax(dim=(2, 3)), fmap.mean(dim=(2, 3))], dim=1))
        return colour_logits, self.count(z)


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


def _probe_loss(model: EncoderPretrainer, frames: torch.Tensor, colour: torch.Tensor, count: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Colour CE (over 11, averaged over shapes) + count CE, and the colour logits."""
    colour_logits, count_logits = model(frames_to_tensor(frames))
    return F.cross_entropy(colour_logits.flatten(0, 1), colour.flatten()) + F.cross_entropy(count_logits, count), colour_logits


def pretrain_encoder(frames: np.ndarray, pairs: np.ndarray, count: np.ndarray, ep: EncoderParams, seed: int,
                     heldout: tuple[np.ndarray, np.ndarray, np.ndarray], live_dir: Path | str | None = None
                     ) -> tuple[FrameFeaturizer, list[dict]]:
    """Each shape's colour + object count (``_probe_loss``) on truth-labelled frames; returns the frozen
    featurizer (encoder + probes) and the curves. ``heldout`` (frames, pairs, count) come from scenes
    never trained on: their loss at every logged point is ``heldout_loss``, the curve the plateau check
    reads — memorising the training scenes is not progress."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = EncoderPretrainer(make_encoder(ep))
    opt = _adamw(model, ep.lr)
    sched = _cosine(opt, ep.steps)
    frames_t, colour_t, count_t = torch.from_numpy(frames), torch.from_numpy(shape_colour_targets(pairs)), torch.from_numpy(count)
    held = torch.from_numpy(heldout[0]), torch.from_numpy(shape_colour_targets(heldout[1])), torch.from_numpy(heldout[2])
    live, history, since = _live(live_dir), [], []
    model.train()
    for step in tqdm(range(ep.steps), desc="encoder", mininterval=10, disable=ep.steps < 100):
        idx = torch.from_numpy(rng.integers(0, len(frames), size=ep.batch_size))
        loss, colour_logits = _probe_loss(model, frames_t[idx], colour_t[idx], count_t[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        with torch.no_grad():
            since.append({"loss": float(loss), "colour_accuracy": float((colour_logits.argmax(-1) == colour_t[idx]).float().mean())})
        if step % ep.log_every == 0 or step == ep.steps - 1:
            model.eval()
            total, hits = 0.0, 0.0
            with torch.no_grad():
                for i in torch.arange(len(held[0])).split(256):
                    l, c = _probe_loss(model, held[0][i], held[1][i], held[2][i])
                    total, hits = total + float(l) * len(i), hits + float((c.argmax(-1) == held[1][i]).float().mean()) * len(i)
            model.train()
            since[-1].update(heldout_loss=total / len(held[0]), heldout_colour_accuracy=hits / len(held[0]))
            _log_interval(live, history, step, since)
    if live is not None:
        live.end()
    model.eval()
    return FrameFeaturizer(model).eval(), history


# ---------------------------------------------------------------- shared inputs
def question_ids(questions: list[Question]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Question type, subject shape and the 4 options as vocabulary ids."""
    return (torch.tensor([QTYPE_INDEX[q.qtype] for q in questions]), torch.tensor([SHAPE_INDEX[q.shape] for q in questions]),
            torch.tensor([q.option_ids for q in questions]))


# ---------------------------------------------------------------- 2. answerer
N_COLOURS = len(COLOURS)
COLOUR_BLOCK = len(SHAPES) * (N_COLOURS + 1)   # the cached layout (FrameFeaturizer): 5 × 11 colour probes, then P(count)
COLOUR_FEATURES = ("share", "peak_above_mean", "peak", "early_minus_late", "log_share")
COUNT_FEATURES = ("in_unusual_frames", "clip_mean", "log_in_unusual_frames", "log_clip_mean")
OPTION_FEATURES = COLOUR_FEATURES + COUNT_FEATURES


def shape_track(emb: torch.Tensor, shape: torch.Tensor) -> torch.Tensor:
    """The queried shape's 11 probe probabilities (10 colours, absent) from cached frames ``B × … × 62`` → ``B × … × 11``."""
    grid = emb[..., :COLOUR_BLOCK].unflatten(-1, (len(SHAPES), N_COLOURS + 1))
    index = shape.view(-1, *([1] * (grid.ndim - 1))).expand(*grid.shape[:-2], 1, N_COLOURS + 1)
    return grid.gather(-2, index).squeeze(-2)


def option_features(emb: torch.Tensor, times: torch.Tensor, shape: torch.Tensor, options: torch.Tensor,
                    unusual_sharpness: torch.Tensor) -> torch.Tensor:
    """What the clip says about each option, in terms shared by every shape, colour and count (``B × 4 × 9``).

    From the queried shape's colour track ``P(colour c | frame t)`` (the cached probe probabilities):
    - ``share`` — the shape's frames that wore c (mean of P(c) over frames / mean P(shape visible));
    - ``peak_above_mean`` — the largest rise of P(c) in one frame over its clip mean (a flash);
    - ``peak`` — the largest P(c) in one frame;
    - ``early_minus_late`` — share of c in the clip's first part minus its last part (linear time
      weights), which orders two colours;
    - ``log_share``.
    From the object-count track, for count options k:
    - ``in_unusual_frames`` — P(count = k) averaged over the frames where the shape's colours differ
      most from their clip mean (softmax weights, sharpness learned), i.e. inside a flash;
    - ``clip_mean`` — P(count = k) over the whole clip; and the logs of both.
    Colour features are 0 for count options and count features 0 for colour options.
    """
    track = shape_track(emb, shape)                                  # B × N × 11: the queried shape only
    colour, visible = track[..., :N_COLOURS], 1.0 - track[..., N_COLOURS]
    count = emb[:, :, COLOUR_BLOCK:]                                 # B × N × 7
    eps = 1e-3
    span = times.amax(1, keepdim=True) - times.amin(1, keepdim=True)
    late = ((times - times.amin(1, keepdim=True)) / span.clamp_min(1e-6))[..., None]   # 0 at the clip's first frame, 1 at its last
    mean = colour.mean(1)                                            # B × 10
    share = mean / (visible.mean(1, keepdim=True) + eps)
    early_share = (colour * (1 - late)).sum(1) / ((visible[..., None] * (1 - late)).sum(1) + eps)
    late_share = (colour * late).sum(1) / ((visible[..., None] * late).sum(1) + eps)
    per_colour = torch.stack([share, (colour - mean[:, None]).amax(1), colour.amax(1), early_share - late_share,
                              torch.log(share + 0.01)], dim=-1)     # B × 10 × 5
    unusual = 0.5 * (colour - mean[:, None]).abs().sum(-1)           # B × N: distance of the frame's colours from the clip's
    weights = torch.softmax(unusual_sharpness * unusual, dim=1)[..., None]
    in_unusual, clip_mean = (weights * count).sum(1), count.mean(1)  # B × 7
    per_count = torch.stack([in_unusual, clip_mean, torch.log(in_unusual + 0.01), torch.log(clip_mean + 0.01)], dim=-1)
    # option id → its row: colours are vocabulary ids 0..9, count words "1".."6" are count classes 1..6
    is_colour = options < N_COLOURS
    colour_rows = per_colour.gather(1, options.clamp_max(N_COLOURS - 1)[..., None].expand(-1, -1, per_colour.shape[-1]))
    count_class = (options - N_COLOURS + 1).clamp(0, MAX_COUNT)
    count_rows = per_count.gather(1, count_class[..., None].expand(-1, -1, per_count.shape[-1]))
    m = is_colour[..., None].float()
    return torch.cat([colour_rows * m, count_rows * (1 - m)], dim=-1)


class Answerer(nn.Module):
    """Option features (``option_features``) → a small MLP per question type → one logit per option.

    The same few weights score every option of a question type, whatever its shape and colour:
    ``4 × (9 × hidden + 2 × hidden + 9)`` numbers plus the sharpness of the count read-out.
    """

    def __init__(self, embed_dim: int, ap: AnswererParams) -> None:
        super().__init__()
        if embed_dim != FEATURE_DIM:
            raise ValueError(f"the answerer reads the cached probe probabilities ({FEATURE_DIM} per frame), got {embed_dim}")
        h, f = ap.hidden, len(OPTION_FEATURES)
        self.w1 = nn.Parameter(torch.randn(len(QTYPES), f, h) / math.sqrt(f))
        self.b1 = nn.Parameter(torch.zeros(len(QTYPES), h))
        self.w2 = nn.Parameter(torch.randn(len(QTYPES), h) / math.sqrt(h))
        self.linear = nn.Parameter(torch.zeros(len(QTYPES), f))   # a direct linear read-out beside the hidden layer
        self.log_sharpness = nn.Parameter(torch.tensor(math.log(10.0)))

    def forward(self, emb: torch.Tensor, times: torch.Tensor, qtype: torch.Tensor, shape: torch.Tensor,
                options: torch.Tensor) -> torch.Tensor:
        """``emb`` B × N × 62, ``times`` B × N in [0, 1], ``options`` B × 4 vocabulary ids → B × 4 option logits."""
        x = option_features(emb, times, shape, options, self.log_sharpness.exp())
        hidden = F.gelu(torch.einsum("bof,bfh->boh", x, self.w1[qtype]) + self.b1[qtype][:, None])
        return torch.einsum("boh,bh->bo", hidden, self.w2[qtype]) + torch.einsum("bof,bf->bo", x, self.linear[qtype])


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
    n_window = int(round(ap.batch_size * ap.window_view_share))
    since: list[dict] = []
    for step in tqdm(range(ap.steps), desc="answerer", mininterval=10, disable=ap.steps < 100):
        # Every batch holds both views in fixed numbers (dense clips, then uniform frames), so the
        # logged loss does not jump with the luck of the draw between the two kinds of batch.
        b = rng.integers(0, len(questions), size=ap.batch_size)
        views = []
        if n_window:
            centres = []
            for i in b[:n_window]:
                q = questions[i]
                if rng.random() < ap.evidence_clip_share:   # a clip holding the event (plain clip QA)
                    centres.append(int(rng.integers(q.ev_start, q.ev_end)) + int(rng.integers(-window_frames // 4, window_frames // 4 + 1)))
                else:
                    centres.append(int(rng.integers(0, n_frames)))
            views.append((b[:n_window], np.stack([window_indices(n_frames, c, window_frames) for c in centres])))
        if n_window < len(b):
            views.append((b[n_window:], np.stack([uniform_indices(n_frames, global_frames, rng.random()) for _ in b[n_window:]])))
        loss, correct = torch.zeros(()), 0
        for part, idx in views:
            idx_t, bt = torch.from_numpy(idx), torch.from_numpy(part)
            logits = model(table[rows[bt][:, None], idx_t].float(), idx_t.float() / n_frames, qt[bt], sh[bt], opts[bt])
            loss = loss + F.cross_entropy(logits, labels[bt], reduction="sum") / ap.batch_size
            correct += int((logits.argmax(1) == labels[bt]).sum())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        since.append({"loss": float(loss.detach()), "batch_accuracy": correct / ap.batch_size})
        if step % ap.log_every == 0 or step == ap.steps - 1:
            _log_interval(live, history, step, since)
    if live is not None:
        live.end()
    model.eval()
    return model, history


# ---------------------------------------------------------------- 3. relevance scorer
SCORER_INPUTS = 2 * (N_COLOURS + 1) + 1 + 2 * (MAX_COUNT + 1) + len(QTYPES)


class RelevanceScorer(nn.Module):
    """Per frame: the queried shape's probe track and its deviation from the video's mean frame, how far
    its colours are from that mean, the count probe and its deviation, the question type → relevance logit.

    Reading only the queried shape's block (as the answerer does) leaves the MLP one job shared by
    every shape: "is this frame unusual for this object in the way this question type cares about".
    """

    def __init__(self, embed_dim: int, sp: ScorerParams) -> None:
        super().__init__()
        if embed_dim != FEATURE_DIM:
            raise ValueError(f"the scorer reads the cached probe probabilities ({FEATURE_DIM} per frame), got {embed_dim}")
        self.net = nn.Sequential(nn.Linear(SCORER_INPUTS, sp.hidden), nn.GELU(), nn.Linear(sp.hidden, sp.hidden),
                                 nn.GELU(), nn.Linear(sp.hidden, 1))

    def forward(self, emb: torch.Tensor, context: torch.Tensor, qtype: torch.Tensor, shape: torch.Tensor) -> torch.Tensor:
        """``emb`` B × E (or B × N × E with ``context`` B × E) → relevance logits B (or B × N)."""
        qt = F.one_hot(qtype, len(QTYPES)).float()
        if emb.ndim == 3:
            context, qt = context[:, None].expand_as(emb), qt[:, None].expand(-1, emb.shape[1], -1)
        track, track_ctx = shape_track(emb, shape), shape_track(context, shape)
        count, count_ctx = emb[..., COLOUR_BLOCK:], context[..., COLOUR_BLOCK:]
        unusual = 0.5 * (track - track_ctx)[..., :N_COLOURS].abs().sum(-1, keepdim=True)
        x = torch.cat([track, track - track_ctx, unusual, count, count - count_ctx, qt], dim=-1)
        return self.net(x).squeeze(-1)


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
    live, history, since = _live(live_dir), [], []
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
        since.append({"loss": float(loss.detach()), "batch_accuracy": float(((logits > 0).float() == label).float().mean())})
        if step % sp.log_every == 0 or step == sp.steps - 1:
            _log_interval(live, history, step, since)
    if live is not None:
        live.end()
    model.eval()
    return model, history


def state_tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().contiguous() for k, v in model.state_dict().items()}


assert N_OPTIONS == 4 and len(COLOURS) == 10
assert VOCAB == (*COLOURS, *COUNTS) and COUNTS == tuple(str(k) for k in range(1, MAX_COUNT + 1))  # option_features maps ids to counts
