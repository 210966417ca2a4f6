"""CADER on shape videos: a confidence gate in front of a grounding → crop → check → reflect → resample loop.

Stage 1 looks at ``global_frames`` uniform frames, turns the answerer's option logits into a
temperature-scaled softmax and exits when the margin p1 − p2 ≥ τ (``>=``: a margin equal to τ
exits). Stage 2, for the rest:

1. **grounding** — score every frame seen so far with the relevance scorer; the window is
   ``window_frames`` consecutive frames centred on the best-scoring frame outside rejected windows;
2. **crop** — embed that window at full rate;
3. **relevance check** — the crop passes when its peak relevance ≥ ``relevance_threshold``;
4. **reflection** — otherwise mark the window as checked-irrelevant and propose another
   (up to ``max_rounds`` windows in all);
5. **relevance-guided resampling (RGR)** — before the next proposal, draw ``resample_frames`` new
   frames from a per-segment frame-rate map: a ``rgr_floor`` share spread evenly over segments not
   yet ruled out, the rest in proportion to the segments' accumulated relevance;
6. **answer** on the accepted crop (or, when no crop passed, the crop with the highest peak).

Frames come from a :class:`FrameSource`: the cached embeddings in the pipeline stages, or
render-and-encode on demand in :class:`VideoQA` (the callable ``answer``). Either way every distinct
frame a question touches is counted, and CPU-ms per question follows from the cost model.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

from paperworks.core.adaptive import confidence_signals
from paperworks.core.render.scene import SHAPES, Scene, SceneSpec
from paperworks.core.vision import encode_batched, frames_to_tensor
from paperworks.video_qa.models import QTYPE_INDEX, SHAPE_INDEX, Answerer, RelevanceScorer, uniform_indices, window_indices
from paperworks.video_qa.params import CostParams, PipelineParams
from paperworks.video_qa.world import N_OPTIONS, TEMPLATES, VOCAB_INDEX, Question


# ---------------------------------------------------------------- frames
class FrameSource:
    """Embeddings of a video's frames by index; remembers which distinct frames were touched."""

    n_frames: int

    def __init__(self) -> None:
        self.touched: set[int] = set()

    def _embed(self, idx: np.ndarray) -> torch.Tensor:
        raise NotImplementedError

    def embed(self, idx: np.ndarray) -> torch.Tensor:
        idx = np.asarray(idx, dtype=np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= self.n_frames):
            raise IndexError(f"frame indices outside 0..{self.n_frames - 1}")
        self.touched.update(int(i) for i in idx)
        return self._embed(idx)


class CachedFrames(FrameSource):
    """All frames already encoded (``T × E``, from the frame cache)."""

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.table, self.n_frames = table, table.shape[0]

    def _embed(self, idx: np.ndarray) -> torch.Tensor:
        return self.table[torch.from_numpy(idx)].float()


class RenderedFrames(FrameSource):
    """Render and encode frames on demand (each frame once)."""

    def __init__(self, scene: Scene, encoder: torch.nn.Module) -> None:
        super().__init__()
        self.scene, self.encoder, self.n_frames = scene, encoder, len(scene)
        self._memo: dict[int, torch.Tensor] = {}

    def _embed(self, idx: np.ndarray) -> torch.Tensor:
        new = sorted({int(i) for i in idx} - set(self._memo))
        if new:
            emb = encode_batched(self.encoder, self.scene.frames(new), prepare=frames_to_tensor)
            self._memo.update(zip(new, emb.half()))
        return torch.stack([self._memo[int(i)] for i in idx]).float()


# ---------------------------------------------------------------- the two stages
@dataclass
class Stage2Trace:
    logits: np.ndarray                 # option logits of the final answer
    window: tuple[int, int]            # the crop answered on, [start, end)
    passed: bool                       # a crop passed the relevance check
    rounds: int                        # windows proposed
    calls: int                         # scorer + answerer forwards
    windows: list[tuple[int, int, float]] = field(default_factory=list)  # every proposal: start, end, peak relevance
    seen: dict[int, float] = field(default_factory=dict)                  # frame → relevance (for the relevance map)


@torch.no_grad()
def answer_logits(answerer: Answerer, emb: torch.Tensor, idx: np.ndarray, n_frames: int, q: Question) -> np.ndarray:
    qt, sh = torch.tensor([QTYPE_INDEX[q.qtype]]), torch.tensor([SHAPE_INDEX[q.shape]])
    times = torch.from_numpy(np.asarray(idx, dtype=np.float32) / n_frames)[None]
    return answerer(emb[None], times, qt, sh, torch.tensor([q.option_ids]))[0].double().numpy()


