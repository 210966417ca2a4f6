"""Comparison 2: CT-like volumes, 2D-anchored depth-aware fusion vs k sampled slices vs a 3D encoder.

World (deterministic from the seed): a volume is ``depth`` slices of ``size × size`` (uint8) — a body
ellipse whose brightness drifts slowly along depth, and 0..``max_lesions`` lesions in distinct named
in-plane regions (the four quadrants). A lesion is a disc (bright ``nodule`` or dark ``cyst``) that
spans 1, 2 or 3 consecutive slices (uniform); a *thin* lesion spans one slice. Questions per volume:
for every region, presence (no / yes) and type (none / nodule / cyst).

Arms — every one is trained end to end from the same seed with the same steps, data and VQA head
(region-grounded: the max over a region's tokens at every depth the arm has, read with the question type):

- ``sampled``:   the 2D slice encoder on ``k_slices`` evenly spaced slices (first and last included);
                 tokens = k × g² cells, + depth (true slice index) and cell embeddings.
- ``anchored``:  the same 2D slice encoder on *every* slice (2D anchor tokens), made depth-aware by a
                 zero-gated 3 × 3 × 3 convolution over the stacked token volume:
                 h = h2d + tanh(gate) · Conv3d(h2d), gate = 0 at the start; + depth and cell embeddings.
- ``encoder3d``: a 3D patchify encoder on the whole volume (depth patch 1) with its own projector.

Everything is synthetic; no claim is clinical.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from paperworks.core.io import ArtifactError, load_safetensors, read_json
from paperworks.core.seeding import derive_seed
from paperworks.core.vision.encoders import EncoderConfig, PatchifyEncoder2D, PatchifyEncoder3D
from paperworks.encoder_fusion.models import patience_spent
from paperworks.encoder_fusion.params import VOLUME_ARMS, VolumeParams

VOLUME_REGIONS = ("right upper lobe", "left upper lobe", "right lower lobe", "left lower lobe")  # r = 2·row + col
VOLUME_TYPES = ("nodule", "cyst")
VOLUME_QTYPES = ("presence", "type")
VOLUME_ANSWERS = ("no", "yes", "none", "nodule", "cyst")
N_QUESTIONS = len(VOLUME_REGIONS) * len(VOLUME_QTYPES)   # question id q = 2·region + qtype


@dataclass(frozen=True)
class Lesion:
    region: str
    type: str
    z0: int        # first slice
    span: int      # slices (1–3); thin = 1

    @property
    def thin(self) -> bool:
        return self.span == 1


@dataclass(frozen=True)
class VolumeCase:
    case_id: str
    split: str
    lesions: tuple[Lesion, ...]

    def to_record(self) -> dict:
        return {"case_id": self.case_id, "split": self.split, "lesions": [asdict(x) for x in self.lesions]}

    @staticmethod
    def from_record(r: dict) -> "VolumeCase":
        return VolumeCase(r["case_id"], r["split"], tuple(Lesion(**x) for x in r["lesions"]))


def sampled_slices(depth: int, k: int) -> np.ndarray:
    """The ``k`` evenly spaced slice indices the sampled arm sees (first and last included, distinct)."""
    idx = np.unique(np.rint(np.linspace(0, depth - 1, k)).astype(int))
    if len(idx) != k:
        raise ValueError(f"k_slices={k}: not {k} distinct slices in depth={depth}")
    return idx


def render_volume(seed: int, p: VolumeParams) -> tuple[np.ndarray, tuple[Lesion, ...]]:
    """One volume from its seed: (uint8 D × S × S, lesions)."""
    rng = np.random.default_rng(seed)
    d, s = p.depth, p.size
    yy, xx = np.mgrid[0:s, 0:s] / s
    body = (((xx - 0.5) / 0.45) ** 2 + ((yy - 0.5) / 0.4) ** 2) < 1
    drift = 8 * np.sin(np.linspace(0, np.pi, d) + rng.uniform(0, np.pi))
    vol = np.full((d, s, s), 60.0) + (body[None] * (60.0 + drift[:, None, None]))
    n = int(rng.integers(0, p.max_lesions + 1))
    lesions = []
    half, r = s // 2, max(2, s // 8)
    py, px = np.mgrid[0:s, 0:s]
    for region in sorted(int(x) for x in rng.choice(4, size=n, replace=False)):
        t = int(rng.integers(0, 2))
        span = int(rng.integers(1, 4))
        z0 = int(rng.integers(0, d - span + 1))
        ry, rx = divmod(region, 2)
        cy = ry * half + int(rng.integers(r + 1, half - r))
        cx = rx * half + int(rng.integers(r + 1, half - r))
        disc = ((py - cy) ** 2 + (px - cx) ** 2) < r * r
        vol[z0:z0 + span][:, disc] += p.contrast if t == 0 else -p.contrast
        lesions.append(Lesion(VOLUME_REGIONS[region], VOLUME_TYPES[t], z0, span))
    vol += rng.normal(0, p.noise, vol.shape)
    return np.clip(np.rint(vol), 0, 255).astype(np.uint8), tuple(lesions)


def build_volumes(p: VolumeParams, seed: int) -> tuple[list[VolumeCase], np.ndarray]:
    """Every volume of every split in a fixed order: (cases, volumes N × D × S × S uint8)."""
    cases, vols = [], []
    for split, n in (("train", p.n_train), ("dev", p.n_dev), ("test", p.n_test)):
        for i in range(n):
            v, lesions = render_volume(derive_seed(seed, "encoder_fusion", "volume", split, i), p)
            cases.append(VolumeCase(f"ct-{split}-{i:05d}", split, lesions))
            vols.append(v)
    return cases, np.stack(vols)


def answers(case: VolumeCase) -> np.ndarray:
    """Answer index (into :data:`VOLUME_ANSWERS`) of each of the ``N_QUESTIONS`` questions."""
    by_region = {x.region: x for x in case.lesions}
    out = []
    for region in VOLUME_REGIONS:
        les = by_region.get(region)
        out += [VOLUME_ANSWERS.index("yes" if les else "no"), VOLUME_ANSWERS.index(les.type if les else "none")]
    return np.array(out, dtype=np.int64)


def thin_missed_share(cases: list[VolumeCase], depth: int, k: int) -> tuple[float, int]:
    """Share of thin (1-slice) lesions with no slice among the sampled ones, and their count."""
    seen = set(sampled_slices(depth, k).tolist())
    thin = [x for c in cases for x in c.lesions if x.thin]
    if not thin:
        return float("nan"), 0
    return float(np.mean([x.z0 not in seen for x in thin])), len(thin)


# ------------------------------------------------------------------ artifacts
def read_volumes(root: Path, p: VolumeParams) -> tuple[list[VolumeCase], np.ndarray]:
    """(cases, volumes); anything that does not fit the params is an ``ArtifactError`` naming the file and key."""
    path = root / "volumes.safetensors"
    arrays = load_safetensors(path)
    if set(arrays) != {"volumes"}:
        raise ArtifactError(f"{path}: expected the tensor 'volumes' (got {sorted(arrays)})")
    vols = arrays["volumes"]
    if vols.dtype != torch.uint8 or vols.ndim != 4 or tuple(vols.shape[1:]) != (p.depth, p.size, p.size):
        raise ArtifactError(f"{path}: 'volumes' must be uint8 N × {p.depth} × {p.size} × {p.size} "
                            f"(got {vols.dtype} {tuple(vols.shape)})")
    records = read_json(root / "cases.json")
    if not isinstance(records, list) or len(records) != len(vols):
        raise ArtifactError(f"{root / 'cases.json'}: {len(records) if isinstance(records, list) else 'no'} cases "
                            f"but {len(vols)} volumes in {path}")
    try:
        cases = [VolumeCase.from_record(r) for r in records]
    except (KeyError, TypeError) as e:
        raise ArtifactError(f"{root / 'cases.json'}: malformed case record ({e!r})") from None
    for c in cases:
        for x in c.lesions:
            if x.region not in VOLUME_REGIONS or x.type not in VOLUME_TYPES or not (1 <= x.span <= 3 and 0 <= x.z0 <= p.depth - x.span):
                raise ArtifactError(f"{root / 'cases.json'}: case {c.case_id} has an impossible lesion {x}")
    return cases, vols.numpy()


# ------------------------------------------------------------------ models
class VolumeVQA(nn.Module):
    """One arm: volume → token volume → projector + depth embedding → region max-pool → answer per question."""

    def __init__(self, arm: str, p: VolumeParams) -> None:
        super().__init__()
        if arm not in VOLUME_ARMS:
            raise ValueError(f"arm '{arm}': allowed {', '.join(VOLUME_ARMS)}")
        self.arm, d, c = arm, p.d_model, p.widths[-1]
        if arm == "encoder3d":
            self.encoder = PatchifyEncoder3D(EncoderConfig(in_channels=1, widths=tuple(p.widths), strides=(2, 2),
                                                           embed_dim=c, depth_patch=1))
            depth_tokens = p.depth // 4
        else:
            self.encoder = PatchifyEncoder2D(EncoderConfig(in_channels=1, widths=tuple(p.widths), strides=(2, 2), embed_dim=c))
            depth_tokens = p.depth
        if arm == "sampled":
            self.register_buffer("slices", torch.from_numpy(sampled_slices(p.depth, p.k_slices)), persistent=False)
        if arm == "anchored":
            self.depth_conv = nn.Conv3d(c, c, 3, padding=1)
            self.gate = nn.Parameter(torch.zeros(1))
        self.proj = nn.Linear(c, d)
        self.depth_pos = nn.Parameter(torch.randn(depth_tokens, 1, 1, d) * 0.02)
        self.qtype = nn.Embedding(len(VOLUME_QTYPES), d)
        self.out = nn.Sequential(nn.Linear(2 * d, d), nn.GELU(), nn.Linear(d, len(VOLUME_ANSWERS)))

    def tokens(self, vol: torch.Tensor) -> torch.Tensor:
        """uint8 B × D × S × S → token volume B × n × g × g × d (n = slices seen, or D/4 for the 3D encoder)."""
        x = vol.float().div(255.0)
        b = x.shape[0]
        if self.arm == "encoder3d":
            fmap = self.encoder.forward_features(x[:, None])                       # B × C × D/4 × g × g
            depth_idx = torch.arange(fmap.shape[2])
        else:
            depth_idx = self.slices if self.arm == "sampled" else torch.arange(x.shape[1])
            x = x[:, depth_idx]
            n = x.shape[1]
            f2 = self.encoder.forward_features(x.reshape(b * n, 1, *x.shape[2:]))   # (B·n) × C × g × g
            fmap = f2.reshape(b, n, *f2.shape[1:]).transpose(1, 2)                  # B × C × n × g × g
            if self.arm == "anchored":
                fmap = fmap + torch.tanh(self.gate) * self.depth_conv(fmap)
        return self.proj(fmap.permute(0, 2, 3, 4, 1)) + self.depth_pos[depth_idx]

    def forward(self, vol: torch.Tensor) -> torch.Tensor:
        """Logits of every question of every volume: B × N_QUESTIONS × answers (q = 2·region + qtype).

        The head is region-grounded and the same for every arm: a region's vector is the max over the
        tokens of its quadrant at every depth the arm has (GELU first), read with the question type."""
        h = F.gelu(self.tokens(vol))                                                 # B × n × g × g × d
        g = h.shape[2] // 2
        regions = torch.stack([h[:, :, ry * g:(ry + 1) * g, rx * g:(rx + 1) * g].amax(dim=(1, 2, 3))
                               for ry in range(2) for rx in range(2)], dim=1)        # B × 4 × d (region r = 2·row + col)
        b, d = regions.shape[0], regions.shape[-1]
        reg = regions[:, :, None].expand(b, 4, len(VOLUME_QTYPES), d)
        qt = self.qtype.weight[None, None].expand(b, 4, -1, -1)
        return self.out(torch.cat([reg, qt], dim=-1)).flatten(1, 2)

    def gates(self) -> dict[str, float]:
        return {"gate_depth": torch.tanh(self.gate).item()} if self.arm == "anchored" else {}


@torch.no_grad()
def predict_volumes(model: VolumeVQA, vols: np.ndarray, batch: int = 64) -> torch.Tensor:
    model.eval()
    out = [model(torch.from_numpy(vols[i:i + batch])) for i in range(0, len(vols), batch)]
    return torch.cat(out) if out else torch.zeros(0, N_QUESTIONS, len(VOLUME_ANSWERS))


def train_volume(model: VolumeVQA, train_vols: np.ndarray, train_ans: np.ndarray, dev_vols: np.ndarray, dev_ans: np.ndarray,
                 p: VolumeParams, seed: int) -> list[dict]:
    """AdamW + cosine; dev loss / accuracy every ``log_every`` steps (the plateau curve); ends at the
    best dev-accuracy checkpoint (earliest on ties, marked ``selected``). With ``p.patience`` set, training stops once
    that many steps pass without a better dev accuracy (the schedule stays the one of ``p.steps``), as the heads do."""
    rng = np.random.default_rng(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=p.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, s / p.steps))))
    dev_t, train_t = torch.from_numpy(dev_ans), torch.from_numpy(train_ans)
    history, best, best_state = [], -1.0, None
    for step in range(p.steps + 1):
        if step % p.log_every == 0 or step == p.steps:
            logits = predict_volumes(model, dev_vols)
            acc = float((logits.argmax(-1) == dev_t).float().mean())
            history.append({"step": step, "dev_loss": float(F.cross_entropy(logits.flatten(0, 1), dev_t.flatten())),
                            "dev_accuracy": acc, **model.gates(), "selected": False})
            if acc > best:
                best, best_state = acc, {k: v.detach().clone() for k, v in model.state_dict().items()}
                for row in history:
                    row["selected"] = row is history[-1]
            model.train()
        if step == p.steps or patience_spent(history, step, p.patience):
            break
        idx = rng.choice(len(train_vols), size=min(p.batch_size, len(train_vols)), replace=False)
        logits = model(torch.from_numpy(train_vols[idx]))
        loss = F.cross_entropy(logits.flatten(0, 1), train_t[idx].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
    model.load_state_dict(best_state)
    return history


def question_frame(cases: list[VolumeCase]) -> pd.DataFrame:
    """One row per (test volume, question): key, region, qtype, answer, whether its region holds a thin lesion."""
    rows = []
    for c in cases:
        by_region = {x.region: x for x in c.lesions}
        ans = answers(c)
        for r, region in enumerate(VOLUME_REGIONS):
            les = by_region.get(region)
            for t, qtype in enumerate(VOLUME_QTYPES):
                rows.append({"case_id": c.case_id, "key": f"{c.case_id}|{qtype}|{region}", "region": region, "qtype": qtype,
                             "answer": int(ans[2 * r + t]), "span": les.span if les else 0})
    return pd.DataFrame(rows)


def run_arm(arm: str, seed_index: int, seed: int, cases: list[VolumeCase], vols: np.ndarray,
            p: VolumeParams) -> tuple[pd.DataFrame, list[dict]]:
    """Train one arm from ``seed``; return its test predictions (one row per question) and its dev curve."""
    split = np.array([c.split for c in cases])
    ans = np.stack([answers(c) for c in cases])
    torch.manual_seed(seed)
    model = VolumeVQA(arm, p)
    history = train_volume(model, vols[split == "train"], ans[split == "train"], vols[split == "dev"], ans[split == "dev"], p, seed)
    test_cases = [c for c in cases if c.split == "test"]
    pred = predict_volumes(model, vols[split == "test"]).argmax(-1).numpy().ravel()
    out = question_frame(test_cases).assign(arm=arm, seed=seed_index, pred=pred)
    out["correct"] = (out["answer"] == out["pred"]).astype(float)
    return out, history
