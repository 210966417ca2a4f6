"""The synthetic world: x-ray-like and pathology-like cases with lesions in four named regions.

Why fusion is needed, by construction: a *small* lesion is a zero-mean texture (checkerboard or
stripes) on 2 × 2-aligned pixels, so the foundation encoder's 2× coarse view (2 × 2 block means)
loses it up to noise and rounding, while a specialist at full resolution sees it. *Large* lesions shift
the mean and are visible to both. Everything is synthetic; no claim is clinical.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from paperworks.core.seeding import derive_seed
from paperworks.encoder_fusion.params import MODALITIES, WorldParams

REGIONS: dict[str, tuple[str, ...]] = {
    "xray": ("right upper zone", "left upper zone", "right lower zone", "left lower zone"),   # region r = 2·row + col
    "path": ("upper left field", "upper right field", "lower left field", "lower right field"),
}
TYPES: dict[str, tuple[str, ...]] = {"xray": ("nodule", "opacity"), "path": ("atypical nuclei", "necrosis")}
SIZES = ("small", "large")
QTYPES = ("presence", "type", "size")
ANSWERS = ("no", "yes", "none", "nodule", "opacity", "atypical nuclei", "necrosis", "small", "large")
N_DENSE = 5  # specialist cell classes: none, then (type, size) pairs


@dataclass(frozen=True)
class Finding:
    region: str
    type: str
    size: str
    severity: int

    def key(self) -> tuple[str, str]:
        return (self.region, self.type)


@dataclass(frozen=True)
class Case:
    case_id: str
    modality: str
    split: str
    findings: tuple[Finding, ...]
    roi: str                     # the region the clinical context names

    def context(self) -> str:
        return f"Clinical context: assess the {self.roi}."

    def to_record(self) -> dict:
        return {"case_id": self.case_id, "modality": self.modality, "split": self.split, "roi": self.roi,
                "findings": [asdict(f) for f in self.findings]}

    @staticmethod
    def from_record(r: dict) -> "Case":
        return Case(r["case_id"], r["modality"], r["split"], tuple(Finding(**f) for f in r["findings"]), r["roi"])


def severity(type_index: int, size: str) -> int:
    """Large lesions weigh more; the first type of each modality (nodule, atypical nuclei) more than the second."""
    return (2 if size == "large" else 1) + (1 if type_index == 0 else 0)


def _background(rng: np.random.Generator, modality: str, s: int) -> np.ndarray:
    yy, xx = np.mgrid[0:s, 0:s] / s
    if modality == "xray":  # two darker lung fields and a brighter heart shadow on a grey chest
        img = np.full((s, s), 120.0)
        for cx in (0.28, 0.72):
            lung = ((xx - cx) / 0.2) ** 2 + ((yy - 0.5) / 0.4) ** 2 < 1
            img[lung] -= 35 + rng.uniform(-5, 5)
        img += 25 * np.exp(-(((xx - 0.55) / 0.12) ** 2 + ((yy - 0.7) / 0.12) ** 2))
    else:  # tissue: smooth random blobs
        img = np.full((s, s), 130.0)
        for _ in range(6):
            cx, cy, r = rng.uniform(0, 1), rng.uniform(0, 1), rng.uniform(0.08, 0.2)
            img += rng.uniform(-20, 20) * np.exp(-(((xx - cx) ** 2 + (yy - cy) ** 2) / r ** 2))
    return img


def _draw_lesion(img: np.ndarray, rng: np.random.Generator, region: int, type_index: int, size: str, amp: float) -> tuple[int, int, int, int]:
    """Draw one lesion inside its region; returns its pixel box (y0, x0, y1, x1)."""
    s = img.shape[0]
    half = s // 2
    ry, rx = divmod(region, 2)
    if size == "small":  # zero-mean texture on a 2×2-aligned s/8 square: gone in the 2× coarse view
        w = s // 8
        y0 = ry * half + 2 * rng.integers(1, (half - w) // 2)
        x0 = rx * half + 2 * rng.integers(1, (half - w) // 2)
        yy, xx = np.mgrid[0:w, 0:w]
        pattern = np.where((yy + xx) % 2 == 0, 1.0, -1.0) if type_index == 0 else np.where(yy % 2 == 0, 1.0, -1.0)
        img[y0:y0 + w, x0:x0 + w] += amp * pattern
        return (y0, x0, y0 + w, x0 + w)
    r = s // 10 if type_index == 0 else s // 7          # a bright compact disc, or a broad faint opacity
    cy = ry * half + rng.integers(r + 1, half - r - 1)
    cx = rx * half + rng.integers(r + 1, half - r - 1)
    yy, xx = np.mgrid[0:s, 0:s]
    d2 = ((yy - cy) ** 2 + (xx - cx) ** 2) / r ** 2
    img += (amp * (d2 < 1)) if type_index == 0 else (0.6 * amp * np.exp(-d2))
    return (cy - r, cx - r, cy + r + 1, cx + r + 1)


def render_case(seed: int, modality: str, p: WorldParams) -> tuple[np.ndarray, tuple[Finding, ...], str, np.ndarray]:
    """One case from its seed: (uint8 S×S×3 image, findings, RoI region, dense cell labels g×g with g = S/16)."""
    if modality not in MODALITIES:
        raise ValueError(f"modality '{modality}': allowed {', '.join(MODALITIES)}")
    rng = np.random.default_rng(seed)
    s, g = p.size, p.size // 16
    img = _background(rng, modality, s)
    n = int(rng.integers(0, p.max_lesions + 1))
    regions = rng.choice(4, size=n, replace=False)
    findings, dense = [], np.zeros((g, g), dtype=np.int64)
    for region in sorted(int(r) for r in regions):
        t = int(rng.integers(0, 2))
        size = "small" if rng.random() < p.small_share else "large"
        y0, x0, y1, x1 = _draw_lesion(img, rng, region, t, size, float(p.contrast))
        cls = 1 + 2 * t + (size == "large")
        cell = s // g
        for cy in range(max(0, y0 // cell), min(g, -(-y1 // cell))):
            for cx in range(max(0, x0 // cell), min(g, -(-x1 // cell))):
                dense[cy, cx] = cls
        findings.append(Finding(REGIONS[modality][region], TYPES[modality][t], size, severity(t, size)))
    img += rng.normal(0, p.noise, img.shape)
    gray = np.clip(np.rint(img), 0, 255)
    if modality == "xray":
        rgb = np.stack([gray, gray, gray], axis=-1)
    else:  # an H&E-like tint (affine per channel, so block means still cancel the small textures)
        rgb = np.stack([gray, 0.6 * gray + 30, 0.8 * gray + 40], axis=-1)
    image = np.clip(np.rint(rgb), 0, 255).astype(np.uint8)
    lesion_regions = [f.region for f in findings]
    if lesion_regions and rng.random() < p.roi_on_lesion:
        roi = lesion_regions[int(rng.integers(0, len(lesion_regions)))]
    else:
        roi = REGIONS[modality][int(rng.integers(0, 4))]
    return image, tuple(findings), roi, dense


def coarse_view(images: np.ndarray) -> np.ndarray:
    """The foundation encoder's input: 2 × 2 block means (N×S×S×3 → N×S/2×S/2×3, uint8)."""
    n, s, _, c = images.shape
    blocks = images.reshape(n, s // 2, 2, s // 2, 2, c).astype(np.float32).mean(axis=(2, 4))
    return np.rint(blocks).astype(np.uint8)


def build_world(p: WorldParams, seed: int) -> tuple[list[Case], np.ndarray, np.ndarray]:
    """Every case of every split and modality, in a fixed order: (cases, images N×S×S×3, dense N×g×g)."""
    cases, images, dense = [], [], []
    for split, n in (("train", p.n_train), ("dev", p.n_dev), ("test", p.n_test)):
        for modality in MODALITIES:
            for i in range(n):
                img, findings, roi, d = render_case(derive_seed(seed, "encoder_fusion", "case", modality, split, i), modality, p)
                cases.append(Case(f"{modality}-{split}-{i:05d}", modality, split, findings, roi))
                images.append(img)
                dense.append(d)
    return cases, np.stack(images), np.stack(dense)


def caption(case: Case) -> str:
    """The finding sentence the foundation encoder is aligned to (every finding, region order)."""
    if not case.findings:
        return f"{case.modality}: no abnormal finding."
    return f"{case.modality}: " + "; ".join(f"{f.size} {f.type} in the {f.region}" for f in case.findings) + "."


def question_text(modality: str, qtype: str, region: str) -> str:
    word = "x-ray" if modality == "xray" else "slide"
    return {"presence": f"On this {word}, is there a lesion in the {region}?",
            "type": f"On this {word}, what lesion is in the {region}?",
            "size": f"On this {word}, how large is the lesion in the {region}?"}[qtype]


def questions(case: Case) -> list[dict]:
    """Every (region, question type) of a case, with its answer index into :data:`ANSWERS`."""
    by_region = {f.region: f for f in case.findings}
    out = []
    for region in REGIONS[case.modality]:
        f = by_region.get(region)
        for qtype in QTYPES:
            if qtype == "presence":
                answer = "yes" if f else "no"
            elif qtype == "type":
                answer = f.type if f else "none"
            else:
                answer = f.size if f else "none"
            out.append({"case_id": case.case_id, "modality": case.modality, "qtype": qtype, "region": region,
                        "small": bool(f and f.size == "small"), "text": question_text(case.modality, qtype, region),
                        "answer": ANSWERS.index(answer)})
    return out
