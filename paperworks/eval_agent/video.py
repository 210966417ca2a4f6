"""The text-to-video generators and the VBench-like suite (the ``paper`` profile's video side).

A **prompt** is a video scene (:class:`VideoPrompt`): a ``core.render.scene.ScenePrompt`` (objects
with shape, colour, count, a relation, a floor = the *scene*, a style) and a motion of the first
object (the *subject*): none, or left / right / up / down by a distance. :func:`prompt_script`
turns it into the scene script's ``SceneSpec`` (the placed objects and one ``move`` event gliding
the subject from frame 1 to the last frame) — what a faithful generator would render.

A **generator** (:class:`VideoGenerator`) has a hidden capability profile over the suite's
dimensions and realises a prompt as its own scene script: a chain of one-frame ``move`` events to
its waypoints (jittered, frozen or reversed), a wrong shape, colour, floor or style, dropped
objects, a mirrored relation; its clip is rendered with ``core.render.scene.Scene`` and may splice
in frames of a variant script (the subject's colour glitching for ≥ 3 frames, a scene cut to
another floor), then gets its family's look, per-frame brightness gains (flicker) and sensor
noise. The **truth** of a clip is what was drawn (the scripts' frame truth, the noise-free
background brightness, the noise std, the drawn style), read by the same rule as the tools'
reading (``video_tools.check_clip``); never the profile.

Families: four in-domain looks (V0 plain, V1 dim, V2 warm cast, V3 vignette) and three held out
(H0 light fall-off from a random side, H1 cool cast at lower contrast, H2 soft: a 3 × 3 blur).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np
from pydantic import Field
from scipy import ndimage

from paperworks.core.params import StrictModel
from paperworks.core.render.scene import (COLOURS, FLOORS, RELATIONS, SHAPES, SIZES, WALL_FRAC, Event, PromptItem, Relation, Scene,
                                          SceneObject, ScenePrompt, SceneSpec, realise)
from paperworks.eval_agent.params import T2VParams
from paperworks.eval_agent.video_tools import DIRECTION, BORDER, ClipParse, flicker_of
from paperworks.eval_agent.world import FLIP, PROMPT_COLOURS, _shade, truth_of

IN_DOMAIN = ("V0", "V1", "V2", "V3")
HELD_OUT = ("H0", "H1", "H2")
LOOKS = {"V0": "plain", "V1": "dim", "V2": "warm cast", "V3": "vignette", "H0": "light fall-off", "H1": "cool cast, low contrast",
         "H2": "soft (3 × 3 blur)"}
STATIC_MOVING = ("static", "moving")
VSTRATA: dict[str, tuple[str, ...]] = {
    "subject_consistency": STATIC_MOVING,
    "background_consistency": STATIC_MOVING,
    "temporal_flickering": STATIC_MOVING,
    "motion_smoothness": ("horizontal", "vertical"),
    "dynamic_degree": ("short move", "long move"),
    "imaging_quality": ("1 object", "2 objects", "3 objects"),
    "object_class": STATIC_MOVING,
    "multiple_objects": ("2 objects", "3 objects"),
    "object_action": ("left", "right", "up", "down"),
    "colour": ("2 objects", "3 objects"),
    "spatial_relationship": tuple(RELATIONS),
    "scene": STATIC_MOVING,
    "appearance_style": ("flat", "textured"),
    "overall_consistency": STATIC_MOVING,
}
SUBJECT_HALF = SIZES["large"]
MARGIN = SUBJECT_HALF + 1.5 * WALL_FRAC  # a large shape's centre stays this far from the walls
SHORT, LONG = (0.18, 0.22), (0.28, 0.32)


class VideoPrompt(StrictModel):
    """A text-to-video request: a scene (objects, relation, floor, style) and the subject's (first object's) motion."""

    scene: ScenePrompt
    motion: Literal["none", "left", "right", "up", "down"] = "none"
    distance: float = Field(0.0, ge=0.0, le=0.35)

    def text(self) -> str:
        base = self.scene.text()
        if self.motion == "none":
            return base
        head, _, tail = base.rpartition(" (")
        return f"{head}; the {self.scene.items[0].colour} {self.scene.items[0].shape} moves {self.motion} ({tail}"


@dataclass(frozen=True)
class VideoPromptRecord:
    dim: str
    index: int
    stratum: int
    prompt: VideoPrompt


# ---------------------------------------------------------------- prompts
def _items(rng: np.random.Generator, n: int, colours: tuple[str, ...] = PROMPT_COLOURS) -> tuple[PromptItem, ...]:
    shapes = rng.choice(len(SHAPES), size=n, replace=False)
    cols = rng.choice(len(colours), size=n, replace=False)
    return tuple(PromptItem(shape=SHAPES[s], colour=colours[c], size="large") for s, c in zip(shapes, cols))


def make_video_prompt(dim: str, stratum: int, rng: np.random.Generator) -> VideoPrompt:
    floor = str(rng.choice(list(FLOORS)))
    style = str(rng.choice(["flat", "textured"]))
    direction = str(rng.choice(list(DIRECTION)))
    dist = float(np.round(rng.uniform(*LONG), 3))
    moving = stratum == 1
    one = dict(floor=floor, style=style)
    if dim in ("subject_consistency", "background_consistency", "temporal_flickering", "object_class", "scene", "overall_consistency"):
        return VideoPrompt(scene=ScenePrompt(items=_items(rng, 1), **one), motion=direction if moving else "none",
                           distance=dist if moving else 0.0)
    if dim == "motion_smoothness":
        direction = str(rng.choice(["left", "right"] if stratum == 0 else ["up", "down"]))
        return VideoPrompt(scene=ScenePrompt(items=_items(rng, 1), **one), motion=direction, distance=dist)
    if dim == "dynamic_degree":
        d = float(np.round(rng.uniform(*(SHORT if stratum == 0 else LONG)), 3))
        return VideoPrompt(scene=ScenePrompt(items=_items(rng, 1), **one), motion=direction, distance=d)
    if dim == "object_action":
        return VideoPrompt(scene=ScenePrompt(items=_items(rng, 1), **one), motion=("left", "right", "up", "down")[stratum], distance=dist)
    if dim == "imaging_quality":
        return VideoPrompt(scene=ScenePrompt(items=_items(rng, stratum + 1), **one))
    if dim in ("multiple_objects", "colour"):
        return VideoPrompt(scene=ScenePrompt(items=_items(rng, stratum + 2), **one))
    if dim == "spatial_relationship":
        return VideoPrompt(scene=ScenePrompt(items=_items(rng, 2), relations=(Relation(subject=0, relation=RELATIONS[stratum], object=1),),
                                             **one))
    if dim == "appearance_style":  # black is left out: its stripes are too dark to read through the noise
        return VideoPrompt(scene=ScenePrompt(items=_items(rng, 1, tuple(c for c in PROMPT_COLOURS if c != "black")), floor=floor,
                                             style=("flat", "textured")[stratum]))
    raise ValueError(f"unknown text-to-video dimension {dim!r}")


def build_video_prompts(p: T2VParams, seed: int) -> list[VideoPromptRecord]:
    """Each dimension's prompt file: sub-aspects in equal shares, in a shuffled (file) order."""
    out = []
    for d, dim in enumerate(p.dims):
        rng = np.random.default_rng([seed, 17, 5, d])
        strata = np.arange(p.prompts_per_dim) % len(VSTRATA[dim])
        rng.shuffle(strata)
        out += [VideoPromptRecord(dim, i, int(s), make_video_prompt(dim, int(s), rng)) for i, s in enumerate(strata)]
    return out


