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

    from paperworks.person_search.data import ItemSpec

    s = ItemSpec(PedestrianSpec("red", "blue", "none", "none", "riding", "bicycle", "park"), "night", "rain")
    edits = single_edits(s)
    assert {a for a, _ in edits} == set(ATTRS)
    assert all(sum(a != b for a, b in zip(s.as_dict().values(), e.as_dict().values())) == 1 for _, e in edits)
    assert not any(e.person.action == "riding" and e.person.object == "car" for _, e in edits)


def test_about_half_of_the_edits_lie_outside_the_cloze_slots():
    from paperworks.person_search.data import edit_shares

    cfg = CorpusConfig(n_train_families=2, family_size=3, n_targets=30, distractor_ratio=34795 / 1978,
                       val_fraction=0.3, drop_scene_prob=0.0, width=16, height=16)
    card = edit_shares(make_corpus(cfg, seed=7)["gallery"])
    by_attr = card["single_edits_by_attribute"]
    assert by_attr["light"] > 0 and by_attr["weather"] > 0 and by_attr["scene"] > 0
    assert 0.4 <= card["share_single_edits_outside_cloze_slots"] <= 0.65
    # a zero weight never edits that attribute
    none = dict(cfg.__dict__, edit_weights={"action": 1.0, "object": 1.0, "upper": 1.0, "lower": 1.0, "headwear": 1.0, "bag": 1.0})
    card0 = edit_shares(make_corpus(CorpusConfig(**none), seed=7)["gallery"])
    assert card0["share_single_edits_outside_cloze_slots"] == 0.0


def test_light_and_weather_are_visible_and_deterministic():
    from paperworks.person_search.data import apply_conditions

    img = np.full((64, 48, 3), 150, dtype=np.uint8)
    night, day = apply_conditions(img, "night", "clear", 3), apply_conditions(img, "day", "clear", 3)
    assert night.mean() < 0.6 * day.mean() and (day == img).all()
    for w in ("rain", "fog", "snow"):
        a = apply_conditions(img, "day", w, 3)
        assert not (a == img).all() and (a == apply_conditions(img, "day", w, 3)).all()
