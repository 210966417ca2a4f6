"""Normalisation, clipping, anchor constraint and agreement on hand-made score tables."""
import numpy as np
import pytest

from paperworks.person_search.fusion import (
    FusionConfig, ablations, candidate_pool, fuse_query, pool_ranks, percentile_normalise, zscore_normalise,
)
from paperworks.person_search.text import VIEWS

W = (1.0, 1.0, 0.5, 0.5, 0.5, 0.5)


def test_percentile_normalisation_by_hand():
    s = np.array([[0.0, 1.0, 2.0, 3.0, 4.0]])
    # numpy linear percentiles: P10 = 0.4, P50 = 2, P90 = 3.6 -> (s - 2) / 3.2
    np.testing.assert_allclose(percentile_normalise(s), [[-0.625, -0.3125, 0.0, 0.3125, 0.625]])


def test_percentile_normalisation_clips_outliers_to_three():
    s = np.array([[0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 100.0]])
    out = percentile_normalise(s)
    assert out.max() == 3.0 and out.min() >= -3.0
    assert np.all(np.diff(out[0]) >= 0)  # monotone
    assert percentile_normalise(-s).min() == -3.0


def test_scale_invariance_per_branch():
    s = np.array([[0.1, 0.5, 0.2, 0.9], [10.0, 50.0, 20.0, 90.0]])  # same ranking, 100x scale
    out = percentile_normalise(s)
    np.testing.assert_allclose(out[0], out[1])
    np.testing.assert_allclose(zscore_normalise(s)[0], zscore_normalise(s)[1])


def test_constant_branch_is_neutral():
    assert np.all(percentile_normalise(np.ones((1, 6))) == 0)
    assert np.all(zscore_normalise(np.ones((1, 6))) == 0)


def test_anchor_constraint_excludes_facet_only_candidates():
    # branches: full (anchor), action (facet); candidate 9 only in the facet list
    ids = np.array([[1, 2, 3], [9, 1, 2]])
    views = np.array(["full", "action"])
    present = np.array([True, True])
    cfg = FusionConfig(W)
    assert candidate_pool(ids, views, present, cfg).tolist() == [1, 2, 3]
    assert candidate_pool(ids, views, present, ablations(cfg)["fusion_no_anchor"]).tolist() == [1, 2, 3, 9]
    # a missing anchor view contributes nothing
    assert candidate_pool(np.array([[1, 2], [5, 6]]), np.array(["full", "structured"]), np.array([True, False]), cfg).tolist() == [1, 2]


def test_pool_ranks_by_hand():
    raw = np.array([[0.9, 0.5, 0.1], [0.2, 0.9, 0.1], [0.3, 0.3, 0.1]])
    assert pool_ranks(raw).tolist() == [[1, 2, 3], [2, 1, 3], [1, 2, 3]]  # a tie: the lower gallery id first


def test_agreement_only_counts_the_top_k_of_the_pool():
    ids = np.array([[1, 2, 3]])  # one anchor branch; pool = {1, 2, 3}
    table = {1: 0.9, 2: 0.5, 3: 0.1}

    def exact(pool):
        return np.array([[table[g] for g in pool]])

    base = FusionConfig(W, agreement_weight=0.0)
    _, plain = fuse_query(ids, exact, np.array(["full"]), np.array([True]), base)
    _, with2 = fuse_query(ids, exact, np.array(["full"]), np.array([True]), FusionConfig(W, agreement_depth=2))
    np.testing.assert_allclose(with2 - plain, [1.0, 11 / 12, 0.0])  # rank 3 is outside K = 2: no vote