def _start_point(rng: np.random.Generator, motion: str, distance: float) -> tuple[float, float]:
    """A subject start from which the move *and its reverse* stay inside the room."""
    lo, hi = MARGIN, 1 - MARGIN
    x, y = rng.uniform(lo, hi), rng.uniform(lo, hi)
    if motion in ("left", "right"):
        x = rng.uniform(lo + distance, hi - distance)
    elif motion in ("up", "down"):
        y = rng.uniform(lo + distance, hi - distance)
    return (round(float(x), 4), round(float(y), 4))


def prompt_script(prompt: VideoPrompt, seed: int, n_frames: int) -> SceneSpec:
    """The prompt as the scene script: its objects placed (``realise``) and the subject's glide as one ``move`` event."""
    rng = np.random.default_rng(seed)
    one = realise(prompt.scene, int(rng.integers(10**8)))
    objects = list(one.objects)
    events = ()
    if prompt.motion != "none":
        x, y = _start_point(rng, prompt.motion, prompt.distance)
        objects[0] = objects[0].model_copy(update={"x": x, "y": y})
        u = DIRECTION[prompt.motion]
        events = (Event(kind="move", obj=0, start=1, end=n_frames, to=(round(x + u[0] * prompt.distance, 4), round(y + u[1] * prompt.distance, 4))),)
    return SceneSpec(layout=one.layout, objects=tuple(objects), events=events, n_frames=n_frames, style=prompt.scene.style, seed=one.seed)


