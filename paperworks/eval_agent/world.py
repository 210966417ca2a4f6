"""The generator zoo: procedural text-to-image "models" with hidden capability profiles.

A prompt is a :class:`~paperworks.core.render.scene.ScenePrompt` from one dimension's pool
(T2I-CompBench-like: colour binding, object presence, counting, spatial relations, image
quality). Each prompt belongs to a *sub-aspect* (stratum) of its dimension — the number of
objects, the requested count, the relation — and a generator's error rate depends on it, so
an evaluator that looks at sub-aspects can learn where a model fails.

A generator edits the prompt before drawing it (swaps two colours, drops an object, miscounts,
flips a relation), realises it with ``core.render.scene.realise``, renders it in its family's
look (A flat, B textured, C — held out — flat under uneven shading) and adds sensor noise of
its quality. The truth of every sample is what was drawn (:class:`Parse`), never the prompt.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

import numpy as np

from paperworks.core.render.scene import COLOURS, FLOORS, RELATIONS, SHAPES, PromptItem, Relation, Scene, ScenePrompt, realise
from paperworks.eval_agent.params import ZooParams

FAMILIES = ("A", "B", "C")
KNOWN_FAMILIES = ("A", "B")

STYLE_OF = {"A": "flat", "B": "textured", "C": "flat"}
# White is left out of prompts: under family B's stripes (gain 0.78) it is the colour of the pale floors.
PROMPT_COLOURS = tuple(c for c in COLOURS if c != "white")
FLIP = {"left of": "right of", "right of": "left of", "above": "below", "below": "above"}
# Sub-aspects of each dimension: what the stratum index of a prompt means.
STRATA: dict[str, tuple[str, ...]] = {
    "colour": ("2 objects", "3 objects"),
    "presence": ("2 objects", "3 objects", "4 objects"),
    "count": ("count 1", "count 2", "count 3", "count 4"),
    "spatial": tuple(RELATIONS),
    "quality": ("1 object", "2 objects", "3 objects"),
}


@dataclass(frozen=True)
class Generator:
    """A hidden capability profile (error rates are per prompt at the easiest sub-aspect)."""

    name: str
    family: str          # A, B (known) or C (held out)
    role: str            # in_family, held_out, population
    colour_swap: float   # P(two colours swapped) per extra object
    omission: float      # P(an object dropped) per object, × objects / 3
    count_base: float    # P(off-by-one) at count 1 …
    count_slope: float   # … + this per extra requested object
    relation_flip: float  # P(relation drawn mirrored) for left/right …
    vertical_factor: float  # … × this for above/below
    noise_mean: float    # per-pixel noise std (pixel units), × (1 + 0.3 × (objects − 1))
    noise_spread: float


def _unit(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(np.round(rng.uniform(lo, hi), 4))


def make_generator(name: str, family: str, role: str, rng: np.random.Generator, noise_max: float) -> Generator:
    """A random profile spread wide enough that the zoo covers every reference level."""
    return Generator(
        name=name, family=family, role=role,
        colour_swap=_unit(rng, 0.0, 0.45), omission=_unit(rng, 0.0, 0.35),
        count_base=_unit(rng, 0.0, 0.3), count_slope=_unit(rng, 0.0, 0.2),
        relation_flip=_unit(rng, 0.0, 0.5), vertical_factor=_unit(rng, 0.5, 1.8),
        noise_mean=_unit(rng, 0.0, 0.6 * noise_max), noise_spread=_unit(rng, 1.0, 0.2 * noise_max))


def build_zoo(p: ZooParams, seed: int) -> list[Generator]:
    """In-family A and B generators, held-out C generators and the A/B reference population."""
    rng = np.random.default_rng([seed, 17, 1])
    zoo = [make_generator(f"{fam}{i}", fam, "in_family", rng, p.noise_max) for fam in KNOWN_FAMILIES for i in range(p.n_per_family)]
    zoo += [make_generator(f"C{i}", "C", "held_out", rng, p.noise_max) for i in range(p.n_held_out)]
    zoo += [make_generator(f"pop{i}", KNOWN_FAMILIES[i % 2], "population", rng, p.noise_max) for i in range(p.n_population)]
    return zoo


# ---------------------------------------------------------------- prompt pools
@dataclass(frozen=True)
class BenchPrompt:
    dim: str
    index: int           # position in the dimension's prompt file (the fixed first-N list reads this order)
    stratum: int
    prompt: ScenePrompt  # style is set by the generator


def _items(rng: np.random.Generator, n: int) -> list[PromptItem]:
    shapes = rng.choice(len(SHAPES), size=n, replace=False)
    colours = rng.choice(len(PROMPT_COLOURS), size=n, replace=False)
    return [PromptItem(shape=SHAPES[s], colour=PROMPT_COLOURS[c], size="large") for s, c in zip(shapes, colours)]


def make_prompt(dim: str, stratum: int, rng: np.random.Generator) -> ScenePrompt:
    floor = str(rng.choice(list(FLOORS)))
    if dim == "colour":
        return ScenePrompt(items=tuple(_items(rng, stratum + 2)), floor=floor)
    if dim == "presence":
        return ScenePrompt(items=tuple(_items(rng, stratum + 2)), floor=floor)
    if dim == "count":
        main, other = _items(rng, 2)
        return ScenePrompt(items=(main.model_copy(update={"count": stratum + 1}), other), floor=floor)
    if dim == "spatial":
        return ScenePrompt(items=tuple(_items(rng, 2)), relations=(Relation(subject=0, relation=RELATIONS[stratum], object=1),), floor=floor)
    if dim == "quality":
        return ScenePrompt(items=tuple(_items(rng, stratum + 1)), floor=floor)
    raise ValueError(f"unknown dimension {dim!r}")


def build_prompts(p: ZooParams, seed: int) -> list[BenchPrompt]:
    """Each dimension's pool: strata in equal shares, in a shuffled (file) order."""
    out = []
    for d, dim in enumerate(p.dims):
        rng = np.random.default_rng([seed, 17, 2, d])
        strata = np.arange(p.prompts_per_dim) % len(STRATA[dim])
        rng.shuffle(strata)
        out += [BenchPrompt(dim, i, int(s), make_prompt(dim, int(s), rng)) for i, s in enumerate(strata)]
    return out