def test_fusion_weights_and_agreement_decide_the_order():
    # two branches (full anchor and scene facet) over candidates 10, 20, 30
    ids = np.array([[10, 20, 30], [30, 20, 10]])
    views = np.array(["full", "scene"])
    present = np.array([True, True])
    table = {10: (0.9, 0.1), 20: (0.8, 0.5), 30: (0.1, 0.9)}

    def exact(pool):
        return np.array([[table[g][b] for g in pool] for b in range(2)])

    # by hand: full over the pool [0.9, 0.8, 0.1]: P10 .24, P50 .8, P90 .88 -> [.15625, 0, -1.09375];
    # scene [0.1, 0.5, 0.9]: P10 .18, P50 .5, P90 .82 -> [-.625, 0, .625]; weights 1 and 0.5 (sum 1.5)
    want = {10: (0.15625 - 0.3125) / 1.5, 20: 0.0, 30: (-1.09375 + 0.3125) / 1.5}
    ranked, fused = fuse_query(ids, exact, views, present, FusionConfig(W, agreement_weight=0.0))
    assert ranked.tolist() == [20, 10, 30]
    np.testing.assert_allclose(fused, [want[g] for g in ranked], atol=1e-12)
    # the agreement term adds (k+1)/(k+rank) averaged with the same weights
    ranked_a, fused_a = fuse_query(ids, exact, views, present, FusionConfig(W, agreement_weight=1.0))
    agree = {10: (1 + 0.5 * 11 / 13) / 1.5, 20: (11 / 12 + 0.5 * 11 / 12) / 1.5, 30: (11 / 13 + 0.5) / 1.5}
    np.testing.assert_allclose(fused_a, [want[g] + agree[g] for g in ranked_a], atol=1e-12)
    # a missing facet drops out: only the anchor decides
    ranked_m, _ = fuse_query(ids, exact, views, np.array([True, False]), FusionConfig(W))
    assert ranked_m.tolist() == [10, 20, 30]


def test_ablations_differ_in_one_switch():
    cfg = FusionConfig(W)
    ab = ablations(cfg)
    assert ab["fusion_no_anchor"].use_anchor is False and ab["fusion_zscore"].normalisation == "zscore"
    assert ab["fusion_no_agreement"].agreement_weight == 0.0
    assert all(w == 0 for v, w in zip(VIEWS, ab["fusion_anchors_only"].view_weights) if v not in cfg.anchor_views)


def test_query_without_parseable_facets_runs_on_its_anchor_views():
    from paperworks.person_search.fusion import fuse_all
    from paperworks.person_search.text import parse_query

    rng = np.random.default_rng(0)
    n_m, n_q, k, d = 2, 3, 5, 8
    gallery = [rng.standard_normal((40, d)) for _ in range(n_m)]
    qviews = [rng.standard_normal((n_q, len(VIEWS), d)) for _ in range(n_m)]
    present = np.ones((n_q, len(VIEWS)), bool)
    parsed = parse_query("hard to say who it was")
    present[1] = [parsed.views[v] is not None for v in VIEWS]  # only full + structured
    assert present[1].tolist() == [True, True, False, False, False, False]
    ids = np.stack([np.stack([np.argsort(-(gallery[m] @ qviews[m][q].T), axis=0)[:k].T for q in range(n_q)], axis=1)
                    for m in range(n_m)])  # [M, V, Q, K]
    ids[:, ~present[1], 1] = -1
    out_ids, out_scores = fuse_all(ids, gallery, qviews, present, FusionConfig(W), depth=5)
    assert (out_ids[1] >= 0).all() and np.all(np.diff(out_scores[1]) <= 0)
    # its candidates come only from the anchor lists
    assert set(out_ids[1]) <= set(ids[:, :2, 1].ravel())


# ---------------------------------------------------------------- padding and the fast path (issue 13)

def test_padding_of_short_lists_is_never_a_candidate():
    from paperworks.person_search.fusion import padded_pools

    views = np.array(["full", "structured"])
    short = np.array([[3, 1, -1, -1], [1, 2, -1, -1]])  # short result lists padded with −1
    assert candidate_pool(short, views, np.array([True, True]), FusionConfig(W)).tolist() == [1, 2, 3]
    pools = padded_pools(np.array([[[3, 1, -1, -1], [1, 2, -1, -1]], [[-1, -1, -1, -1], [7, -1, -1, -1]]]))
    assert pools.tolist() == [[1, 2, 3], [7, -1, -1]]  # padding only after the last real candidate