# ---------------------------------------------------------------- generators
@dataclass(frozen=True)
class VideoGenerator:
    """A hidden capability profile over the suite's dimensions (rates at the easiest sub-aspect)."""

    name: str
    family: str            # V0–V3 (in-domain) or H0–H2 (held out)
    role: str              # in_family, held_out, population
    subject_drift: float   # P(the subject's colour glitches for ≥ 3 frames), × 2 when it moves
    background_drift: float  # P(a scene cut to another floor mid-clip), × 1.5 when the subject moves
    flicker_mean: float    # per-frame brightness gain std ~ |N(mean (× 1.3 moving), spread)|
    flicker_spread: float
    jitter_mean: float     # per-frame waypoint jitter std (normalised) ~ |N(mean (× vertical_factor vertical), spread)|
    jitter_spread: float
    freeze: float          # P(the subject does not move although asked), × 1.5 for a short move
    noise_mean: float      # sensor noise std, × (1 + 0.3 (objects − 1))
    noise_spread: float
    shape_error: float     # P(the subject drawn as another shape), × 1.5 moving
    omission: float        # P(an object dropped) per object, × objects / 3
    colour_swap: float     # P(two colours swapped) per extra object
    relation_flip: float   # P(relation mirrored), × vertical_factor for above/below
    vertical_factor: float
    action_flip: float     # P(the subject moves the opposite way), × vertical_factor for up/down
    scene_error: float     # P(another floor than asked), × 1.5 moving
    style_error: float     # P(the other style), × style_factor when textured is asked
    style_factor: float


