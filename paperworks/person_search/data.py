"""The synthetic Sim2Real corpus: sim training families, a real-domain gallery with hard
distractors in the PAB proportion, and paragraph queries.

Hard distractors (as in PAB) share clothing, pose or scene with their target and
differ in *one* attribute. Every attribute tuple in the gallery is unique, so each query
has exactly one relevant image (its target). Training uses the same family construction
(base + single-edit variants), rendered in the *sim* domain, so the models see hard
negatives without ever seeing a real image.

An item is the renderer's pedestrian (seven attributes) plus two *conditions*, light and
weather, painted over the rendered image here (the shared renderer has no such attribute).
The edit weights (``data.edit_weights``) decide which attribute a distractor changes; the
default puts about half of the edits outside every cloze slot (scene, light, weather), so no
expert's closed vocabulary is aligned with the generator by construction. The realised
share is written to ``corpus/summary.json`` (the data card).

A third painted property, the *landmark* beside the pedestrian (a lamp post, a traffic sign or a
small tree at the image's edge), is written in its own caption sentence that no facet lexicon
reads: it reaches the full-caption view only (stage 1's ``full`` anchor branches; the structured
view, every facet view, every cloze slot and every verifier facet miss it). ``data.blind_twin_share``
of the targets get one *blind twin* among their distractors: the target with only the landmark
changed. On such a query the cloze expert and the facet verifier see two identical descriptions,
so their order of target and twin is noise, while stage 1 can tell them apart: the queries where
reranking can turn a confident, correct stage-1 answer wrong (the consensus gate's reason to exist).
The same share of sim training families carries a blind twin, so the encoders learn the landmark.

*Coarse targets* (``data.coarse_target_share``, drawn among the targets without a blind twin): for that
share of the targets every distractor differs from the target only outside every cloze slot — all its
single edits of scene, light and weather, then pairs of them, up to the PAB quota. The cloze expert sees target and distractors as the
same person (every slot agrees), so its order there is noise, while stage 1 reads the conditions as
global image properties (colour grade, veil, flakes) through the full, structured and scene views: the
queries where stage 1 can be confidently right and reranking can only lose.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
from tqdm import tqdm

from paperworks.core.render import (
    ACTIONS, BAGS, COLOURS, HEADWEAR, OBJECTS, SCENES, PedestrianSpec, is_consistent, render_pedestrian,
)
from paperworks.person_search.text import CLOZE_SLOTS, caption

PERSON_ATTRS = ("upper", "lower", "headwear", "bag", "action", "object", "scene")
LIGHTS = ("day", "dusk", "night")
WEATHERS = ("clear", "rain", "fog", "snow")
CONDITIONS = ("light", "weather")
LANDMARKS = ("lamp_post", "traffic_sign", "tree")
# Attributes that only the full caption mentions: no facet, no cloze slot, no verifier checker reads them.
BLIND_ATTRS = ("landmark",)
ATTRS = (*PERSON_ATTRS, *CONDITIONS, *BLIND_ATTRS)
# The attributes outside every cloze slot that stage 1 reads as global image properties (the landmark,
# also outside, is left to the blind twins): a coarse target's distractors differ from it only in these.
OUTSIDE_CLOZE = tuple(a for a in ATTRS if a not in CLOZE_SLOTS and a not in BLIND_ATTRS)
ATTR_VALUES = {"upper": COLOURS, "lower": COLOURS, "headwear": HEADWEAR, "bag": BAGS,
               "action": ACTIONS, "object": OBJECTS, "scene": SCENES, "light": LIGHTS, "weather": WEATHERS,
               "landmark": LANDMARKS}
# Which single edits a hard distractor makes, and how often: the default of ``data.edit_weights``.
EDIT_WEIGHTS = {"action": 0.16, "object": 0.12, "upper": 0.05, "lower": 0.05, "headwear": 0.03, "bag": 0.02,
                "scene": 0.19, "light": 0.19, "weather": 0.19}
PAB_TARGETS, PAB_DISTRACTORS = 1978, 34795


@dataclass(frozen=True)
class ItemSpec:
    """A gallery/training item: the rendered pedestrian plus the landmark, light and weather painted over it."""

    person: PedestrianSpec
    light: str = "day"
    weather: str = "clear"
    landmark: str = "lamp_post"

    def as_dict(self) -> dict[str, str]:
        return self.person.as_dict() | {"light": self.light, "weather": self.weather, "landmark": self.landmark}

    @classmethod
    def from_dict(cls, d: dict[str, str]) -> "ItemSpec":
        return cls(PedestrianSpec(**{a: d[a] for a in PERSON_ATTRS}), d["light"], d["weather"], d["landmark"])


def paint_landmark(img: np.ndarray, landmark: str, seed: int) -> np.ndarray:
    """Paint the landmark in a narrow strip at the left or right edge (side and offset from ``seed``)."""
    rng = np.random.default_rng(seed + 104729)
    x = img.copy()
    h, w = x.shape[:2]
    pole = max(2, w // 16)
    x0 = int(rng.integers(0, 3)) if rng.random() < 0.5 else w - pole - 1 - int(rng.integers(0, 3))
    x0 = int(np.clip(x0, 0, w - pole))
    head = slice(max(0, x0 - 1), min(w, x0 + pole + 1))
    if landmark == "lamp_post":  # a tall dark pole with a yellow lamp on top
        x[h // 8 :, x0 : x0 + pole] = (60, 60, 66)
        x[h // 8 : h // 8 + 3, head] = (250, 220, 60)
    elif landmark == "traffic_sign":  # a light grey pole with a red plate
        x[h // 3 :, x0 : x0 + pole] = (165, 165, 165)
        x[h // 6 : h // 6 + max(3, h // 10), head] = (220, 30, 30)
    elif landmark == "tree":  # a brown trunk under a green crown
        x[h // 2 :, x0 : x0 + pole] = (110, 70, 30)
        x[h // 6 : h // 2, head] = (40, 140, 50)
    else:
        raise ValueError(f"landmark {landmark!r} not in {LANDMARKS}")
    return x


def apply_conditions(img: np.ndarray, light: str, weather: str, seed: int) -> np.ndarray:
    """Paint light and weather over a rendered image (deterministic in ``seed``)."""
    rng = np.random.default_rng(seed + 7919)
    x = img.astype(np.float32)
    if light == "dusk":
        x = x * np.array([1.0, 0.72, 0.45], dtype=np.float32) + np.array([18.0, 4.0, 0.0], dtype=np.float32)
    elif light == "night":
        x = x * 0.35 + np.array([0.0, 6.0, 34.0], dtype=np.float32)
    h, w = x.shape[:2]
    if weather == "rain":  # short diagonal streaks
        for _ in range(max(6, h * w // 180)):
            r, c = int(rng.integers(0, h - 5)), int(rng.integers(0, w - 3))
            for t in range(5):
                x[r + t, c + t // 2] = 0.4 * x[r + t, c + t // 2] + 0.6 * np.array([175.0, 190.0, 215.0])
    elif weather == "snow":  # white flakes
        flakes = rng.random((h, w)) < 0.045
        x[flakes] = 245.0
    elif weather == "fog":  # a grey veil
        x = 0.5 * x + 0.5 * 190.0
    return np.clip(x, 0, 255).astype(np.uint8)

ITEM_SCHEMA = pa.schema([
    ("item_id", pa.int64()), ("family", pa.int64()), ("is_target", pa.bool_()),
    *[(a, pa.string()) for a in ATTRS], ("caption", pa.string()), ("seed", pa.int64()),
])
QUERY_SCHEMA = pa.schema([
    ("query_id", pa.int64()), ("target_item", pa.int64()), ("split", pa.string()), ("caption", pa.string()),
])


@dataclass(frozen=True)
class CorpusConfig:
    n_train_families: int
    family_size: int
    n_targets: int
    distractor_ratio: float  # distractors per target (PAB: 34,795 / 1,978)
    val_fraction: float
    drop_scene_prob: float
    width: int
    height: int
    edit_weights: dict[str, float] | None = None  # None: EDIT_WEIGHTS
    blind_twin_share: float = 0.0  # share of targets (and of training families) with a blind twin
    # share of sim training families with a blind twin; None: ``blind_twin_share``. Above it, the
    # encoders see the landmark contrast in more batches (only training data: the test world is unchanged)
    train_blind_twin_share: float | None = None
    # share of targets whose distractors all differ from them only outside every cloze slot (gallery only)
    coarse_target_share: float = 0.0


def random_spec(rng: np.random.Generator) -> ItemSpec:
    action = ACTIONS[int(rng.integers(len(ACTIONS)))]
    objects = [o for o in OBJECTS if is_consistent(action, o)]
    person = PedestrianSpec(
        upper=COLOURS[int(rng.integers(len(COLOURS)))], lower=COLOURS[int(rng.integers(len(COLOURS)))],
        headwear=HEADWEAR[int(rng.integers(len(HEADWEAR)))], bag=BAGS[int(rng.integers(len(BAGS)))],
        action=action, object=objects[int(rng.integers(len(objects)))], scene=SCENES[int(rng.integers(len(SCENES)))],
    )
    return ItemSpec(person, LIGHTS[int(rng.integers(len(LIGHTS)))], WEATHERS[int(rng.integers(len(WEATHERS)))],
                    LANDMARKS[int(rng.integers(len(LANDMARKS)))])


def single_edits(spec: ItemSpec) -> list[tuple[str, ItemSpec]]:
    """Every valid spec that differs from ``spec`` in exactly one attribute, with the edited attribute."""
    out = []
    base = spec.as_dict()
    for attr in ATTRS:
        for value in ATTR_VALUES[attr]:
            if value == base[attr]:
                continue
            d = dict(base, **{attr: value})
            if is_consistent(d["action"], d["object"]):
                out.append((attr, ItemSpec.from_dict(d)))
    return out


def hard_variants(spec: ItemSpec, n: int, rng: np.random.Generator, taken: set[ItemSpec],
                  edit_weights: dict[str, float] | None = None) -> list[ItemSpec]:
    """Up to ``n`` unused single-edit variants, drawn with the edit weights (an attribute's weight is
    shared by its possible edits; a zero weight never edits it)."""
    ew = EDIT_WEIGHTS if edit_weights is None else edit_weights
    edits = [(a, s) for a, s in single_edits(spec) if s not in taken and ew.get(a, 0.0) > 0]
    if not edits:
        return []
    weights = np.array([ew[a] / sum(1 for b, _ in edits if b == a) for a, _ in edits])
    k = min(n, len(edits))
    idx = rng.choice(len(edits), size=k, replace=False, p=weights / weights.sum())
    return [edits[i][1] for i in sorted(idx)]


def blind_twin(spec: ItemSpec, rng: np.random.Generator, taken: set[ItemSpec]) -> ItemSpec | None:
    """An unused spec equal to ``spec`` except in one blind attribute (the landmark), or None."""
    options = [s for a, s in single_edits(spec) if a in BLIND_ATTRS and s not in taken]
    return options[int(rng.integers(len(options)))] if options else None


def outside_edits(spec: ItemSpec, n: int, rng: np.random.Generator, taken: set[ItemSpec]) -> list[ItemSpec]:
    """Up to ``n`` unused specs that differ from ``spec`` only outside every cloze slot (``OUTSIDE_CLOZE``):
    all its single edits there first (in random order), then pairs of them (two attributes changed)."""
    base = spec.as_dict()
    singles = [s for a, s in single_edits(spec) if a in OUTSIDE_CLOZE and s not in taken]
    pairs = [ItemSpec.from_dict(dict(base, **{a: va, b: vb}))
             for i, a in enumerate(OUTSIDE_CLOZE) for b in OUTSIDE_CLOZE[i + 1:]
             for va in ATTR_VALUES[a] if va != base[a] for vb in ATTR_VALUES[b] if vb != base[b]]
    pairs = [s for s in pairs if s not in taken]
    out = [singles[i] for i in rng.permutation(len(singles))]
    out += [pairs[i] for i in rng.permutation(len(pairs))]
    return out[:n]


def planted(n: int, share: float, rng: np.random.Generator) -> set[int]:
    """Exactly round(share · n) of range(n), drawn at random: the ones that get a blind twin."""
    return set(rng.permutation(n)[: int(round(share * n))].tolist())


def build_families(n_families: int, family_size: int, rng: np.random.Generator,
                   taken: set[ItemSpec], edit_weights: dict[str, float] | None = None,
                   blind_twin_share: float = 0.0) -> list[list[ItemSpec]]:
    """Families of unique specs: a random base plus ``family_size − 1`` hard single-edit variants
    (one of them the base's blind twin in ``blind_twin_share`` of the families)."""
    with_twin = planted(n_families, blind_twin_share, rng)
    families = []
    while len(families) < n_families:
        base = random_spec(rng)
        if base in taken:
            continue
        taken.add(base)
        twin = blind_twin(base, rng, taken) if len(families) in with_twin else None
        if twin is not None:
            taken.add(twin)
        variants = [twin] if twin is not None else []
        variants += hard_variants(base, family_size - 1 - len(variants), rng, taken, edit_weights)
        taken.update(variants)
        families.append([base, *variants])
    return families


def build_gallery(n_targets: int, distractor_ratio: float, rng: np.random.Generator,
                  edit_weights: dict[str, float] | None = None,
                  blind_twin_share: float = 0.0, coarse_target_share: float = 0.0) -> list[tuple[int, bool, ItemSpec]]:
    """(family = target index, is_target, spec) for targets and their hard distractors (PAB proportion);
    ``blind_twin_share`` of the targets (those with at least one distractor) get their blind twin as one of them;
    ``coarse_target_share`` of the targets, drawn among those without a twin, get only distractors that
    agree with them in every cloze slot (:func:`outside_edits`)."""
    n_distractors = int(round(n_targets * distractor_ratio))
    # Spread the distractors evenly over targets (some get one more) to hit the exact proportion.
    per_target = np.full(n_targets, n_distractors // n_targets)
    per_target[rng.permutation(n_targets)[: n_distractors - per_target.sum()]] += 1
    taken: set[ItemSpec] = set()
    targets = []
    while len(targets) < n_targets:
        s = random_spec(rng)
        if s not in taken:
            taken.add(s)
            targets.append(s)
    rows = [(t, True, s) for t, s in enumerate(targets)]
    with_twin = planted(n_targets, blind_twin_share, rng)
    coarse: set[int] = set()
    if coarse_target_share > 0:  # drawn among the targets without a twin (0: the random stream as before)
        rest = np.array(sorted(set(range(n_targets)) - with_twin), dtype=np.int64)
        k = int(round(coarse_target_share * n_targets))
        if k > len(rest):
            raise ValueError(f"coarse_target_share {coarse_target_share} + blind_twin_share {blind_twin_share} exceed 1")
        coarse = set(rng.permutation(rest)[:k].tolist())
    for t, s in enumerate(targets):
        twin = blind_twin(s, rng, taken) if t in with_twin and per_target[t] > 0 else None
        if twin is not None:
            taken.add(twin)
        variants = [twin] if twin is not None else []
        if t in coarse:
            variants += outside_edits(s, int(per_target[t]) - len(variants), rng, taken | set(variants))
        variants += hard_variants(s, int(per_target[t]) - len(variants), rng, taken | set(variants), edit_weights)
        while len(variants) < per_target[t]:  # neighbourhood used up: a random unused spec sharing the scene
            extra = random_spec(rng)
            extra = ItemSpec.from_dict(dict(extra.as_dict(), scene=s.person.scene))
            if extra not in taken:
                variants.append(extra)
        taken.update(variants)
        rows.extend((t, False, v) for v in variants)
    return rows


def render_items(specs: list[ItemSpec], seeds: list[int], domain: str, width: int, height: int, desc: str) -> np.ndarray:
    out = np.empty((len(specs), height, width, 3), dtype=np.uint8)
    for i, (s, seed) in enumerate(tqdm(list(zip(specs, seeds)), desc=desc, mininterval=2.0)):
        person = paint_landmark(render_pedestrian(s.person, seed, domain, width, height), s.landmark, seed)
        out[i] = apply_conditions(person, s.light, s.weather, seed)
    return out


def edit_shares(gallery: pd.DataFrame) -> dict[str, object]:
    """The data card's edit statistics: which attributes each distractor changes from its target."""
    targets = gallery[gallery["is_target"]].set_index("family")
    counts = {a: 0 for a in ATTRS}
    n_multi, n_outside = 0, 0
    distractors = gallery[~gallery["is_target"]]
    for fam, row in zip(distractors["family"], distractors[list(ATTRS)].itertuples(index=False)):
        changed = [a for a, v in zip(ATTRS, row) if v != targets.at[fam, a]]
        if len(changed) == 1:
            counts[changed[0]] += 1
            n_outside += changed[0] not in CLOZE_SLOTS
        else:
            n_multi += 1
    n = max(len(distractors), 1)
    twins = blind_twin_targets(gallery)
    tgt = targets.loc[distractors["family"], list(CLOZE_SLOTS)].to_numpy()
    outside_only = (distractors[list(CLOZE_SLOTS)].to_numpy() == tgt).all(1)
    return {"single_edits_by_attribute": counts, "multi_attribute_distractors": n_multi,
            "share_single_edits_outside_cloze_slots": round(n_outside / n, 4),
            # every distractor (single or multi-attribute edit) that agrees with its target in every cloze slot
            "share_distractors_outside_cloze_slots": round(float(outside_only.mean()) if len(distractors) else 0.0, 4),
            "share_queries_coarse": round(len(coarse_targets(gallery)) / max(len(targets), 1), 4),
            "cloze_slots": list(CLOZE_SLOTS), "blind_attributes": list(BLIND_ATTRS),
            # queries whose target has a distractor differing only in what no expert reads (the landmark)
            "share_queries_with_blind_twin": round(len(twins) / max(len(targets), 1), 4)}


def blind_twins(gallery: pd.DataFrame) -> dict[int, int]:
    """Family (= a query's target) → item id of its blind twin: the distractor that differs from the
    target only in blind attributes (at most one per family by construction)."""
    seen = [a for a in ATTRS if a not in BLIND_ATTRS]
    targets = gallery[gallery["is_target"]].set_index("family")[seen]
    distractors = gallery[~gallery["is_target"]]
    same = (distractors[seen].to_numpy() == targets.loc[distractors["family"]].to_numpy()).all(1)
    return dict(zip(distractors["family"].to_numpy()[same].tolist(), distractors["item_id"].to_numpy()[same].tolist()))


def train_twin_share(train: pd.DataFrame) -> float:
    """Share of sim training families holding a blind twin of their base (the family's first item)."""
    seen = [a for a in ATTRS if a not in BLIND_ATTRS]
    fams = [(grp[seen].iloc[1:] == grp[seen].iloc[0]).all(axis=1).any() for _, grp in train.groupby("family", sort=False)]
    return round(float(np.mean(fams)), 4) if fams else 0.0


def coarse_targets(gallery: pd.DataFrame) -> set[int]:
    """Families (= queries' targets) whose every distractor agrees with the target in every cloze slot."""
    targets = gallery[gallery["is_target"]].set_index("family")[list(CLOZE_SLOTS)]
    distractors = gallery[~gallery["is_target"]]
    if distractors.empty:
        return set()
    same = (distractors[list(CLOZE_SLOTS)].to_numpy() == targets.loc[distractors["family"]].to_numpy()).all(1)
    per_family = pd.Series(same).groupby(distractors["family"].to_numpy()).all()
    return set(per_family.index[per_family.to_numpy()].tolist())


def blind_twin_targets(gallery: pd.DataFrame) -> set[int]:
    """Families (= queries' targets) with a blind twin in the gallery."""
    return set(blind_twins(gallery))


def items_frame(specs: list[ItemSpec], families: list[int], is_target: list[bool], captions: list[str],
                seeds: list[int]) -> pd.DataFrame:
    df = pd.DataFrame([s.as_dict() for s in specs], columns=list(ATTRS))
    df.insert(0, "is_target", is_target)
    df.insert(0, "family", np.asarray(families, dtype=np.int64))
    df.insert(0, "item_id", np.arange(len(specs), dtype=np.int64))
    df["caption"] = captions
    df["seed"] = np.asarray(seeds, dtype=np.int64)
    return df


def make_corpus(cfg: CorpusConfig, seed: int) -> dict[str, object]:
    """Everything the render stage writes: train/gallery tables and images, queries."""
    rng = np.random.default_rng(seed)
    # --- sim training families ---
    train_share = cfg.blind_twin_share if cfg.train_blind_twin_share is None else cfg.train_blind_twin_share
    fams = build_families(cfg.n_train_families, cfg.family_size, rng, set(), cfg.edit_weights, train_share)
    train_specs = [s for f in fams for s in f]
    train_family = [i for i, f in enumerate(fams) for _ in f]
    train_caps = [caption(s.person, rng, cfg.drop_scene_prob, s.light, s.weather, s.landmark) for s in train_specs]
    train_seeds = [int(x) for x in rng.integers(0, 2**31 - 1, len(train_specs))]
    train_df = items_frame(train_specs, train_family, [False] * len(train_specs), train_caps, train_seeds)
    # --- real-domain gallery and queries ---
    rows = build_gallery(cfg.n_targets, cfg.distractor_ratio, rng, cfg.edit_weights, cfg.blind_twin_share,
                         cfg.coarse_target_share)
    order = rng.permutation(len(rows))  # shuffle so targets are not the first items
    rows = [rows[i] for i in order]
    g_specs = [s for _, _, s in rows]
    g_seeds = [int(x) for x in rng.integers(0, 2**31 - 1, len(rows))]
    gallery_df = items_frame(g_specs, [f for f, _, _ in rows], [t for _, t, _ in rows], [""] * len(rows), g_seeds)
    target_items = {f: i for i, (f, t, _) in enumerate(rows) if t}
    q_specs = [rows[target_items[t]][2] for t in range(cfg.n_targets)]
    q_caps = [caption(s.person, rng, cfg.drop_scene_prob, s.light, s.weather, s.landmark) for s in q_specs]
    n_val = int(round(cfg.n_targets * cfg.val_fraction))
    split = np.array(["test"] * cfg.n_targets, dtype=object)
    split[rng.permutation(cfg.n_targets)[:n_val]] = "val"
    queries_df = pd.DataFrame({
        "query_id": np.arange(cfg.n_targets, dtype=np.int64),
        "target_item": np.array([target_items[t] for t in range(cfg.n_targets)], dtype=np.int64),
        "split": split.astype(str), "caption": q_caps,
    })
    train_images = render_items(train_specs, train_seeds, "sim", cfg.width, cfg.height, "render sim train")
    gallery_images = render_items(g_specs, g_seeds, "real", cfg.width, cfg.height, "render real gallery")
    return {"train": train_df, "gallery": gallery_df, "queries": queries_df,
            "train_images": train_images, "gallery_images": gallery_images}


def attribute_keys(df: pd.DataFrame) -> dict[str, np.ndarray]:
    """Per view, an integer key per item: two items match a view's text iff their keys are equal."""
    def key(cols: list[str]) -> np.ndarray:
        joined = df[cols].astype(str).agg("|".join, axis=1)
        return pd.factorize(joined)[0].astype(np.int64)

    action_key = np.where(df["action"].isin(["riding", "being_hit"]), df["action"] + ":" + df["object"], df["action"])
    tmp = df.assign(action_key=action_key)
    def key_tmp(cols: list[str]) -> np.ndarray:
        return pd.factorize(tmp[cols].astype(str).agg("|".join, axis=1))[0].astype(np.int64)

    # the structured view concatenates the facets: it never mentions a blind attribute (the landmark)
    return {"full": key(list(ATTRS)), "structured": key([a for a in ATTRS if a not in BLIND_ATTRS]), "appearance": key(["upper", "lower", "headwear", "bag"]),
            "action": key_tmp(["action_key"]), "object": key(["object"]), "scene": key(["scene", *CONDITIONS])}
