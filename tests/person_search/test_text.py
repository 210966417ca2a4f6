import numpy as np
import pytest

from paperworks.core.render import PedestrianSpec
from paperworks.person_search.text import VIEWS, caption, parse_query


def test_parse_all_facets():
    q = parse_query("A person is riding an all-terrain vehicle across a muddy field. "
                    "The person is wearing a helmet, a gray shirt and brown pants.")
    assert q.missing_facets == []
    assert q.views["action"] == "riding an all-terrain vehicle"
    assert q.views["object"] == "all-terrain vehicle"
    assert q.views["scene"] == "across a muddy field"
    assert "gray shirt" in q.views["appearance"] and "helmet" in q.views["appearance"]
    assert q.slots == {"action": "riding", "object": "atv", "scene": "muddy_field", "upper": "gray",
                       "lower": "brown", "headwear": "helmet"}
    assert q.views["structured"].startswith("appearance: ")


def test_unparseable_facets_fall_back_to_anchor_views():
    q = parse_query("Somebody I saw yesterday, hard to describe.")
    assert q.missing_facets == ["appearance", "action", "object", "scene"]
    assert q.views["full"] and q.views["structured"]  # anchors always exist


@pytest.mark.parametrize("bad", ["", "   ", "1234 !!", None, 42, ["a person"]])
def test_empty_or_non_text_query_fails(bad):
    with pytest.raises(ValueError, match="query"):
        parse_query(bad)


def test_captions_parse_back_to_their_attributes():
    rng = np.random.default_rng(0)
    s = PedestrianSpec("orange", "black", "cap", "backpack", "being_hit", "car", "street")
    for _ in range(20):
        q = parse_query(caption(s, rng))
        assert q.slots["action"] == "being_hit" and q.slots["object"] == "car"
        assert q.slots["upper"] == "orange" and q.slots["lower"] == "black" and q.slots["headwear"] == "cap"
        assert set(q.views) == set(VIEWS)


def test_light_and_weather_parse_into_the_scene_facet():
    rng = np.random.default_rng(1)
    s = PedestrianSpec("red", "blue", "none", "none", "walking", "dog", "park")
    for light in ("day", "dusk", "night"):
        for weather in ("clear", "rain", "fog", "snow"):
            q = parse_query(caption(s, rng, 0.0, light, weather))
            assert q.slots["light"] == light and q.slots["weather"] == weather and q.slots["scene"] == "park"
            assert q.slots["action"] == "walking" and q.slots["object"] == "dog"
            assert q.views["scene"].count(",") == 2  # where, light, weather
