import numpy as np
import pytest

from paperworks.person_search.data import ATTRS, CorpusConfig, make_corpus, single_edits

CFG = CorpusConfig(n_train_families=6, family_size=5, n_targets=10, distractor_ratio=34795 / 1978,
                   val_fraction=0.3, drop_scene_prob=0.2, width=32, height=48)


@pytest.fixture(scope="module")
def corpus():
    return make_corpus(CFG, seed=123)


def test_same_seed_byte_identical(corpus):
    again = make_corpus(CFG, seed=123)
    for key in ("train_images", "gallery_images"):
        assert corpus[key].tobytes() == again[key].tobytes()
    for key in ("train", "gallery", "queries"):
        assert corpus[key].equals(again[key])
    other = make_corpus(CFG, seed=124)
    assert other["gallery_images"].tobytes() != corpus["gallery_images"].tobytes()


def test_pab_proportion_and_unique_targets(corpus):
    g = corpus["gallery"]
    n_t, n_d = int(g["is_target"].sum()), int((~g["is_target"]).sum())
    assert n_t == 10 and n_d == round(10 * 34795 / 1978)
    tuples = g[list(ATTRS)].astype(str).agg("|".join, axis=1)
    assert tuples.is_unique  # so every query has exactly one relevant image
    q = corpus["queries"]
    assert g.loc[q["target_item"], "is_target"].all()
    assert set(q["split"]) == {"val", "test"} and (q["split"] == "val").sum() == 3


def test_distractors_are_single_edits_of_their_target(corpus):
    g = corpus["gallery"]
    n_single = 0
    for fam, grp in g.groupby("family"):
        tgt = grp[grp["is_target"]].iloc[0]
        for _, d in grp[~grp["is_target"]].iterrows():
            diff = sum(tgt[a] != d[a] for a in ATTRS)
            n_single += diff == 1
            assert d["scene"] == tgt["scene"] or diff == 1  # shares the scene unless the scene is the single edit
    assert n_single >= 0.9 * (~g["is_target"]).sum()


def test_images_shapes_and_domains(corpus):
    assert corpus["train_images"].shape == (30, 48, 32, 3) and corpus["train_images"].dtype == np.uint8
    assert corpus["gallery_images"].shape[0] == len(corpus["gallery"])


def test_single_edits_are_consistent():
    from paperworks.core.render import PedestrianSpec

    s = PedestrianSpec("red", "blue", "none", "none", "riding", "bicycle", "park")
    edits = single_edits(s)
    assert all(sum(a != b for a, b in zip(s.as_dict().values(), e.as_dict().values())) == 1 for _, e in edits)
    assert not any(e.action == "riding" and e.object == "car" for _, e in edits)
