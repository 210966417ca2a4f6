"""The gate, the evidence stage (grounding, check, reflection, RGR) and the callable on a tiny video."""
import numpy as np
import pytest
import torch

from paperworks.core.adaptive import confidence_signals
from paperworks.core.render.scene import Scene
from paperworks.core.vision import encode_batched, frames_to_tensor
from paperworks.video_qa.models import FEATURE_DIM, Answerer, RelevanceScorer, make_featurizer
from paperworks.video_qa.params import AnswererParams, EncoderParams, PipelineParams, ScorerParams, WorldParams
from paperworks.video_qa.pipeline import (
    VARIANTS,
    CachedFrames,
    RenderedFrames,
    VideoQA,
    evidence_stage,
    fit_check_threshold,
    gate_exits,
    global_pass,
    parse_question,
    resample,
    run_question,
)
from paperworks.video_qa.world import Question, make_video

WP = WorldParams(n_train_videos=2, n_dev_videos=2, n_test_videos=2, n_frames=120, n_events=6)
PP = PipelineParams(global_frames=8, window_frames=6, max_rounds=3, resample_frames=5, segments=4)
Q = Question("v", "v-q0", "local", "circle", "What colour did the circle flash?", ("red", "blue", "green", "white"), 0, 40, 46)


@pytest.fixture(scope="module")
def models():
    torch.manual_seed(0)
    encoder = make_featurizer(EncoderParams(pretrain_frames=64, steps=10))
    answerer = Answerer(FEATURE_DIM, AnswererParams(steps=10)).eval()
    spec = make_video(3, WP)
    table = encode_batched(encoder, Scene(spec, 32, 32).frames(range(WP.n_frames)), prepare=frames_to_tensor).half()
    return encoder, answerer, spec, table


def constant_scorer(logit: float) -> RelevanceScorer:
    """A scorer whose relevance is sigmoid(logit) for every frame (last layer zeroed)."""
    s = RelevanceScorer(FEATURE_DIM, ScorerParams(steps=10))
    with torch.no_grad():
        s.net[-1].weight.zero_()
        s.net[-1].bias.fill_(logit)
    return s.eval()


def test_gate_exits_at_tau_inclusive():
    logits = np.array([2.0, 0.5, 0.1, -1.0])
    for temperature in (1.0, 2.5):
        m = float(confidence_signals(logits[None], temperature).margin[0])
        assert gate_exits(logits, temperature, m)               # margin == τ exits
        assert not gate_exits(logits, temperature, np.nextafter(m, 2.0))
        assert gate_exits(logits, temperature, np.nextafter(m, -1.0))


def test_relevant_first_window_is_accepted(models):
    _, answerer, _, table = models
    src = CachedFrames(table)
    _, gidx, gemb = global_pass(src, answerer, Q, PP)
    trace = evidence_stage(src, answerer, constant_scorer(8.0), Q, PP, gidx, gemb, np.random.default_rng(0))
    assert trace.passed and trace.rounds == 1 and trace.calls == 3
    assert trace.window[1] - trace.window[0] == PP.window_frames
    assert len(src.touched) == len(set(gidx) | set(range(*trace.window)))


