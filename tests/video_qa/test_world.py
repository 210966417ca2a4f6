"""Questions are read off the script; these tests check every answer against the *rendered* truth."""
import numpy as np
import pytest

from paperworks.core.render.scene import COLOURS, Scene
from paperworks.video_qa.params import WorldParams
from paperworks.video_qa.world import N_OPTIONS, TEMPLATES, VOCAB_INDEX, build_world, frame_targets, make_video

WP = WorldParams(n_train_videos=6, n_dev_videos=2, n_test_videos=2, n_frames=240, n_events=10, questions_per_video=4)


@pytest.fixture(scope="module")
def world():
    videos, questions = build_world(WP, global_seed=7)
    scenes = {v["video"]: Scene(make_video(v["seed"], WP), 32, 32) for v in videos}
    return videos, questions, scenes


def _obj(scene, shape):
    ids = [k for k, o in enumerate(scene.spec.objects) if o.shape == shape]
    assert len(ids) == 1, f"'the {shape}' must name one object"
    return ids[0]


def _colour(scene, t, k):
    o = scene.truth(t).objects[k]
    return o.colour if o.visible and o.pixels > 0 else None


def test_every_answer_matches_the_rendered_truth(world):
    _, questions, scenes = world
    seen_types = set()
    for q in questions:
        scene = scenes[q.video]
        n = scene.spec.n_frames
        k = _obj(scene, q.shape)
        assert q.text == TEMPLATES[q.qtype].format(shape=q.shape)
        assert len(q.options) == N_OPTIONS == len(set(q.options)) and all(o in VOCAB_INDEX for o in q.options)
        assert 0 <= q.answer < N_OPTIONS and 0 <= q.ev_start < q.ev_end <= n
        truth = q.options[q.answer]
        seen_types.add(q.qtype)
        if q.qtype == "local":  # the flash colour, on screen inside the span and not just before it
            during = {_colour(scene, t, k) for t in range(q.ev_start, q.ev_end)}
            assert during == {truth}
            assert _colour(scene, q.ev_start - 1, k) != truth and _colour(scene, q.ev_end, k) != truth
        elif q.qtype == "counting":  # objects on screen during the flash
            counts = {sum(o.visible for o in scene.truth(t).objects) for t in range(q.ev_start, q.ev_end)}
            assert counts == {int(truth)}
        elif q.qtype == "temporal":  # the colour before the (single) change, and a different one after it
            before = [_colour(scene, t, k) for t in range(0, q.ev_start + 3)]
            after = [_colour(scene, t, k) for t in range(q.ev_start + 3, n)]
            assert truth in before and truth not in after
        else:  # global: the colour worn in most visible frames
            colours = [c for c in (_colour(scene, t, k) for t in range(n)) if c is not None]
            top = max(COLOURS, key=colours.count)
            assert top == truth and colours.count(top) >= 1.2 * max(colours.count(c) for c in COLOURS if c != top)
    assert seen_types == {"global", "local", "temporal", "counting"}


def test_splits_are_by_video_and_deterministic(world):
    videos, questions, _ = world
    by_split = {s: {v["video"] for v in videos if v["split"] == s} for s in ("train", "dev", "test")}
    assert sum(map(len, by_split.values())) == len({v["video"] for v in videos}) == 10
    assert len({v["seed"] for v in videos}) == 10
    again_v, again_q = build_world(WP, global_seed=7)
    assert again_v == videos and again_q == questions
    other_v, _ = build_world(WP, global_seed=8)
    assert [v["spec"] for v in other_v] != [v["spec"] for v in videos]


def test_options_hold_the_trap(world):
    """Colour questions offer the shortcut's colour (base colour for a flash, colour after the change)."""
    _, questions, scenes = world
    for q in questions:
        if q.qtype in ("local", "temporal"):
            scene, k = scenes[q.video], _obj(scenes[q.video], q.shape)
            t = q.ev_start - 1 if q.qtype == "local" else q.ev_start + 3
            assert scene.state(k, t)[0].colour in q.options


def test_frame_targets_match_truth(world):
    _, _, scenes = world
    scene = next(iter(scenes.values()))
    ts = np.array([0, 50, 120])
    imgs, pairs, count = frame_targets(scene, ts)
    assert imgs.shape == (3, 32, 32, 3) and imgs.dtype == np.uint8
    for j, t in enumerate(ts):
        shown = scene.truth(int(t)).visible()
        assert count[j] == len(shown) and pairs[j].sum() == len({(o.shape, o.colour) for o in shown})
        np.testing.assert_array_equal(imgs[j], scene.frame(int(t)))