# ---------------------------------------------------------------- drawing a sample
@dataclass(frozen=True)
class Parse:
    """What an image shows, per shape (index into SHAPES): the truth of a render or a tool's reading."""

    count: np.ndarray   # (5,) int, instances of each shape
    colour: np.ndarray  # (5,) int colour index of the shape's first instance, −1 when absent
    x: np.ndarray       # (5,) mean centre of the shape's instances (normalised), NaN when absent
    y: np.ndarray
    noise: float        # per-pixel noise std


def sample_seed(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256(json.dumps([str(q) for q in parts]).encode()).digest()[:8], "little") >> 1


def _edit(g: Generator, dim: str, prompt: ScenePrompt, rng: np.random.Generator) -> ScenePrompt:
    """The prompt as this generator misunderstands it (errors rise with the sub-aspect's difficulty)."""
    items = [it.model_copy() for it in prompt.items]
    relations = list(prompt.relations)
    n = len(items)
    if n >= 2 and rng.random() < min(1.0, g.colour_swap * (n - 1)):
        i, j = rng.choice(n, size=2, replace=False)
        items[i], items[j] = (items[i].model_copy(update={"colour": items[j].colour}),
                              items[j].model_copy(update={"colour": items[i].colour}))
    if dim == "count" and rng.random() < min(1.0, g.count_base + g.count_slope * (items[0].count - 1)):
        c = items[0].count
        items[0] = items[0].model_copy(update={"count": c + 1 if c == 1 or rng.random() < 0.5 else c - 1})
    for r_i, r in enumerate(relations):
        factor = g.vertical_factor if r.relation in ("above", "below") else 1.0
        if rng.random() < min(1.0, g.relation_flip * factor):
            relations[r_i] = r.model_copy(update={"relation": FLIP[r.relation]})
    keep = [k for k in range(n) if not (n >= 2 and rng.random() < min(0.9, g.omission * n / 3))]
    if not keep:
        keep = [0]
    kept = {k: j for j, k in enumerate(keep)}
    relations = [r.model_copy(update={"subject": kept[r.subject], "object": kept[r.object]})
                 for r in relations if r.subject in kept and r.object in kept]
    return ScenePrompt(items=tuple(items[k] for k in keep), relations=tuple(relations),
                       style=STYLE_OF[g.family], floor=prompt.floor)