def test_view_baseline_never_takes_the_padding_as_a_candidate():
    """``view_alone`` (the per-view baselines of the headline claim) pools its backbones' lists: a −1
    pad of a short list must not become gallery item −1 (the last image), however well it scores."""
    from paperworks.person_search.fusion import view_alone

    gallery = [np.eye(4, dtype=np.float32)[[0, 1, 2, 3, 3]]] * 2  # item 4 (= index −1) matches the query best
    qviews = [np.array([[[0, 0, 0, 1], [0, 0, 0, 1]]], dtype=np.float32)] * 2  # [Q=1, V=2, D]
    topk = np.array([[[[0, 1, -1]], [[2, -1, -1]]], [[[1, -1, -1]], [[-1, -1, -1]]]])  # [M, V, Q, K]
    present = np.array([[True, True]])
    assert sorted(view_alone(topk, gallery, qviews, present, 0, 3)[0].tolist()) == [-1, 0, 1]
    assert view_alone(topk, gallery, qviews, present, 1, 3)[0].tolist() == [2, -1, -1]


def _random_world(seed: int, n_g: int = 300, n_q: int = 25, d: int = 16, n_m: int = 3):
    rng = np.random.default_rng(seed)

    def unit(*shape):
        x = rng.standard_normal(shape).astype(np.float32)
        return x / np.linalg.norm(x, axis=-1, keepdims=True)

    galleries = [unit(n_g, d) for _ in range(n_m)]
    present = rng.random((n_q, len(VIEWS))) < 0.7
    present[:, 0] = True  # the full caption always exists; the structured view sometimes not (here)
    qviews = [np.where(present[..., None], unit(n_q, len(VIEWS), d), 0.0).astype(np.float32) for _ in range(n_m)]
    return galleries, qviews, present


@pytest.mark.parametrize("engine", ["faiss", "torch", "numpy"])
def test_fast_stage1_returns_the_slow_paths_rankings(engine):
    from paperworks.person_search.fusion import fuse_all_slow
    from paperworks.person_search.retrieval import FlatIndex, Stage1, search_branches

    galleries, qviews, present = _random_world(0)
    k, depth = 20, 15
    topk = np.stack([search_branches(FlatIndex(g, "numpy"), qv, present, k)[1] for g, qv in zip(galleries, qviews)])
    cfg = FusionConfig(W, agreement_depth=k)
    want_ids, want_scores = fuse_all_slow(topk, galleries, qviews, present, cfg, depth)
    got_ids, got_scores = Stage1(galleries, cfg, k, engine).rank(qviews, present, depth)
    np.testing.assert_array_equal(got_ids, want_ids)
    np.testing.assert_allclose(got_scores, want_scores, rtol=1e-5, atol=1e-6)
    assert (want_ids >= 0).all()


@pytest.mark.parametrize("name", ["fusion", "fusion_no_anchor", "fusion_zscore", "fusion_no_agreement", "fusion_anchors_only"])
def test_vectorised_fusion_equals_the_per_query_loop(name):
    from paperworks.person_search.fusion import fuse_all, fuse_all_slow
    from paperworks.person_search.retrieval import FlatIndex, search_branches

    galleries, qviews, present = _random_world(1, n_g=120, n_q=30)
    k = 12
    topk = np.stack([search_branches(FlatIndex(g, "numpy"), qv, present, k)[1] for g, qv in zip(galleries, qviews)])
    cfg = ablations(FusionConfig(W, agreement_depth=5))[name]  # depth 5 < pool: some candidates get no vote
    want_ids, want_scores = fuse_all_slow(topk, galleries, qviews, present, cfg, 30)
    got_ids, got_scores = fuse_all(topk, galleries, qviews, present, cfg, 30)
    np.testing.assert_array_equal(got_ids, want_ids)
    np.testing.assert_allclose(got_scores, want_scores, rtol=1e-5, atol=1e-6)
    if cfg.use_anchor:
        assert (got_ids[:, -1] == -1).any()  # some anchor pools are shorter than 30: −1 padding at the end only
    for row in got_ids:
        real = row[row >= 0]
        assert (row[: len(real)] == real).all() and len(set(real)) == len(real)