def _u(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(np.round(rng.uniform(lo, hi), 4))


def make_video_generator(name: str, family: str, role: str, rng: np.random.Generator, noise_max: float) -> VideoGenerator:
    """A random profile spread wide enough that the zoo covers every reference level of every dimension."""
    return VideoGenerator(
        name=name, family=family, role=role,
        subject_drift=_u(rng, 0.0, 0.3), background_drift=_u(rng, 0.0, 0.35),
        flicker_mean=_u(rng, 0.0, 0.03), flicker_spread=_u(rng, 0.002, 0.012),
        jitter_mean=_u(rng, 0.0, 0.02), jitter_spread=_u(rng, 0.001, 0.006), freeze=_u(rng, 0.0, 0.35),
        noise_mean=_u(rng, 0.0, 0.6 * noise_max), noise_spread=_u(rng, 1.0, 0.2 * noise_max),
        shape_error=_u(rng, 0.0, 0.3), omission=_u(rng, 0.0, 0.35), colour_swap=_u(rng, 0.0, 0.45),
        relation_flip=_u(rng, 0.0, 0.5), vertical_factor=_u(rng, 0.5, 1.8), action_flip=_u(rng, 0.0, 0.4),
        scene_error=_u(rng, 0.0, 0.35), style_error=_u(rng, 0.0, 0.35), style_factor=_u(rng, 0.5, 1.8))


def build_video_zoo(p: T2VParams, seed: int, noise_max: float) -> list[VideoGenerator]:
    """In-domain generators (``n_per_family`` of each of V0–V3), held-out ones (``n_held_out`` of each of H0–H2) and
    the in-domain reference population (names never shared with the image zoo's)."""
    rng = np.random.default_rng([seed, 17, 6])
    zoo = [make_video_generator(f"{fam}-{i}", fam, "in_family", rng, noise_max) for fam in IN_DOMAIN for i in range(p.n_per_family)]
    zoo += [make_video_generator(f"{fam}-{i}", fam, "held_out", rng, noise_max) for fam in HELD_OUT for i in range(p.n_held_out)]
    zoo += [make_video_generator(f"vpop{i}", IN_DOMAIN[i % len(IN_DOMAIN)], "population", rng, noise_max) for i in range(p.n_population)]
    return zoo


def _edit_scene(g: VideoGenerator, prompt: VideoPrompt, rng: np.random.Generator) -> tuple[ScenePrompt, str]:
    """The scene as this generator misreads it, and the direction it moves the subject."""
    sc = prompt.scene
    moving = prompt.motion != "none"
    items = [it.model_copy() for it in sc.items]
    relations = list(sc.relations)
    n = len(items)
    if n >= 2 and rng.random() < min(1.0, g.colour_swap * (n - 1)):
        i, j = rng.choice(n, size=2, replace=False)
        items[i], items[j] = (items[i].model_copy(update={"colour": items[j].colour}), items[j].model_copy(update={"colour": items[i].colour}))
    if rng.random() < min(1.0, g.shape_error * (1.5 if moving else 1.0)):
        taken = {it.shape for it in items}
        items[0] = items[0].model_copy(update={"shape": str(rng.choice([s for s in SHAPES if s not in taken]))})
    for r_i, r in enumerate(relations):
        if rng.random() < min(1.0, g.relation_flip * (g.vertical_factor if r.relation in ("above", "below") else 1.0)):
            relations[r_i] = r.model_copy(update={"relation": FLIP[r.relation]})
    keep = [k for k in range(n) if not (n >= 2 and rng.random() < min(0.9, g.omission * n / 3))] or [0]
    kept = {k: j for j, k in enumerate(keep)}
    relations = [r.model_copy(update={"subject": kept[r.subject], "object": kept[r.object]})
                 for r in relations if r.subject in kept and r.object in kept]
    floor = sc.floor
    if rng.random() < min(1.0, g.scene_error * (1.5 if moving else 1.0)):
        floor = str(rng.choice([f for f in FLOORS if f != sc.floor]))
    style = sc.style
    if rng.random() < min(1.0, g.style_error * (g.style_factor if sc.style == "textured" else 1.0)):
        style = "flat" if style == "textured" else "textured"
    direction = prompt.motion
    if moving and rng.random() < min(1.0, g.action_flip * (g.vertical_factor if direction in ("up", "down") else 1.0)):
        direction = {"left": "right", "right": "left", "up": "down", "down": "up"}[direction]
    if 0 not in kept:  # the subject was dropped: nothing moves
        direction = "none"
    return ScenePrompt(items=tuple(items[k] for k in keep), relations=tuple(relations), style=style, floor=floor), direction


def _look(img: np.ndarray, family: str, shade_rng: np.random.Generator) -> np.ndarray:
    """The family's look on a float H × W × 3 frame (the shading side is drawn once per clip)."""
    if family == "V0":
        return img
    if family == "V1":
        return img * 0.92
    if family == "V2":
        return img + np.array([10.0, 0.0, -8.0], dtype=np.float32)
    if family == "V3":
        h, w, _ = img.shape
        yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
        r2 = ((xx + 0.5) / w - 0.5) ** 2 + ((yy + 0.5) / h - 0.5) ** 2
        return img * (1.0 - 0.25 * r2)[..., None]
    if family == "H0":
        return _shade(img, shade_rng)
    if family == "H1":
        return (img - 128.0) * 0.85 + 128.0 + np.array([-12.0, 0.0, 12.0], dtype=np.float32)
    if family == "H2":
        return ndimage.uniform_filter(img, size=(3, 3, 1), mode="nearest")
    raise ValueError(f"unknown text-to-video family {family!r}")


def draw_clip(g: VideoGenerator, dim: str, prompt: VideoPrompt, seed: int, n_frames: int, noise_max: float,
              size: int = 64) -> tuple[np.ndarray, ClipParse]:
    """One sample of ``g`` for ``prompt``: the ``T × size × size × 3`` uint8 clip and its truth (what was drawn)."""
    rng = np.random.default_rng(seed)
    t_ = n_frames
    scene, direction = _edit_scene(g, prompt, rng)
    moving = prompt.motion != "none"
    # the scene script of what it understood (placements, the subject's start), then its own waypoints: the asked
    # glide (or its reverse, or none when frozen), plus per-frame jitter, as a chain of one-frame moves
    one = prompt_script(VideoPrompt(scene=scene, motion=prompt.motion if direction != "none" else "none", distance=prompt.distance),
                        int(rng.integers(10**8)), t_)
    objects = list(one.objects)
    x0, y0 = objects[0].x, objects[0].y
    u = np.zeros(2)
    if moving:
        short = prompt.distance < 0.25
        if direction != "none" and rng.random() >= min(1.0, g.freeze * (1.5 if short else 1.0)):
            u = np.array(DIRECTION[direction]) * prompt.distance
    vertical = prompt.motion in ("up", "down")
    sd = float(np.clip(abs(rng.normal(g.jitter_mean * (g.vertical_factor if vertical else 1.0), g.jitter_spread)), 0, 0.05))
    frac = np.arange(t_) / (t_ - 1)
    way = np.array([x0, y0])[None, :] + frac[:, None] * u[None, :] + rng.normal(0, sd, size=(t_, 2)) * (np.arange(t_) > 0)[:, None]
    way = np.clip(np.round(way, 4), MARGIN, 1 - MARGIN)
    objects[0] = objects[0].model_copy(update={"x": float(way[0, 0]), "y": float(way[0, 1])})
    events = tuple(Event(kind="move", obj=0, start=t, end=t + 1, to=(float(way[t, 0]), float(way[t, 1]))) for t in range(1, t_))

    def script(subject_colour: str | None = None, floor: str | None = None) -> Scene:
        objs = list(objects)
        if subject_colour is not None:
            objs[0] = objs[0].model_copy(update={"colour": subject_colour})
        lay = one.layout if floor is None else one.layout.model_copy(update={"floors": (floor,)})
        return Scene(SceneSpec(layout=lay, objects=tuple(objs), events=events, n_frames=t_, style=scene.style, seed=one.seed), size, size)

    base = script()
    source = [0] * t_  # which variant script each frame comes from
    variants = {0: base}
    if rng.random() < min(1.0, g.subject_drift * (2.0 if moving else 1.0)):  # the subject's look glitches
        new = str(rng.choice([c for c in PROMPT_COLOURS if c != objects[0].colour]))
        k = int(rng.integers(1, t_ - 2))
        span = range(k, k + 3) if rng.random() < 0.5 else range(k, t_)
        variants[1] = script(subject_colour=new)
        for t in span:
            source[t] = 1
    if rng.random() < min(1.0, g.background_drift * (1.5 if moving else 1.0)):  # a scene cut to another floor
        new_floor = str(rng.choice([f for f in FLOORS if f != one.layout.floors[0]]))
        k = int(rng.integers(2, t_ - 2))
        for key in list(variants):
            c = variants[key].spec.objects[0].colour
            variants[key + 2] = script(subject_colour=c, floor=new_floor)
        for t in range(k, t_):
            source[t] += 2
    flick = float(np.clip(abs(rng.normal(g.flicker_mean * (1.3 if moving else 1.0), g.flicker_spread)), 0, 0.1))
    gains = 1.0 + rng.normal(0, flick, size=t_) * (np.arange(t_) > 0)
    n_obj = len(prompt.scene.items)
    noise = float(np.clip(abs(rng.normal(g.noise_mean * (1 + 0.3 * (n_obj - 1)), g.noise_spread)), 0, noise_max))
    shade_rng = np.random.default_rng(int(rng.integers(2**62)))
    shade_seed = int(shade_rng.integers(2**62))
    inner = np.zeros((size, size), dtype=bool)
    inner[BORDER:-BORDER, BORDER:-BORDER] = True
    clip = np.empty((t_, size, size, 3), dtype=np.uint8)
    parses, floors, bright = [], [], []
    for t in range(t_):
        sc = variants[source[t]]
        img, labels, ft = sc.render(t)
        clean = _look(img.astype(np.float32), g.family, np.random.default_rng(shade_seed)) * gains[t]
        bright.append(float(clean[inner & (labels < 0)].mean()))
        clip[t] = np.clip(np.round(clean + rng.standard_normal(clean.shape).astype(np.float32) * noise), 0, 255).astype(np.uint8)
        parses.append(truth_of(ft.visible(), noise))
        floors.append(sc.spec.layout.floors[0])
    return clip, ClipParse(tuple(parses), tuple(floors), flicker_of(np.array(bright)), scene.style)


def video_generator_record(g: VideoGenerator) -> dict:
    return asdict(g)


__all__ = ["VideoPrompt", "VideoPromptRecord", "VideoGenerator", "VSTRATA", "IN_DOMAIN", "HELD_OUT", "LOOKS", "make_video_prompt",
           "build_video_prompts", "prompt_script", "build_video_zoo", "draw_clip", "COLOURS"]
