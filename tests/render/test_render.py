import numpy as np
import pytest

from paperworks.core.render import (
    ACTIONS, OBJECTS, SCENES, Painter, PedestrianSpec, contact_sheet, is_consistent, render_pedestrian,
)


def spec(**kw):
    base = dict(upper="red", lower="blue", headwear="helmet", bag="backpack", action="walking", object="dog", scene="park")
    return PedestrianSpec(**{**base, **kw})


@pytest.mark.parametrize("domain", ["sim", "real"])
def test_same_seed_same_bytes(domain):
    a = render_pedestrian(spec(), seed=7, domain=domain)
    b = render_pedestrian(spec(), seed=7, domain=domain)
    assert a.dtype == np.uint8 and a.shape == (64, 48, 3)
    assert a.tobytes() == b.tobytes()


def test_seed_and_domain_change_the_image():
    sim = render_pedestrian(spec(), seed=7, domain="sim")
    assert sim.tobytes() != render_pedestrian(spec(), seed=8, domain="sim").tobytes()
    assert sim.tobytes() != render_pedestrian(spec(), seed=7, domain="real").tobytes()


def test_attributes_change_pixels():
    a = render_pedestrian(spec(action="standing", object="none"), seed=1)
    b = render_pedestrian(spec(action="lying", object="none"), seed=1)
    c = render_pedestrian(spec(action="standing", object="none", upper="green"), seed=1)
    assert np.abs(a.astype(int) - b).sum() > 0 and np.abs(a.astype(int) - c).sum() > 0


def test_every_valid_combination_renders():
    for action in ACTIONS:
        for obj in OBJECTS:
            if is_consistent(action, obj):
                img = render_pedestrian(spec(action=action, object=obj, scene=SCENES[len(obj) % len(SCENES)]), 3, "real", 32, 64)
                assert img.shape == (64, 32, 3)


def test_invalid_specs_fail():
    with pytest.raises(ValueError, match="incompatible"):
        spec(action="riding", object="dog")
    with pytest.raises(ValueError, match="upper"):
        spec(upper="teal")
    with pytest.raises(ValueError, match="domain"):
        render_pedestrian(spec(), 1, domain="cartoon")


def test_painter_and_sheet():
    p = Painter(10, 8)
    p.rect(0, 0, 5, 8, (255, 0, 0))
    arr = p.to_array()
    assert arr.shape == (8, 10, 3) and arr[4, 1, 0] == 255 and arr[4, 8, 0] == 0
    img = contact_sheet([[arr, arr]], ["caption"], scale=2)
    assert img.size[0] > 40 and img.mode == "RGB"