@pytest.mark.parametrize("rgr", [True, False])
def test_reflection_proposes_new_windows_and_rgr_adds_frames(models, rgr):
    _, answerer, _, table = models
    src = CachedFrames(table)
    _, gidx, gemb = global_pass(src, answerer, Q, PP)
    trace = evidence_stage(src, answerer, constant_scorer(-8.0), Q, PP, gidx, gemb, np.random.default_rng(0), rgr=rgr)
    assert not trace.passed and trace.rounds == PP.max_rounds
    centres = [(a + b) // 2 for a, b, _ in trace.windows]
    for i, c in enumerate(centres):   # every proposal lies outside the windows already ruled out
        assert all(not (a <= c < b) for a, b, _ in trace.windows[:i])
    shown = set(gidx).union(*(range(a, b) for a, b, _ in trace.windows))
    assert set(trace.seen) == src.touched   # every frame touched was scored
    if rgr:  # resampled frames outside every window (a later window may cover some of them)
        assert len(shown) < len(src.touched) <= len(shown) + (PP.max_rounds - 1) * PP.resample_frames
    else:
        assert src.touched == shown
    assert trace.calls == 2 + PP.max_rounds + (PP.max_rounds - 1 if rgr else 0)


def test_resample_follows_relevance_and_skips_ruled_out():
    pp = PipelineParams(global_frames=8, window_frames=6, segments=4, rgr_floor=0.0)
    n = 40
    seen = {2: 0.1, 12: 0.1, 22: 0.9, 32: 0.1}
    ruled = np.zeros(n, bool)
    ruled[30:40] = True
    picks = resample(seen, ruled, n, 12, pp, np.random.default_rng(0))
    assert len(picks) == len(set(picks.tolist())) == 12
    assert not ruled[picks].any() and not set(picks.tolist()) & set(seen)
    per_segment = np.bincount(picks // 10, minlength=4)
    assert per_segment[3] == 0 and per_segment[2] == per_segment.max() and per_segment[2] >= 8


def test_sources_agree_and_count_frames(models):
    encoder, answerer, spec, table = models
    cached, rendered = CachedFrames(table), RenderedFrames(Scene(spec, 32, 32), encoder)
    a = global_pass(cached, answerer, Q, PP)[0]
    b = global_pass(rendered, answerer, Q, PP)[0]
    np.testing.assert_allclose(a, b, atol=1e-5)
    rendered.embed(np.array([0, 0, 1]))
    assert rendered.touched == cached.touched | {0, 1} and len(cached.touched) == PP.global_frames


def test_answer_callable_on_a_tiny_video(models):
    encoder, answerer, spec, _ = models
    shape = spec.objects[0].shape
    text = f"What colour did the {shape} flash?"
    options = ("red", "blue", "green", "white")
    qa = VideoQA(encoder, answerer, constant_scorer(8.0), PP, temperature=1.0, tau=0.0, size=32)
    quick = qa.answer(spec, text, options)
    assert quick.stage == 1 and quick.frames_used == PP.global_frames and quick.evidence_window is None
    assert quick.answer in options and 0.0 <= quick.confidence <= 1.0 and quick.latency_ms > 0
    qa.tau = 1.0  # an untrained answerer is never certain: always stage 2
    slow = qa.answer(spec, text, options)
    assert slow.stage == 2 and slow.frames_used > PP.global_frames and slow.answer in options
    a, b = slow.evidence_window
    assert 0 <= a < b <= spec.n_frames / spec.fps and b - a == pytest.approx(PP.window_frames / spec.fps)
    with pytest.raises(ValueError, match="matches none of the templates"):
        qa.answer(spec, "Why is the sky blue?", options)
    with pytest.raises(ValueError, match="not answer words"):
        qa.answer(spec, text, ("red", "blue", "green", "teal"))
    assert parse_question("How many objects were on screen while the cross flashed?") == ("counting", "cross")


def test_run_question_records_every_variant(models):
    _, answerer, _, table = models
    records, trace = run_question(table, answerer, constant_scorer(-8.0), Q, PP, seed=1)
    by = {r["variant"]: r for r in records}
    assert tuple(by) == VARIANTS
    assert by["stage1"]["frames"] == PP.global_frames and by["stage1"]["calls"] == 1
    assert by["stage2"]["frames"] > by["stage2_no_rgr"]["frames"] > by["stage2_one_round"]["frames"] > PP.global_frames
    assert by["oracle_window"]["hit"] and by["oracle_window"]["frames"] == PP.window_frames
    assert trace.rounds == PP.max_rounds


def marker_scorer() -> RelevanceScorer:
    """Relevance ≈ 0.97 where the queried shape's first colour has probability 1, ≈ 0 where it is 0 (hand-set weights)."""
    s = RelevanceScorer(FEATURE_DIM, ScorerParams(steps=10))
    with torch.no_grad():
        for layer in (s.net[0], s.net[2], s.net[4]):
            layer.weight.zero_()
            layer.bias.zero_()
        s.net[0].weight[0, 0] = 1.0
        s.net[2].weight[0, 0] = 1.0
        s.net[4].weight[0, 0], s.net[4].bias[0] = 20.0, -10.0
    return s.eval()


def test_check_threshold_is_fitted_on_dev_frames():
    n = 120
    table = torch.zeros(2, n, FEATURE_DIM, dtype=torch.float16)
    qs = [Question("a", "a-q", "local", "circle", "", ("red", "blue", "green", "white"), 0, 10, 16),
          Question("b", "b-q", "local", "square", "", ("red", "blue", "green", "white"), 0, 50, 56)]
    table[0, 10:16, 0] = 1.0    # the circle's first colour (block 0) …
    table[1, 50:56, 11] = 1.0   # … and the square's (block 1): the scorer reads the queried shape only
    table[1, 0:6, 0] = 1.0      # the circle in video b: not asked about, so not relevant
    pp = PipelineParams(global_frames=8, window_frames=6, check_precision=0.5)
    threshold, fit = fit_check_threshold(table, {"a": 0, "b": 1}, qs, marker_scorer(), pp)
    assert fit["fitted"] and fit["frames_above"] == 12 and 0.9 < threshold < 1.0
    table[0, 80:100, 0] = 1.0   # 20 marked frames outside any span: precision of the top frames falls to 12/32
    threshold, fit = fit_check_threshold(table, {"a": 0, "b": 1}, qs, marker_scorer(), pp)
    assert not fit["fitted"] and threshold == pp.relevance_threshold
    assert fit_check_threshold(table, {"a": 0, "b": 1}, qs, marker_scorer(), pp.model_copy(update={"check_precision": None}))[0] == 0.5
    # a global question's span is the whole video: its frames say nothing about finding brief evidence
    table[0, 80:100, 0] = 0.0
    whole = Question("a", "a-g", "global", "circle", "", ("red", "blue", "green", "white"), 0, 0, n)
    assert fit_check_threshold(table, {"a": 0, "b": 1}, [whole], marker_scorer(), pp) == (pp.relevance_threshold, {"fitted": False})
    threshold, fit = fit_check_threshold(table, {"a": 0, "b": 1}, [*qs, whole], marker_scorer(), pp)
    assert fit["fitted"] and fit["questions"] == 2 and fit["frames"] == 2 * n and 0.9 < threshold < 1.0
