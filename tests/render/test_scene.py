"""Scene renderer: determinism, pixels vs ground truth, event timing, validation, prompts."""
import numpy as np
import pytest

from paperworks.core.render.canvas import PALETTE
from paperworks.core.render.scene import (
    FLOORS, Door, Event, Layout, PromptItem, Relation, Scene, SceneObject, ScenePrompt, SceneSpec, ScriptConfig,
    random_scene, realise, relation_holds,
)

TWO_ROOMS = Layout(cols=2, floors=("sand", "sky"), doors=(Door(rooms=(0, 1), at=0.5, width=0.3),))


def scripted() -> SceneSpec:
    """One object per event kind, on a 2-room layout, 60 frames."""
    objects = (
        SceneObject(shape="circle", colour="red", x=0.25, y=0.25),                  # 0: moves, then crosses
        SceneObject(shape="square", colour="blue", x=0.25, y=0.75, visible=False),  # 1: enters, then leaves
        SceneObject(shape="triangle", colour="green", size="large", x=0.75, y=0.3),  # 2: flashes, changes colour
    )
    events = (
        Event(kind="move", obj=0, start=5, end=10, to=(0.3, 0.6)),
        Event(kind="cross_door", obj=0, start=20, end=30, door=0, to=(0.75, 0.75)),
        Event(kind="enter", obj=1, start=10, end=14),
        Event(kind="leave", obj=1, start=40, end=44),
        Event(kind="flash", obj=2, start=30, end=33, colour="yellow"),
        Event(kind="change_colour", obj=2, start=50, end=52, colour="purple"),
    )
    return SceneSpec(layout=TWO_ROOMS, objects=objects, events=events, n_frames=60)


def test_same_seed_same_bytes_and_spec():
    a, b = random_scene(3, ScriptConfig(n_frames=300, n_events=8)), random_scene(3, ScriptConfig(n_frames=300, n_events=8))
    assert a.model_dump_json() == b.model_dump_json()
    sa, sb = Scene(a), Scene(b)
    ts = [0, 17, 150, 299]
    assert sa.frames(ts).tobytes() == sb.frames(ts).tobytes()
    assert sa.frame(17, domain="real").tobytes() == sb.frame(17, domain="real").tobytes()
    other = random_scene(4, ScriptConfig(n_frames=300, n_events=8))
    assert Scene(other).frames(ts).tobytes() != sa.frames(ts).tobytes()


def test_frames_match_single_renders_and_json_round_trip():
    spec = random_scene(5, ScriptConfig(n_frames=200, n_events=6, style="textured"))
    again = SceneSpec.model_validate_json(spec.model_dump_json())
    s1, s2 = Scene(spec), Scene(again)
    stack = s1.frames([3, 99, 199])
    assert stack.shape == (3, 64, 64, 3) and stack.dtype == np.uint8
    for j, t in enumerate([3, 99, 199]):
        assert stack[j].tobytes() == s2.frame(t).tobytes() == s1.render(t)[0].tobytes()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pixels_agree_with_truth_flat(seed):
    spec = random_scene(seed, ScriptConfig(n_frames=400, n_events=12, cols=2, rows=2))
    scene = Scene(spec)
    palette = {tuple(v) for v in PALETTE.values()}
    for t in range(0, 400, 7):
        img, labels, truth = scene.render(t)
        assert truth.t == t and labels.shape == (64, 64)
        for o in truth.objects:
            mine = labels == o.id
            assert o.pixels == int(mine.sum())
            if not o.visible:
                assert o.pixels == 0 and o.box is None
                continue
            x0, y0, x1, y1 = o.box
            # every pixel labelled with the object lies in its box and has exactly its colour
            ys, xs = np.nonzero(mine)
            assert ys.size == 0 or (ys.min() >= y0 and ys.max() < y1 and xs.min() >= x0 and xs.max() < x1)
            assert (img[mine] == PALETTE[o.colour]).all()
            assert o.room == spec.layout.room_at(o.x, o.y)
        # background pixels never take an object colour (floors and walls are outside the palette)
        bg = img[labels == -1]
        assert not any((bg == c).all(axis=1).any() for c in palette)


def test_unoccluded_box_is_tight_and_centre_has_colour():
    spec = scripted()
    scene = Scene(spec)
    img, labels, truth = scene.render(0)
    for o in truth.visible():
        ys, xs = np.nonzero(labels == o.id)
        assert o.box == (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1)
        cx, cy = int(o.x * 64), int(o.y * 64)
        assert tuple(img[cy, cx]) == PALETTE[o.colour]