@torch.no_grad()
def relevance(scorer: RelevanceScorer, emb: torch.Tensor, context: torch.Tensor, q: Question) -> np.ndarray:
    qt, sh = torch.tensor([QTYPE_INDEX[q.qtype]]), torch.tensor([SHAPE_INDEX[q.shape]])
    return torch.sigmoid(scorer(emb[None], context[None], qt, sh))[0].double().numpy()


def global_pass(source: FrameSource, answerer: Answerer, q: Question, pp: PipelineParams
                ) -> tuple[np.ndarray, np.ndarray, torch.Tensor]:
    """Stage 1: option logits from the uniform frames (and those frames, reused by stage 2)."""
    idx = uniform_indices(source.n_frames, pp.global_frames)
    emb = source.embed(idx)
    return answer_logits(answerer, emb, idx, source.n_frames, q), idx, emb


def gate_exits(logits: np.ndarray, temperature: float, tau: float) -> bool:
    """The stage-1 exit: temperature-scaled softmax margin p1 − p2 ≥ τ."""
    return bool(confidence_signals(logits[None], temperature).margin[0] >= tau)


def resample(rel_frames: dict[int, float], ruled_out: np.ndarray, n_frames: int, k: int, pp: PipelineParams,
             rng: np.random.Generator) -> np.ndarray:
    """RGR: ``k`` new frames from a per-segment frame-rate map built from the relevance seen so far."""
    edges = np.linspace(0, n_frames, pp.segments + 1).astype(np.int64)
    seen = np.zeros(n_frames, dtype=bool)
    seen[list(rel_frames)] = True
    free = ~ruled_out & ~seen
    mean_rel = float(np.mean(list(rel_frames.values()))) if rel_frames else 0.5
    rel = np.zeros(pp.segments)
    open_seg = np.zeros(pp.segments, dtype=bool)
    for s in range(pp.segments):
        a, b = edges[s], edges[s + 1]
        open_seg[s] = free[a:b].any()
        scores = [rel_frames[t] for t in range(a, b) if t in rel_frames and not ruled_out[t]]
        rel[s] = max(scores) if scores else mean_rel   # an unseen segment counts as average
    if not open_seg.any() or k == 0:
        return np.empty(0, dtype=np.int64)
    rate = np.where(open_seg, pp.rgr_floor / open_seg.sum() + (1 - pp.rgr_floor) * rel / max(rel[open_seg].sum(), 1e-12), 0.0)
    rate /= rate.sum()
    quota = np.floor(rate * k).astype(int)
    for s in np.argsort(-(rate * k - quota), kind="stable")[: k - quota.sum()]:  # largest remainders
        quota[s] += 1
    room = np.array([free[edges[s]: edges[s + 1]].sum() for s in range(pp.segments)])
    quota = np.minimum(quota, room)
    by_rate = np.argsort(-rate, kind="stable")
    while quota.sum() < k and (quota < room).any():  # a full segment's overflow goes to the most relevant open ones
        s = next(s for s in by_rate if quota[s] < room[s])
        quota[s] += 1
    picks = []
    for s in np.nonzero(quota)[0]:
        cand = np.nonzero(free[edges[s]: edges[s + 1]])[0] + edges[s]
        picks.append(rng.choice(cand, size=quota[s], replace=False))
    return np.sort(np.concatenate(picks)) if picks else np.empty(0, dtype=np.int64)


