"""Captions from attributes (with paraphrase variety) and the facet parser for query text.

The caption generator writes a paragraph about one :class:`PedestrianSpec`; the parser
reads *only the text* back into the six textual views of a query (full caption,
structured concatenation, appearance, action, object, scene) plus the canonical key
words (the slots the cloze expert masks). A facet the text does not mention is missing;
the two anchor views (full, structured) always exist.

Besides the renderer's seven attributes, an item has two *conditions* (light, weather; see
``data.CONDITIONS``), written in their own sentence and parsed into the scene facet. No cloze
slot covers them (``CLOZE_SLOTS``): the cloze expert's closed vocabulary cannot see them.

The *landmark* (``data.BLIND_ATTRS``: a lamp post, traffic sign or small tree at the picture's
edge) gets a sentence of its own that no lexicon below reads: it stays in the full caption only,
outside every facet, every cloze slot and every verifier checker.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from paperworks.core.render import PedestrianSpec

VIEWS = ("full", "structured", "appearance", "action", "object", "scene")
ANCHOR_VIEWS = ("full", "structured")
FACETS = ("appearance", "action", "object", "scene")
# The key words the cloze expert masks (its closed vocabulary: one slot per attribute below).
CLOZE_SLOTS = ("action", "object", "upper", "lower", "headwear", "bag")

TOPS = ("shirt", "jacket", "top", "sweater", "t-shirt")
BOTTOMS = ("pants", "trousers", "jeans", "shorts")
COLOUR_WORDS = {"red": "red", "blue": "blue", "green": "green", "yellow": "yellow", "black": "black",
                "white": "white", "gray": "gray", "grey": "gray", "orange": "orange", "purple": "purple",
                "brown": "brown"}

# Paraphrases: canonical value → phrases. Riding and being hit name their object inside the phrase.
ACTION_PHRASES = {
    "standing": ["standing still", "standing", "waiting in place"],
    "walking": ["walking", "strolling", "walking slowly"],
    "running": ["running", "jogging", "sprinting"],
    "falling": ["falling over", "tumbling to the ground", "losing balance and falling"],
    "lying": ["lying on the ground", "lying flat", "collapsed on the ground"],
    "riding:bicycle": ["riding a bicycle", "cycling on a bike"],
    "riding:atv": ["riding an all-terrain vehicle", "driving a quad bike"],
    "being_hit": ["being hit by a car", "struck by a car"],
}
OBJECT_PHRASES = {
    "bicycle": ["next to a bicycle", "beside a bike"],
    "atv": ["next to an all-terrain vehicle", "beside a quad bike"],
    "car": ["next to a parked car", "beside a car"],
    "umbrella": ["holding an umbrella", "carrying an umbrella"],
    "dog": ["with a dog", "accompanied by a dog"],
}
SCENE_PHRASES = {
    "street": ["on a city street", "on a road in town"],
    "park": ["in a park", "on the grass of a park"],
    "wooded_trail": ["on a trail in a wooded area", "along a forest path"],
    "muddy_field": ["on muddy ground", "across a muddy field"],
    "beach": ["on a sandy beach", "by the sea on a beach"],
}
LIGHT_PHRASES = {"day": ["in daylight", "during the day"], "dusk": ["at dusk", "in the evening glow"],
                 "night": ["at night", "after dark"]}
WEATHER_PHRASES = {"clear": ["under a clear sky", "in clear weather"], "rain": ["in the rain", "in pouring rain"],
                   "fog": ["in thick fog", "in foggy weather"], "snow": ["in the snow", "while snow is falling"]}
LANDMARK_PHRASES = {"lamp_post": ["A lamp post stands at the edge of the picture.", "A lamp post is at the side of the frame."],
                    "traffic_sign": ["A traffic sign is at the edge of the picture.", "A round traffic sign is at the side of the frame."],
                    "tree": ["A small tree grows at the edge of the picture.", "A young tree is at the side of the frame."]}
HEADWEAR_PHRASES = {"helmet": ["a helmet", "a safety helmet"], "cap": ["a cap", "a baseball cap"]}
BAG_PHRASES = {"backpack": ["a backpack", "a rucksack"]}

# Parser lexicons (canonical value ← surface words). Longest patterns first.
ACTION_LEXICON = [(p, k.split(":")[0]) for k, ps in ACTION_PHRASES.items() for p in ps]
OBJECT_LEXICON = [("all-terrain vehicle", "atv"), ("quad bike", "atv"), ("bicycle", "bicycle"), ("bike", "bicycle"),
                  ("car", "car"), ("umbrella", "umbrella"), ("dog", "dog")]
SCENE_LEXICON = [(p, k) for k, ps in SCENE_PHRASES.items() for p in ps]
LIGHT_LEXICON = [(p, k) for k, ps in LIGHT_PHRASES.items() for p in ps]
WEATHER_LEXICON = [(p, k) for k, ps in WEATHER_PHRASES.items() for p in ps]
HEADWEAR_LEXICON = [("helmet", "helmet"), ("cap", "cap")]
BAG_LEXICON = [("backpack", "backpack"), ("rucksack", "backpack")]


def _pick(rng: np.random.Generator, options: list[str] | tuple[str, ...]) -> str:
    return options[int(rng.integers(len(options)))]


def caption(spec: PedestrianSpec, rng: np.random.Generator, drop_scene_prob: float = 0.0,
            light: str | None = None, weather: str | None = None, landmark: str | None = None) -> str:
    """A paragraph describing ``spec`` (and its light, weather and landmark when given); wording,
    sentence order and garments vary with ``rng``."""
    subject = _pick(rng, ["A person", "A pedestrian", "Someone", "An individual"])
    key = f"riding:{spec.object}" if spec.action == "riding" else spec.action
    action = _pick(rng, ACTION_PHRASES[key])
    obj = ""
    if spec.object != "none" and spec.action not in ("riding", "being_hit"):
        obj = " " + _pick(rng, OBJECT_PHRASES[spec.object])
    scene = _pick(rng, SCENE_PHRASES[spec.scene])
    top, bottom = _pick(rng, TOPS), _pick(rng, BOTTOMS)
    upper = "grey" if spec.upper == "gray" and rng.random() < 0.5 else spec.upper
    extras = []
    if spec.headwear != "none":
        extras.append(_pick(rng, HEADWEAR_PHRASES[spec.headwear]))
    clothes = f"a {upper} {top} and {spec.lower} {bottom}"
    if extras:
        clothes = f"{extras[0]}, " + clothes
    wear = _pick(rng, [f"The person is wearing {clothes}.", f"They have on {clothes}.", f"Dressed in {clothes}, they stand out."])
    bag = ""
    if spec.bag != "none":
        bag = _pick(rng, [f" They carry {_pick(rng, BAG_PHRASES['backpack'])} on the back.",
                          f" {_pick(rng, BAG_PHRASES['backpack']).capitalize()} hangs from the shoulders."])
    drop_scene = rng.random() < drop_scene_prob
    if drop_scene:
        first = f"{subject} is {action}{obj}."
    elif rng.random() < 0.5:
        first = f"{subject} is {action}{obj} {scene}."
    else:
        first = f"{subject} is {action}{obj}. The scene is {scene}."
    sentences = [first, wear + bag]
    if rng.random() < 0.3:
        sentences.reverse()
    if light is not None and weather is not None:
        when = f"{_pick(rng, LIGHT_PHRASES[light])} {_pick(rng, WEATHER_PHRASES[weather])}"
        sentences.append(_pick(rng, [f"The picture was taken {when}.", f"It was {when}."]))
    if landmark is not None:
        sentences.insert(int(rng.integers(1, len(sentences) + 1)), _pick(rng, LANDMARK_PHRASES[landmark]))
    return " ".join(sentences)


@dataclass
class ParsedQuery:
    """The six textual views (``None`` = facet missing) and the canonical key words found."""

    text: str
    views: dict[str, str | None]
    slots: dict[str, str] = field(default_factory=dict)  # action, object, upper, lower, headwear, bag, scene, light, weather

    @property
    def missing_facets(self) -> list[str]:
        return [f for f in FACETS if self.views[f] is None]


def _find_all(text: str, lexicon: list[tuple[str, str]]) -> list[tuple[int, str, str]]:
    """(position, surface, canonical) of every lexicon phrase, longest match wins at a position."""
    found: list[tuple[int, int, str, str]] = []
    for surface, canon in sorted(lexicon, key=lambda x: -len(x[0])):
        for m in re.finditer(r"\b" + re.escape(surface) + r"\b", text):
            if any(s <= m.start() < e for s, e, _, _ in found):
                continue
            found.append((m.start(), m.end(), surface, canon))
    return [(s, surf, c) for s, _, surf, c in sorted(found)]


def parse_query(text: object) -> ParsedQuery:
    """Split a query into its six views; raises ``ValueError`` on empty or non-text input."""
    if not isinstance(text, str):
        raise ValueError(f"query must be text, got {type(text).__name__}")
    clean = " ".join(text.split())
    if not clean or not re.search(r"[A-Za-z]", clean):
        raise ValueError("query is empty (no words to search with)")
    low = clean.lower()
    slots: dict[str, str] = {}
    views: dict[str, str | None] = {"full": clean}

    # appearance: "<colour> <garment>" pairs, headwear, bag
    garments = "|".join(map(re.escape, TOPS + BOTTOMS))
    colours = "|".join(COLOUR_WORDS)
    app_parts = []
    for m in re.finditer(rf"\b({colours}) ({garments})\b", low):
        colour, garment = COLOUR_WORDS[m.group(1)], m.group(2)
        slot = "upper" if garment in TOPS else "lower"
        slots.setdefault(slot, colour)
        app_parts.append(f"{colour} {garment}")
    for lexicon, slot in ((HEADWEAR_LEXICON, "headwear"), (BAG_LEXICON, "bag")):
        hits = _find_all(low, lexicon)
        if hits:
            slots[slot] = hits[0][2]
            app_parts.append(hits[0][1])
    views["appearance"] = ", ".join(app_parts) if app_parts else None

    acts = _find_all(low, ACTION_LEXICON)
    if acts:
        slots["action"] = acts[0][2]
    views["action"] = acts[0][1] if acts else None
    objs = _find_all(low, OBJECT_LEXICON)
    if objs:
        slots["object"] = objs[0][2]
    views["object"] = objs[0][1] if objs else None
    scene_parts = []
    for lexicon, slot in ((SCENE_LEXICON, "scene"), (LIGHT_LEXICON, "light"), (WEATHER_LEXICON, "weather")):
        hits = _find_all(low, lexicon)
        if hits:
            slots[slot] = hits[0][2]
            scene_parts.append(hits[0][1])
    views["scene"] = ", ".join(scene_parts) if scene_parts else None  # where, in what light and weather

    parts = [f"{f}: {views[f]}" for f in FACETS if views[f] is not None]
    views["structured"] = "; ".join(parts) if parts else clean
    return ParsedQuery(text=clean, views={v: views.get(v) for v in VIEWS}, slots=slots)
