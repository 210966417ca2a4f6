"""The synthetic Sim2Real corpus: sim training families, a real-domain gallery with hard
distractors in the PAB proportion, and paragraph queries.

Hard distractors (as in PAB) share clothing, pose or scene with their target and
differ in *one* attribute — mostly the action or the object. Every attribute tuple in
the gallery is unique, so each query has exactly one relevant image (its target).
Training uses the same family construction (base + single-edit variants), rendered in
the *sim* domain, so the models see hard negatives without ever seeing a real image.
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
from paperworks.person_search.text import caption

ATTRS = ("upper", "lower", "headwear", "bag", "action", "object", "scene")
ATTR_VALUES = {"upper": COLOURS, "lower": COLOURS, "headwear": HEADWEAR, "bag": BAGS,
               "action": ACTIONS, "object": OBJECTS, "scene": SCENES}
# Which single edits a hard distractor makes, and how often (PAB: mostly action/object).
EDIT_WEIGHTS = {"action": 0.35, "object": 0.3, "upper": 0.1, "lower": 0.1, "scene": 0.08, "headwear": 0.04, "bag": 0.03}
PAB_TARGETS, PAB_DISTRACTORS = 1978, 34795

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


def random_spec(rng: np.random.Generator) -> PedestrianSpec:
    action = ACTIONS[int(rng.integers(len(ACTIONS)))]
    objects = [o for o in OBJECTS if is_consistent(action, o)]
    return PedestrianSpec(
        upper=COLOURS[int(rng.integers(len(COLOURS)))], lower=COLOURS[int(rng.integers(len(COLOURS)))],
        headwear=HEADWEAR[int(rng.integers(len(HEADWEAR)))], bag=BAGS[int(rng.integers(len(BAGS)))],
        action=action, object=objects[int(rng.integers(len(objects)))], scene=SCENES[int(rng.integers(len(SCENES)))],
    )


def single_edits(spec: PedestrianSpec) -> list[tuple[str, PedestrianSpec]]:
    """Every valid spec that differs from ``spec`` in exactly one attribute, with the edited attribute."""
    out = []
    base = spec.as_dict()
    for attr in ATTRS:
        for value in ATTR_VALUES[attr]:
            if value == base[attr]:
                continue
            d = dict(base, **{attr: value})
            if is_consistent(d["action"], d["object"]):
                out.append((attr, PedestrianSpec(**d)))
    return out


def hard_variants(spec: PedestrianSpec, n: int, rng: np.random.Generator, taken: set[PedestrianSpec]) -> list[PedestrianSpec]:
    """Up to ``n`` unused single-edit variants, drawn with the PAB-like edit weights."""
    edits = [(a, s) for a, s in single_edits(spec) if s not in taken]
    if not edits:
        return []
    weights = np.array([EDIT_WEIGHTS[a] / sum(1 for b, _ in edits if b == a) for a, _ in edits])
    k = min(n, len(edits))
    idx = rng.choice(len(edits), size=k, replace=False, p=weights / weights.sum())
    return [edits[i][1] for i in sorted(idx)]


def build_families(n_families: int, family_size: int, rng: np.random.Generator,
                   taken: set[PedestrianSpec]) -> list[list[PedestrianSpec]]:
    """Families of unique specs: a random base plus ``family_size − 1`` hard single-edit variants."""
    families = []
    while len(families) < n_families:
        base = random_spec(rng)
        if base in taken:
            continue
        taken.add(base)
        variants = hard_variants(base, family_size - 1, rng, taken)
        taken.update(variants)
        families.append([base, *variants])
    return families


def build_gallery(n_targets: int, distractor_ratio: float, rng: np.random.Generator) -> list[tuple[int, bool, PedestrianSpec]]:
    """(family = target index, is_target, spec) for targets and their hard distractors (PAB proportion)."""
    n_distractors = int(round(n_targets * distractor_ratio))
    # Spread the distractors evenly over targets (some get one more) to hit the exact proportion.
    per_target = np.full(n_targets, n_distractors // n_targets)
    per_target[rng.permutation(n_targets)[: n_distractors - per_target.sum()]] += 1
    taken: set[PedestrianSpec] = set()
    targets = []
    while len(targets) < n_targets:
        s = random_spec(rng)
        if s not in taken:
            taken.add(s)
            targets.append(s)
    rows = [(t, True, s) for t, s in enumerate(targets)]
    for t, s in enumerate(targets):
        variants = hard_variants(s, int(per_target[t]), rng, taken)
        while len(variants) < per_target[t]:  # neighbourhood used up: a random unused spec sharing the scene
            extra = random_spec(rng)
            extra = PedestrianSpec(**dict(extra.as_dict(), scene=s.scene))
            if extra not in taken:
                variants.append(extra)
        taken.update(variants)
        rows.extend((t, False, v) for v in variants)
    return rows


def render_items(specs: list[PedestrianSpec], seeds: list[int], domain: str, width: int, height: int, desc: str) -> np.ndarray:
    out = np.empty((len(specs), height, width, 3), dtype=np.uint8)
    for i, (s, seed) in enumerate(tqdm(list(zip(specs, seeds)), desc=desc, mininterval=2.0)):
        out[i] = render_pedestrian(s, seed, domain, width, height)
    return out


def items_frame(specs: list[PedestrianSpec], families: list[int], is_target: list[bool], captions: list[str],
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
    fams = build_families(cfg.n_train_families, cfg.family_size, rng, set())
    train_specs = [s for f in fams for s in f]
    train_family = [i for i, f in enumerate(fams) for _ in f]
    train_caps = [caption(s, rng, cfg.drop_scene_prob) for s in train_specs]
    train_seeds = [int(x) for x in rng.integers(0, 2**31 - 1, len(train_specs))]
    train_df = items_frame(train_specs, train_family, [False] * len(train_specs), train_caps, train_seeds)
    # --- real-domain gallery and queries ---
    rows = build_gallery(cfg.n_targets, cfg.distractor_ratio, rng)
    order = rng.permutation(len(rows))  # shuffle so targets are not the first items
    rows = [rows[i] for i in order]
    g_specs = [s for _, _, s in rows]
    g_seeds = [int(x) for x in rng.integers(0, 2**31 - 1, len(rows))]
    gallery_df = items_frame(g_specs, [f for f, _, _ in rows], [t for _, t, _ in rows], [""] * len(rows), g_seeds)
    target_items = {f: i for i, (f, t, _) in enumerate(rows) if t}
    q_caps = [caption(rows[target_items[t]][2], rng, cfg.drop_scene_prob) for t in range(cfg.n_targets)]
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

    full = key(list(ATTRS))
    return {"full": full, "structured": full, "appearance": key(["upper", "lower", "headwear", "bag"]),
            "action": key_tmp(["action_key"]), "object": key(["object"]), "scene": key(["scene"])}