def evidence_stage(source: FrameSource, answerer: Answerer, scorer: RelevanceScorer, q: Question, pp: PipelineParams,
                   global_idx: np.ndarray, global_emb: torch.Tensor, rng: np.random.Generator,
                   max_rounds: int | None = None, rgr: bool = True) -> Stage2Trace:
    """Stage 2 (see the module docstring); ``max_rounds``/``rgr`` override params for the ablations.
    The check uses ``pp.relevance_threshold`` (the infer stage sets it to the dev-fitted value)."""
    rounds_cap = pp.max_rounds if max_rounds is None else max_rounds
    n = source.n_frames
    context = global_emb.mean(dim=0)
    seen = dict(zip(global_idx.tolist(), relevance(scorer, global_emb, context, q).tolist()))
    calls = 2  # stage 1's answerer pass is counted by the caller; scorer over the global frames + final answer
    ruled_out = np.zeros(n, dtype=bool)
    windows: list[tuple[int, int, float]] = []
    accepted = None
    for r in range(rounds_cap):
        cands = [(s, t) for t, s in seen.items() if not ruled_out[t]]
        centre = max(cands)[1] if cands else int(rng.integers(0, n))   # ties → the later frame, deterministically
        idx = window_indices(n, centre, pp.window_frames)
        emb = source.embed(idx)
        scores = relevance(scorer, emb, context, q)
        calls += 1
        seen.update(zip(idx.tolist(), scores.tolist()))
        peak = float(scores.max())
        windows.append((int(idx[0]), int(idx[-1]) + 1, peak))
        if peak >= pp.relevance_threshold:
            accepted = windows[-1]
            break
        ruled_out[idx] = True   # reflection: this crop holds no evidence; propose another
        if rgr and r < rounds_cap - 1 and pp.resample_frames > 0:
            new = resample(seen, ruled_out, n, pp.resample_frames, pp, rng)
            if len(new):
                seen.update(zip(new.tolist(), relevance(scorer, source.embed(new), context, q).tolist()))
                calls += 1
    if accepted is None:
        accepted = max(windows, key=lambda w: (w[2], w[0]))
    idx = np.arange(accepted[0], accepted[1])
    logits = answer_logits(answerer, source.embed(idx), idx, n, q)
    return Stage2Trace(logits, (accepted[0], accepted[1]), accepted[2] >= pp.relevance_threshold, len(windows), calls,
                       windows, seen)


# ---------------------------------------------------------------- the callable
@dataclass(frozen=True)
class Answer:
    answer: str
    confidence: float                # temperature-scaled margin p1 − p2 of the final answer
    evidence_window: tuple[float, float] | None  # seconds; None when stage 1 answered from the whole video
    frames_used: int
    latency_ms: float
    stage: int


_PATTERNS = {qtype: re.compile("^" + re.escape(t).replace(re.escape("{shape}"), "(?P<shape>[a-z]+)") + "$")
             for qtype, t in TEMPLATES.items()}


def parse_question(text: str) -> tuple[str, str]:
    """``(qtype, shape)`` of a question in one of the four templates; anything else is a ``ValueError``."""
    for qtype, pat in _PATTERNS.items():
        m = pat.match(text.strip())
        if m and m["shape"] in SHAPES:
            return qtype, m["shape"]
    raise ValueError(f"question {text!r} matches none of the templates: " + " | ".join(TEMPLATES.values()))


class VideoQA:
    """``answer(video, question, options)`` with the trained models, temperature and τ."""

    def __init__(self, encoder: torch.nn.Module, answerer: Answerer, scorer: RelevanceScorer, pp: PipelineParams,
                 temperature: float, tau: float, size: int = 64, seed: int = 0) -> None:
        self.encoder, self.answerer, self.scorer, self.pp = encoder.eval(), answerer.eval(), scorer.eval(), pp
        self.temperature, self.tau, self.size, self.seed = temperature, tau, size, seed

    def answer(self, video: SceneSpec, question: str, options: Sequence[str]) -> Answer:
        start = time.perf_counter()
        qtype, shape = parse_question(question)
        options = tuple(options)
        if len(options) != N_OPTIONS or len(set(options)) != N_OPTIONS:
            raise ValueError(f"options: need {N_OPTIONS} distinct options (got {options})")
        unknown = [o for o in options if o not in VOCAB_INDEX]
        if unknown:
            raise ValueError(f"options {unknown} are not answer words (allowed: {', '.join(VOCAB_INDEX)})")
        q = Question("video", "q", qtype, shape, question, options, 0, 0, video.n_frames)
        source = RenderedFrames(Scene(video, self.size, self.size), self.encoder)
        logits, gidx, gemb = global_pass(source, self.answerer, q, self.pp)
        window, stage = None, 1
        if not gate_exits(logits, self.temperature, self.tau):
            trace = evidence_stage(source, self.answerer, self.scorer, q, self.pp, gidx, gemb,
                                   np.random.default_rng(self.seed))
            logits, stage = trace.logits, 2
            window = (trace.window[0] / video.fps, trace.window[1] / video.fps)
        c = confidence_signals(logits[None], self.temperature)
        return Answer(options[int(c.prediction[0])], float(c.margin[0]), window, len(source.touched),
                      (time.perf_counter() - start) * 1000.0, stage)


def cpu_ms(frames: np.ndarray | float, calls: np.ndarray | float, cp: CostParams) -> np.ndarray | float:
    """The cost model: render + encode per distinct frame, plus one model forward per call."""
    return frames * cp.ms_per_frame + calls * cp.ms_per_call


