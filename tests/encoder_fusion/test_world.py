"""The synthetic world: deterministic from the seed, and small lesions really vanish from the coarse view."""
import numpy as np

from paperworks.encoder_fusion.params import WorldParams
from paperworks.encoder_fusion.world import ANSWERS, REGIONS, _draw_lesion, build_world, coarse_view, questions, render_case

P = WorldParams(size=32, n_train=8, n_dev=4, n_test=4)


def test_same_seed_same_bytes_other_seed_differs():
    a_cases, a_img, a_dense = build_world(P, 11)
    b_cases, b_img, b_dense = build_world(P, 11)
    assert a_cases == b_cases and a_img.tobytes() == b_img.tobytes() and a_dense.tobytes() == b_dense.tobytes()
    _, c_img, _ = build_world(P, 12)
    assert a_img.tobytes() != c_img.tobytes()
    assert len(a_cases) == 2 * (8 + 4 + 4) and a_img.shape == (32, 32, 32, 3) and a_img.dtype == np.uint8


def test_small_lesion_invisible_in_coarse_view_large_visible():
    rng = np.random.default_rng(0)
    for type_index in (0, 1):
        flat = np.full((64, 64), 120.0)
        img = flat.copy()
        _draw_lesion(img, rng, 3, type_index, "small", 40.0)
        assert np.abs(img - flat).max() == 40  # drawn at full resolution …
        to_u8 = lambda x: np.repeat(x[..., None], 3, -1).astype(np.uint8)[None]
        assert np.array_equal(coarse_view(to_u8(img)), coarse_view(to_u8(flat)))  # … gone at 2× coarse
    img = np.full((64, 64), 120.0)
    _draw_lesion(img, rng, 0, 0, "large", 40.0)
    assert not np.array_equal(coarse_view(np.repeat(img[..., None], 3, -1).astype(np.uint8)[None]),
                              coarse_view(np.full((1, 64, 64, 3), 120, np.uint8)))


def test_findings_dense_labels_and_answers_agree():
    for i in range(30):
        _, findings, roi, dense = render_case(100 + i, "xray", WorldParams(size=64, n_train=8, n_dev=4, n_test=4))
        assert roi in REGIONS["xray"]
        # a lesion marks cells of its own quadrant only (4 × 4 grid: quadrant = 2 × 2 cells)
        for r, name in enumerate(REGIONS["xray"]):
            ry, rx = divmod(r, 2)
            marked = dense[2 * ry:2 * ry + 2, 2 * rx:2 * rx + 2].any()
            assert marked == any(f.region == name for f in findings)
        from paperworks.encoder_fusion.world import Case
        qs = questions(Case("c", "xray", "test", findings, roi))
        assert len(qs) == 12
        for q in qs:
            f = {f.region: f for f in findings}.get(q["region"])
            if q["qtype"] == "presence":
                assert ANSWERS[q["answer"]] == ("yes" if f else "no")
            if q["qtype"] == "size":
                assert ANSWERS[q["answer"]] == (f.size if f else "none")