def test_event_timing():
    spec = scripted()
    scene = Scene(spec)
    tr = scene.truth
    # enter [10, 14): hidden before, visible from the start frame
    assert not tr(9).objects[1].visible and tr(10).objects[1].visible
    # leave [40, 44): visible through the last active frame, gone at the end
    assert tr(43).objects[1].visible and not tr(44).objects[1].visible and tr(44).objects[1].pixels == 0
    # flash [30, 33): flash colour while active, own colour before and after
    assert [tr(t).objects[2].colour for t in (29, 30, 32, 33)] == ["green", "yellow", "yellow", "green"]
    # change_colour [50, 52): for good from the start frame
    assert [tr(t).objects[2].colour for t in (49, 50, 59)] == ["green", "purple", "purple"]
    # move [5, 10): still before, on its way while active, arrived at the last active frame
    assert (tr(4).objects[0].x, tr(4).objects[0].y) == (0.25, 0.25)
    assert 0.25 < tr(7).objects[0].y < 0.6
    assert tr(9).objects[0].x == pytest.approx(0.3) and tr(9).objects[0].y == pytest.approx(0.6)
    # cross_door [20, 30): room 0 → door centre at the midpoint → room 1
    assert tr(19).objects[0].room == 0 and tr(29).objects[0].room == 1
    mid = tr(24).objects[0]
    assert (mid.x, mid.y) == pytest.approx(spec.layout.door_centre(spec.layout.doors[0]))
    # which events are active
    assert tr(0).active_events == () and tr(31).active_events == (4,)
    assert tr(10).active_events == (2,) and tr(25).active_events == (1,)
    assert [scene.active_events(t) for t in (9, 13, 14)] == [(0,), (2,), ()]


def test_events_show_in_pixels():
    """Each scripted change is visible in the image, not only in the truth."""
    scene = Scene(scripted())
    assert (scene.frame(31)[scene.labels(31) == 2] == PALETTE["yellow"]).all()
    assert not (scene.labels(9) == 1).any() and (scene.labels(10) == 1).any()
    assert scene.frame(0).tobytes() != scene.frame(7).tobytes()  # the move changes pixels


def test_random_script_respects_its_config():
    cfg = ScriptConfig(n_frames=600, n_events=10, event_frames=(4, 8), cols=2, rows=1)
    for seed in range(5):
        spec = random_scene(seed, cfg)
        assert len(spec.events) == cfg.n_events
        spans = sorted((e.start, e.end) for e in spec.events)
        assert all(4 <= b - a <= 8 for a, b in spans)
        assert all(b0 <= a1 for (_, b0), (a1, _) in zip(spans, spans[1:]))  # exclusive: no overlap
        assert spans[0][0] >= 1 and spans[-1][1] <= cfg.n_frames
        assert len(spec.layout.floors) == 2 and set(spec.layout.floors) <= set(FLOORS)


@pytest.mark.parametrize("bad, match", [
    (dict(events=(Event(kind="flash", obj=1, start=1, end=3, colour="red"),)), "not visible"),
    (dict(events=(Event(kind="enter", obj=0, start=1, end=3),)), "already visible"),
    (dict(events=(Event(kind="move", obj=0, start=1, end=5, to=(0.3, 0.3)),
                  Event(kind="flash", obj=0, start=4, end=6, colour="red"))), "overlaps"),
    (dict(events=(Event(kind="move", obj=0, start=1, end=5, to=(0.8, 0.3)),)), "another room"),
    (dict(events=(Event(kind="cross_door", obj=0, start=1, end=5, door=0, to=(0.3, 0.3)),)), "door 0"),
    (dict(events=(Event(kind="flash", obj=5, start=1, end=3, colour="red"),)), "only 2 objects"),
    (dict(events=(Event(kind="flash", obj=0, start=1, end=30, colour="red"),)), "ends after"),
])
def test_invalid_scripts_fail_naming_the_event(bad, match):
    objects = (SceneObject(shape="circle", colour="red", x=0.25, y=0.25),
               SceneObject(shape="cross", colour="blue", x=0.7, y=0.7, visible=False))
    with pytest.raises(ValueError, match=match):
        SceneSpec(**{"layout": TWO_ROOMS, "objects": objects, "n_frames": 20, **bad})


def test_invalid_fields_fail():
    with pytest.raises(ValueError, match="colour"):
        SceneObject(shape="circle", colour="teal", x=0.5, y=0.5)
    with pytest.raises(ValueError, match="needs 'to'"):
        Event(kind="move", obj=0, start=0, end=2)
    with pytest.raises(ValueError, match="takes no 'colour'"):
        Event(kind="leave", obj=0, start=0, end=2, colour="red")
    with pytest.raises(ValueError, match="adjacent"):
        Layout(cols=2, rows=2, floors=("sand",) * 4, doors=(Door(rooms=(0, 3)),))
    with pytest.raises(ValueError, match="kinds"):
        ScriptConfig(kinds=("explode",))