# ---------------------------------------------------------------- every variant of one question (the infer stage)
VARIANTS = ("stage1", "stage2", "stage2_no_rgr", "stage2_one_round", "oracle_window", "random_crop")


def run_question(frames: torch.Tensor, answerer: Answerer, scorer: RelevanceScorer, q: Question, pp: PipelineParams,
                 seed: int) -> tuple[list[dict], Stage2Trace]:
    """One record per variant (option logits, distinct frames, model calls, window), and the full stage-2 trace.

    Stage-2 variants include stage 1's frames and call (they run after it); each variant starts
    from a fresh frame count and the same random stream.
    """
    n = frames.shape[0]
    base = {"video": q.video, "qid": q.qid, "qtype": q.qtype, "answer": q.answer}

    def record(variant: str, logits: np.ndarray, frames_used: int, calls: int, window: tuple[int, int],
               passed: bool = False, rounds: int = 0) -> dict:
        hit = window[0] < q.ev_end and q.ev_start < window[1]
        return {**base, "variant": variant, **{f"logit_{k}": float(v) for k, v in enumerate(logits)}, "frames": frames_used,
                "calls": calls, "win_start": window[0], "win_end": window[1], "passed": passed, "rounds": rounds, "hit": hit}

    src = CachedFrames(frames)
    logits1, gidx, gemb = global_pass(src, answerer, q, pp)
    out = [record("stage1", logits1, len(src.touched), 1, (0, n))]
    full = None
    for variant, rounds, rgr in (("stage2", None, True), ("stage2_no_rgr", None, False), ("stage2_one_round", 1, True)):
        src = CachedFrames(frames)
        _, gidx, gemb = global_pass(src, answerer, q, pp)
        trace = evidence_stage(src, answerer, scorer, q, pp, gidx, gemb, np.random.default_rng(seed), rounds, rgr)
        out.append(record(variant, trace.logits, len(src.touched), 1 + trace.calls, trace.window, trace.passed, trace.rounds))
        full = trace if variant == "stage2" else full
    rng = np.random.default_rng([seed, 1])
    for variant, centre in (("oracle_window", (q.ev_start + q.ev_end) // 2), ("random_crop", int(rng.integers(0, n)))):
        idx = window_indices(n, centre, pp.window_frames)
        logits = answer_logits(answerer, frames[torch.from_numpy(idx)].float(), idx, n, q)
        out.append(record(variant, logits, len(idx), 1, (int(idx[0]), int(idx[-1]) + 1)))
    return out, full


def fit_check_threshold(table: torch.Tensor, video_row: dict[str, int], questions: list[Question], scorer: RelevanceScorer,
                        pp: PipelineParams) -> tuple[float, dict]:
    """The relevance check's threshold from dev: the lowest score at which the frames scoring at least
    that much are inside their question's evidence span at least ``check_precision`` of the time.

    The scorer is trained on balanced (question, frame) pairs, so 0.5 is the boundary under a 50 %
    prior; in a video a local question's evidence is ~0.5 % of the frames, and the check must hold
    at that base rate. Only questions whose evidence is brief count: a global question's span is
    the whole video, so its frames would all be "inside" and the precision would say nothing about
    finding a brief event. Falls back to ``relevance_threshold`` when unset or never reached.
    """
    n = table.shape[1]
    questions = [q for q in questions if q.ev_end - q.ev_start < n]
    if pp.check_precision is None or not questions:
        return pp.relevance_threshold, {"fitted": False}
    gidx = uniform_indices(n, pp.global_frames)
    scores, labels = [], []
    for q in questions:
        frames = table[video_row[q.video]].float()
        scores.append(relevance(scorer, frames, frames[torch.from_numpy(gidx)].mean(dim=0), q))
        lab = np.zeros(n, dtype=bool)
        lab[q.ev_start:q.ev_end] = True
        labels.append(lab)
    s, y = np.concatenate(scores), np.concatenate(labels)
    order = np.argsort(-s, kind="stable")
    ranked = s[order]
    precision = np.cumsum(y[order]) / np.arange(1, len(s) + 1)   # of the top-k frames, the share inside a span
    ends = np.nonzero(np.append(ranked[1:] != ranked[:-1], True))[0]  # only whole groups of tied scores
    ok = ends[precision[ends] >= pp.check_precision]
    if not len(ok):
        return pp.relevance_threshold, {"fitted": False, "max_precision": float(precision[ends].max())}
    threshold = float(ranked[ok.max()])
    return threshold, {"fitted": True, "questions": len(questions), "frames": int(len(s)), "frames_above": int(ok.max() + 1),
                       "base_rate": float(y.mean())}
