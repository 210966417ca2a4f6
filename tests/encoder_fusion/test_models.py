"""The fusion equations on hand-checkable cases: closed gates = the foundation, the window is local,
parallel = the mean of the projections."""
import pytest
import torch

from paperworks.encoder_fusion.models import LocalCrossAttention, build_fusion, window_mask
from paperworks.encoder_fusion.params import HeadParams

HP = HeadParams(steps=10, d_model=16, heads=2, window=1)
DIMS = {"foundation": 8, "xray": 6, "path": 6}


def _tokens(n=3, grid=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {k: torch.randn(n, grid * grid, d, generator=g) for k, d in DIMS.items()}


def test_window_mask_by_hand():
    m = window_mask(3, 1)  # 3 × 3 grid, radius 1: the corner sees its 2 × 2 block, the centre sees all
    assert m.shape == (9, 9)
    assert (~m[0]).nonzero().flatten().tolist() == [0, 1, 3, 4]
    assert not m[4].any()
    assert (~window_mask(3, 0)).sum() == 9  # radius 0: each cell sees only itself


def test_closed_gates_give_the_foundation_model_exactly():
    tok, q = _tokens(), torch.randn(3, 5)
    base = build_fusion("foundation", DIMS, 5, 3, HP, seed=7)
    cascade = build_fusion("cascade", DIMS, 5, 3, HP, seed=7)
    assert torch.equal(base(tok, q), cascade(tok, q))  # training starts at the foundation
    assert cascade.gates() == {"gate_xray": 0.0, "gate_path": 0.0}
    with torch.no_grad():
        cascade.xattn_x.gate.fill_(0.5)
    assert not torch.allclose(base(tok, q), cascade(tok, q))


def test_local_cross_attention_ignores_cells_outside_the_window():
    torch.manual_seed(0)
    layer = LocalCrossAttention(16, 2, grid=3, window=1)
    with torch.no_grad():
        layer.gate.fill_(1.0)
    h, s = torch.randn(1, 9, 16), torch.randn(1, 9, 16)
    out = layer(h, s)
    far, near = s.clone(), s.clone()
    # a random change (a constant shift would vanish in the key/value LayerNorm)
    far[0, 8] += 3 * torch.randn(16)   # cell (2, 2): outside cell 0's window
    near[0, 4] += 3 * torch.randn(16)  # cell (1, 1): inside it
    assert torch.allclose(layer(h, far)[0, 0], out[0, 0], atol=1e-6)
    assert not torch.allclose(layer(h, near)[0, 0], out[0, 0], atol=1e-3)
    assert not torch.allclose(layer(h, far)[0, 8], out[0, 8], atol=1e-3)


def test_parallel_is_the_mean_of_the_projections():
    tok = _tokens()
    m = build_fusion("parallel", DIMS, 5, 3, HP, seed=1)
    expected = (m.proj_f(tok["foundation"]) + m.proj_x(tok["xray"]) + m.proj_p(tok["path"])) / 3
    assert torch.allclose(m.fuse(tok), expected)


def _training_away_from_dev():
    """Dev answers = the untrained model's own predictions (dev accuracy 1 at step 0), training answers shifted away
    from them: training can only lower dev accuracy."""
    import numpy as np

    from paperworks.encoder_fusion.models import predict

    tok = _tokens(n=6)
    qemb = torch.randn(4, 5, generator=torch.Generator().manual_seed(1))
    rows, qids = np.repeat(np.arange(6), 4), np.tile(np.arange(4), 6)
    hp = HP.model_copy(update={"steps": 30, "log_every": 5, "batch_size": 8, "lr": 0.01})
    first = predict(build_fusion("cascade", DIMS, 5, 3, hp, seed=2), tok, qemb, rows, qids).argmax(1).numpy()
    dev = {"row": rows, "qid": qids, "answer": first}
    train = {"row": rows, "qid": qids, "answer": (first + 1) % 9}
    return tok, qemb, rows, qids, hp, first, dev, train


def test_training_ends_at_the_best_dev_checkpoint():
    """Training away from the dev answers lowers dev accuracy, so the returned weights must be step 0's."""
    from paperworks.encoder_fusion.models import predict, train_fusion

    tok, qemb, rows, qids, hp, first, dev, train = _training_away_from_dev()
    model = build_fusion("cascade", DIMS, 5, 3, hp, seed=2)
    hist = train_fusion(model, tok, qemb, train, dev, hp, seed=2)
    assert hist[0]["dev_accuracy"] == 1.0 and hist[-1]["dev_accuracy"] < 1.0  # the premise
    assert [r["step"] for r in hist if r["selected"]] == [0]
    assert (predict(model, tok, qemb, rows, qids).argmax(1).numpy() == first).all()


def test_patience_stops_training_that_many_steps_after_the_best_dev_accuracy():
    """The setting above (best at step 0, never bettered): with patience 10 and a dev check every 5 steps,
    training stops at step 10 exactly (not 15: ``>=``), and still ends at step 0's weights; without patience it
    runs every step."""
    from paperworks.encoder_fusion.models import predict, train_fusion

    tok, qemb, rows, qids, hp, first, dev, train = _training_away_from_dev()
    full = train_fusion(build_fusion("cascade", DIMS, 5, 3, hp, seed=2), tok, qemb, train, dev, hp, seed=2)
    assert [r["step"] for r in full] == list(range(0, 31, 5))
    model = build_fusion("cascade", DIMS, 5, 3, hp, seed=2)
    hist = train_fusion(model, tok, qemb, train, dev, hp.model_copy(update={"patience": 10}), seed=2)
    assert [r["step"] for r in hist] == [0, 5, 10]
    assert [r["step"] for r in hist if r["selected"]] == [0]
    assert (predict(model, tok, qemb, rows, qids).argmax(1).numpy() == first).all()
    with pytest.raises(ValueError, match="patience"):
        HeadParams(steps=10, patience=0)


def test_parallel_query_attends_only_inside_each_encoders_window_and_uses_every_encoder():
    """SVA-like aggregation: output cell 0 (corner of a 3 × 3 grid, window 1) reads cells {0, 1, 3, 4} of every
    encoder and nothing else; the queries are learned, so the output is not the foundation's projection."""
    tok = _tokens(n=1)
    m = build_fusion("parallel_query", DIMS, 5, 3, HP, seed=3)
    base = m.fuse(tok)
    assert base.shape == (1, 9, HP.d_model) and m.gates() == {}
    for enc in ("foundation", "xray", "path"):
        far, near = {k: v.clone() for k, v in tok.items()}, {k: v.clone() for k, v in tok.items()}
        far[enc][0, 8] += 3 * torch.randn(DIMS[enc])    # outside cell 0's window
        near[enc][0, 4] += 3 * torch.randn(DIMS[enc])   # inside it
        assert torch.allclose(m.fuse(far)[0, 0], base[0, 0], atol=1e-6), enc
        assert not torch.allclose(m.fuse(near)[0, 0], base[0, 0], atol=1e-3), enc
    assert not torch.allclose(base, m.proj_f(tok["foundation"]), atol=1e-3)


def test_parallel_query_shares_the_seeded_initialisation_and_unknown_fusions_fail():
    a, b = build_fusion("parallel_query", DIMS, 5, 3, HP, seed=4), build_fusion("cascade", DIMS, 5, 3, HP, seed=4)
    for k in ("proj_f.weight", "pos", "query.weight", "out.2.weight", "proj_x.weight", "proj_p.weight"):
        assert torch.equal(a.state_dict()[k], b.state_dict()[k]), k
    import pytest

    with pytest.raises(ValueError, match="allowed foundation, parallel, parallel_query, cascade"):
        build_fusion("sva", DIMS, 5, 3, HP, seed=4)


def test_the_foundation_initialisation_follows_its_seed_not_the_processs_rng_state():
    from paperworks.encoder_fusion.models import build_foundation
    from paperworks.encoder_fusion.params import FoundationParams

    p = FoundationParams(steps=10)
    first = build_foundation(p, 16, seed=7).state_dict()
    torch.rand(1000)  # RNG drawn in between (as MiniLM loading or an earlier stage part would)
    again = build_foundation(p, 16, seed=7).state_dict()
    other = build_foundation(p, 16, seed=8).state_dict()
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert any(not torch.equal(first[k], other[k]) for k in first if first[k].is_floating_point() and first[k].numel() > 1)