def test_prompt_text_and_realisation():
    prompt = ScenePrompt(
        items=(PromptItem(shape="circle", colour="red", count=2), PromptItem(shape="square", colour="blue", size="small"),
               PromptItem(shape="cross", colour="yellow", count=3)),
        relations=(Relation(subject=1, relation="left of", object=0), Relation(subject=2, relation="below", object=1)),
    )
    assert prompt.text() == ("two red circles, a small blue square and three yellow crosses; "
                             "the small blue square is left of the red circle; the yellow cross is below the small blue square "
                             "(flat style, sand floor)")
    for seed in range(4):
        spec = realise(prompt, seed)
        truth = Scene(spec).truth(0)
        counts = {}
        for o in truth.visible():
            counts[(o.shape, o.colour)] = counts.get((o.shape, o.colour), 0) + 1
        assert counts == {("circle", "red"): 2, ("square", "blue"): 1, ("cross", "yellow"): 3}
        assert all(o.pixels > 0 for o in truth.objects)  # nothing hidden under another shape
        first = {}
        for o in truth.objects:
            first.setdefault((o.shape, o.colour), o)
        assert relation_holds(first[("square", "blue")], first[("circle", "red")], "left of")
        assert relation_holds(first[("cross", "yellow")], first[("square", "blue")], "below")
    contradiction = ScenePrompt(items=prompt.items[:2], relations=(Relation(subject=0, relation="left of", object=1),
                                                                  Relation(subject=0, relation="right of", object=1)))
    with pytest.raises(ValueError, match="could not place"):
        realise(contradiction, 0, max_tries=20)


def test_textured_style_keeps_colours_recognisable():
    prompt = ScenePrompt(items=(PromptItem(shape="square", colour="orange", size="large"),), style="textured")
    spec = realise(prompt, 1)
    img, labels, truth = Scene(spec).render(0)
    flat = Scene(spec.model_copy(update={"style": "flat"})).frame(0)
    assert img.tobytes() != flat.tobytes()
    mean = img[labels == 0].astype(float).mean(axis=0)
    nearest = min(PALETTE, key=lambda c: np.sum((np.asarray(PALETTE[c]) - mean) ** 2))
    assert nearest == "orange" and truth.objects[0].colour == "orange"


def test_bad_render_requests_fail_clearly():
    scene = Scene(scripted())
    with pytest.raises(IndexError, match="frame 60 outside 0..59"):
        scene.frame(60)
    with pytest.raises(ValueError, match="domain"):
        scene.frame(0, domain="cartoon")
    with pytest.raises(ValueError, match="too small"):
        Scene(scripted(), height=4, width=4)
    with pytest.raises(ValueError, match="too small for a shape"):
        random_scene(0, ScriptConfig(cols=4, rows=4, n_frames=200, n_events=4))


def test_any_resolution_keeps_the_layout():
    """A spec is resolution-free: at 128 × 128 the same objects sit at the same relative places."""
    spec = scripted()
    small, big = Scene(spec).truth(31), Scene(spec, 128, 128).truth(31)
    for a, b in zip(small.objects, big.objects):
        assert (a.visible, a.room, a.colour) == (b.visible, b.room, b.colour)
        if a.box is not None:
            assert np.allclose(np.asarray(b.box) / 2, a.box, atol=1.0)
            assert b.pixels == pytest.approx(4 * a.pixels, rel=0.15)


def test_event_records_agree_with_the_rendered_truth():
    spec = random_scene(11, ScriptConfig(n_frames=500, n_events=14, cols=2, rows=2))
    scene = Scene(spec)
    rows = scene.event_records()
    assert [r["event"] for r in rows] == sorted(range(len(spec.events)), key=lambda i: spec.events[i].start)
    assert {r["kind"] for r in rows} >= {"move", "change_colour", "flash"}
    for r in rows:
        during = scene.truth(r["start"]).objects[r["obj"]]
        assert during.colour == r["colour_during"] and r["event"] in scene.truth(r["start"]).active_events
        if r["start"] > 0:
            before = scene.truth(r["start"] - 1).objects[r["obj"]]
            assert (before.colour, before.room, before.visible) == (r["colour_before"], r["room_before"], r["visible_before"])
        if r["end"] < spec.n_frames:
            after = scene.truth(r["end"]).objects[r["obj"]]
            assert (after.colour, after.room, after.visible) == (r["colour_after"], r["room_after"], r["visible_after"])
        if r["kind"] == "flash":
            assert r["colour_during"] != r["colour_before"] == r["colour_after"]
        if r["kind"] == "cross_door":
            assert r["room_before"] != r["room_after"] and r["door"] >= 0
        if r["kind"] in ("enter", "leave"):
            assert r["visible_before"] == (r["kind"] == "leave") != r["visible_after"]
        assert r["start_s"] == r["start"] / spec.fps