def _shade(img: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Family C: light falling off across the picture from a random side (the held-out look)."""
    h, w, _ = img.shape
    angle = rng.uniform(0, 2 * np.pi)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    ramp = (np.cos(angle) * (xx / w - 0.5) + np.sin(angle) * (yy / h - 0.5)) + 0.5
    gain = 1.0 - 0.45 * np.clip(ramp, 0, 1)
    return img.astype(np.float32) * gain[..., None]


def draw(g: Generator, dim: str, prompt: ScenePrompt, seed: int, noise_max: float, size: int = 64, with_objects: bool = False):
    """One sample of ``g`` for ``prompt``: the ``size × size × 3`` uint8 image and its truth."""
    rng = np.random.default_rng(seed)
    drawn = _edit(g, dim, prompt, rng)
    spec = realise(drawn, int(rng.integers(10**8)))
    img = Scene(spec, size, size).frame(0).astype(np.float32)
    if g.family == "C":
        img = _shade(img, rng)
    n_obj = len(prompt.items)
    noise = float(np.clip(abs(rng.normal(g.noise_mean * (1 + 0.3 * (n_obj - 1)), g.noise_spread)), 0, noise_max))
    img = np.clip(np.round(img + rng.standard_normal(img.shape).astype(np.float32) * noise), 0, 255).astype(np.uint8)
    truth = truth_of(spec.objects, noise)
    return (img, truth, spec.objects) if with_objects else (img, truth)


def truth_of(objects, noise: float) -> Parse:
    count = np.zeros(len(SHAPES), dtype=np.int64)
    colour = np.full(len(SHAPES), -1, dtype=np.int64)
    xs = [[] for _ in SHAPES]
    ys = [[] for _ in SHAPES]
    for o in objects:
        s = SHAPES.index(o.shape)
        if count[s] == 0:
            colour[s] = COLOURS.index(o.colour)
        count[s] += 1
        xs[s].append(o.x)
        ys[s].append(o.y)
    x = np.array([np.mean(v) if v else np.nan for v in xs])
    y = np.array([np.mean(v) if v else np.nan for v in ys])
    return Parse(count, colour, x, y, noise)


# ---------------------------------------------------------------- the dimension checks
def check(dim: str, prompt: ScenePrompt, parse: Parse, quality_threshold: float) -> bool:
    """Does an image read as ``parse`` satisfy the prompt on this dimension? (Same rule for truth and tools.)"""
    s_of = [SHAPES.index(it.shape) for it in prompt.items]
    if dim == "colour":
        return all(parse.count[s] >= 1 and parse.colour[s] == COLOURS.index(it.colour) for s, it in zip(s_of, prompt.items))
    if dim == "presence":
        return all(parse.count[s] >= 1 for s in s_of)
    if dim == "count":
        return bool(parse.count[s_of[0]] == prompt.items[0].count)
    if dim == "spatial":
        r = prompt.relations[0]
        a, b = s_of[r.subject], s_of[r.object]
        if parse.count[a] < 1 or parse.count[b] < 1:
            return False
        dx, dy = parse.x[a] - parse.x[b], parse.y[a] - parse.y[b]
        return bool({"left of": dx < 0, "right of": dx > 0, "above": dy < 0, "below": dy > 0}[r.relation])
    if dim == "quality":
        return parse.noise < quality_threshold
    raise ValueError(f"unknown dimension {dim!r}")


def generator_record(g: Generator) -> dict:
    return asdict(g)
