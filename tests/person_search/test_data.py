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


def test_blind_twins_are_planted_as_declared_and_invisible_to_every_expert():
    """``blind_twin_share`` of the targets get a distractor differing only in the landmark, which only
    the full caption mentions: the experts' inputs (cloze slots, facet views) are the same for both."""
    from paperworks.core.render import PedestrianSpec

    from paperworks.person_search.data import BLIND_ATTRS, attribute_keys, blind_twin_targets, edit_shares
    from paperworks.person_search.text import caption, parse_query

    cfg = CorpusConfig(n_train_families=20, family_size=4, n_targets=40, distractor_ratio=5.0, val_fraction=0.3,
                       drop_scene_prob=0.0, width=16, height=16, blind_twin_share=0.25)
    c = make_corpus(cfg, seed=11)
    g = c["gallery"]
    twins = blind_twin_targets(g)
    assert len(twins) == 10 and edit_shares(g)["share_queries_with_blind_twin"] == 0.25
    assert edit_shares(g)["single_edits_by_attribute"]["landmark"] == 10  # the edit weights never edit it
    train = c["train"].assign(is_target=False)
    seen = [a for a in ATTRS if a not in BLIND_ATTRS]
    twin_fams = {f for f, grp in train.groupby("family")
                 if (grp[seen].iloc[1:] == grp[seen].iloc[0]).all(axis=1).any()}  # the base is each family's first item
    assert len(twin_fams) == 5
    # the structured view never mentions the landmark: twins share its key, not the full caption's
    keys = attribute_keys(g)
    t = g[g["is_target"] & g["family"].isin(twins)].iloc[0]
    grp = g[(g["family"] == t["family"]) & ~g["is_target"]]
    twin = grp[(grp[seen] == t[seen]).all(axis=1)].index[0]
    assert keys["structured"][twin] == keys["structured"][t.name] and keys["full"][twin] != keys["full"][t.name]
    # captions: the landmark sentence reaches no slot and no facet view; only the full caption differs
    person = PedestrianSpec("red", "blue", "cap", "none", "walking", "dog", "park")
    a, b = (parse_query(caption(person, np.random.default_rng(5), 0.0, "dusk", "rain", lm)) for lm in ("lamp_post", "tree"))
    assert a.slots == b.slots and {v: a.views[v] for v in a.views if v != "full"} == {v: b.views[v] for v in b.views if v != "full"}
    assert a.views["full"] != b.views["full"]
    # the landmark is visible (stage 1 can see it): three different strips at the picture's edge
    from paperworks.person_search.data import LANDMARKS, paint_landmark

    img = np.full((64, 48, 3), 128, dtype=np.uint8)
    painted = [paint_landmark(img, lm, 3) for lm in LANDMARKS]
    for i in range(3):
        changed = (painted[i] != img).any(-1)
        assert changed.any() and changed[:, 8:40].sum() == 0  # only the edge strip, not the pedestrian
        assert all(not np.array_equal(painted[i], painted[j]) for j in range(i))
    none = make_corpus(CorpusConfig(**dict(cfg.__dict__, blind_twin_share=0.0)), seed=11)
    assert not blind_twin_targets(none["gallery"])
    # the training share is its own knob: every family gets a twin, the gallery keeps its share
    from paperworks.person_search.data import train_twin_share

    assert train_twin_share(c["train"]) == 0.25
    every = make_corpus(CorpusConfig(**dict(cfg.__dict__, train_blind_twin_share=1.0)), seed=11)
    assert train_twin_share(every["train"]) == 1.0 and len(blind_twin_targets(every["gallery"])) == 10


def test_coarse_targets_have_only_distractors_outside_the_cloze_slots():
    """``coarse_target_share`` of the targets (none with a blind twin) get distractors that agree with them
    in every cloze slot and differ in scene/light/weather only; the other targets keep the weighted edits."""
    from paperworks.person_search.data import (
        CLOZE_SLOTS, EDIT_WEIGHTS, blind_twin_targets, coarse_targets, edit_shares,
    )
    from paperworks.person_search.text import CLOZE_SLOTS as SLOTS

    assert CLOZE_SLOTS == SLOTS
    cfg = CorpusConfig(n_train_families=2, family_size=3, n_targets=40, distractor_ratio=34795 / 1978,
                       val_fraction=0.3, drop_scene_prob=0.0, width=16, height=16, edit_weights=EDIT_WEIGHTS,
                       blind_twin_share=0.5, coarse_target_share=0.3)
    g = make_corpus(cfg, seed=5)["gallery"]
    coarse, twins = coarse_targets(g), blind_twin_targets(g)
    assert len(coarse) == 12 and not coarse & twins and len(twins) == 20
    tuples = g[list(ATTRS)].astype(str).agg("|".join, axis=1)
    assert tuples.is_unique and (~g["is_target"]).sum() == round(40 * 34795 / 1978)
    for fam, grp in g.groupby("family"):
        tgt = grp[grp["is_target"]].iloc[0]
        d = grp[~grp["is_target"]]
        if fam in coarse:
            assert (d[list(CLOZE_SLOTS)] == tgt[list(CLOZE_SLOTS)]).all().all()
            assert (d["landmark"] == tgt["landmark"]).all()  # no twin: the landmark is left to the blind twins
            changed = (d[["scene", "light", "weather"]] != tgt[["scene", "light", "weather"]]).sum(axis=1)
            assert changed.between(1, 2).all() and (changed == 1).sum() == min(9, len(d))
        else:  # every non-coarse target has at least one distractor that changes a cloze slot
            assert not (d[list(CLOZE_SLOTS)] == tgt[list(CLOZE_SLOTS)]).all(1).all()
    card = edit_shares(g)
    assert card["share_queries_coarse"] == 0.3
    assert card["share_distractors_outside_cloze_slots"] >= 0.5 > card["share_single_edits_outside_cloze_slots"] - 0.1
    # share 0: no coarse target, and the gallery is the one drawn before the option existed
    g0 = make_corpus(CorpusConfig(**dict(cfg.__dict__, coarse_target_share=0.0)), seed=5)["gallery"]
    assert not coarse_targets(g0)
    with pytest.raises(ValueError, match="exceed 1"):
        make_corpus(CorpusConfig(**dict(cfg.__dict__, coarse_target_share=0.6)), seed=5)
