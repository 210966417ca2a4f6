"""Typed ``params.yaml:person_search`` section (validated before any stage does work)."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from paperworks.core.params import StrictModel

Backbone = Literal["cnn", "resnet", "vit"]
Schedule = Literal["one_cycle", "step_on_plateau"]
Epochs = Annotated[int, Field(ge=1, le=200)]
View = Literal["full", "structured", "appearance", "action", "object", "scene"]
EditAttr = Literal["upper", "lower", "headwear", "bag", "action", "object", "scene", "light", "weather"]


class DataParams(StrictModel):
    width: int = Field(48, ge=16, le=128)
    height: int = Field(64, ge=16, le=128)
    n_train_families: int = Field(ge=4, le=10_000)  # 10k families × 8 renders ≈ 0.7 GiB of images
    family_size: int = Field(8, ge=2, le=24)  # base + hard single-edit variants
    n_targets: int = Field(ge=8, le=1978)  # queries; PAB has 1,978
    distractor_ratio: float = Field(34795 / 1978, gt=0, le=40)  # PAB: 34,795 distractors / 1,978 targets
    val_fraction: float = Field(0.3, gt=0, lt=1)  # queries used to fit the consensus gate
    drop_scene_prob: float = Field(0.1, ge=0, le=1)  # captions that never mention the scene
    # which attribute a hard distractor changes, and how often (0 = never); scene, light and
    # weather lie outside every cloze slot
    edit_weights: dict[EditAttr, float]
    # share of targets (and of sim training families) with a *blind twin*: a distractor equal to the
    # target except for its landmark, which only the full caption mentions (no facet, cloze slot or
    # verifier checker reads it): queries where stage 1 can be right and the experts cannot tell
    blind_twin_share: float = Field(ge=0, le=1)
    # share of sim training families with a blind twin (null: blind_twin_share); training data only
    train_blind_twin_share: float | None = Field(None, ge=0, le=1)
    # share of targets (drawn among those without a blind twin) whose distractors all agree with them in
    # every cloze slot and differ only in scene, light and weather (single edits, then pairs): queries
    # the cloze expert cannot tell apart and stage 1 reads as global image properties (gallery only)
    coarse_target_share: float = Field(0.0, ge=0, le=1)

    @model_validator(mode="after")
    def _weights(self):
        if any(w < 0 for w in self.edit_weights.values()) or sum(self.edit_weights.values()) <= 0:
            raise ValueError("edit_weights must be ≥ 0 with a positive sum")
        if self.coarse_target_share + self.blind_twin_share > 1:
            raise ValueError("coarse_target_share + blind_twin_share must be ≤ 1 (coarse targets have no blind twin)")
        return self


class TextParams(StrictModel):
    batch_size: int = Field(64, ge=1, le=1024)
    # MiniLM inference precision: bfloat16 = CPU autocast (≈ 2.6× faster on AMX / AVX-512 BF16 CPUs,
    # cosine ≥ 0.9999 to float32); bfloat16_weights = a bfloat16 copy of the weights run directly
    # (≈ 1.2-1.4× faster again there, cosine ≥ 0.9999 to float32); both are slower than float32 on CPUs
    # without native bf16. int8_dynamic = int8 linear layers (any x86 CPU, ≈ 1.5× faster than float32
    # on AVX2, cosine to float32 ≈ 0.975 on average, ≥ 0.94 at worst on the track's captions).
    # int8_smooth = the same int8 layers after per-input-channel (SmoothQuant) scales calibrated on the
    # track's captions: as fast, cosine to float32 ≈ 0.9965 on average, ≥ 0.99 at worst (embed.int8_smooth_copy)
    precision: Literal["float32", "bfloat16", "bfloat16_weights", "int8_dynamic", "int8_smooth"] = "float32"


class StoppingParams(StrictModel):
    """Early stopping on held-out sim families: training runs until the held-out loss plateaus."""

    patience: int = Field(4, ge=1, le=100)  # held-out evaluations without improvement before stopping
    min_rel_delta: float = Field(0.01, ge=0, lt=1)  # an improvement smaller than this share of the best does not count
    evals_per_epoch: int = Field(2, ge=1, le=20)  # held-out evaluations (logged points) per epoch
    holdout_fraction: float = Field(0.1, gt=0, lt=0.5)  # sim families held out (never trained on)
    # stop only once the held-out curve also passes the evidence standard's convergence check
    # (evidence.convergence_tail / convergence_rel_tol / convergence_min_points; 0 = patience alone)
    plateau_tail: float = Field(0.0, ge=0, le=0.5)
    plateau_rel_tol: float = Field(0.05, gt=0, lt=1)
    min_evals: int = Field(0, ge=0, le=1000)


class EncoderParams(StrictModel):
    backbones: list[Backbone] = Field(min_length=1)
    embed_dim: int = Field(128, ge=8, le=1024)
    # the cap: early stopping (``stopping``) usually ends training first; one for all backbones or one per backbone
    epochs: Epochs | dict[Backbone, Epochs]
    stopping: StoppingParams
    families_per_batch: int = Field(8, ge=2, le=256)
    lr: float = Field(2e-3, gt=0, le=1)
    weight_decay: float = Field(1e-4, ge=0, le=1)
    temperature: float = Field(0.07, gt=0, le=1)
    full_view_prob: float = Field(0.5, ge=0, le=1)  # share of texts that are the full caption
    structured_view_prob: float = Field(0.2, ge=0, le=1)  # the rest are facet views
    augment: bool = False  # generic photometric jitter of sim images (never the real-domain transform)
    # one_cycle anneals only at the cap; step_on_plateau decays the rate each time the held-out loss stalls.
    # One schedule for every backbone, or one per backbone (a mapping that names every listed backbone)
    schedule: Schedule | dict[Backbone, Schedule] = "one_cycle"
    warmup_epochs: float = Field(1.0, ge=0, le=20)  # step_on_plateau: linear warm-up
    lr_decay: float = Field(0.3, gt=0, lt=1)  # step_on_plateau: the rate's factor at each stall
    lr_decays: int = Field(2, ge=0, le=10)  # step_on_plateau: stalls answered with a decay before one may stop

    @model_validator(mode="after")
    def _probs(self):
        if self.full_view_prob + self.structured_view_prob > 1:
            raise ValueError("full_view_prob + structured_view_prob must be ≤ 1")
        for key in ("schedule", "epochs"):
            value = getattr(self, key)
            if isinstance(value, dict) and (missing := [b for b in self.backbones if b not in value]):
                raise ValueError(f"{key} names no {key} for backbone(s) {missing} (backbones {self.backbones}; "
                                 f"give one {key} for all, or one per backbone)")
        return self

    def schedule_of(self, backbone: str) -> str:
        """The learning-rate schedule of one backbone's encoder."""
        return self.schedule[backbone] if isinstance(self.schedule, dict) else self.schedule

    def epochs_of(self, backbone: str) -> int:
        """The epoch cap of one backbone's encoder."""
        return self.epochs[backbone] if isinstance(self.epochs, dict) else self.epochs


class RetrievalParams(StrictModel):
    engine: Literal["faiss", "torch", "numpy"] = "faiss"
    branch_topk: int = Field(100, ge=10, le=2000)  # candidates each backbone × view branch returns


class FusionParams(StrictModel):
    anchor_views: list[View] = Field(default_factory=lambda: ["full", "structured"], min_length=1)
    view_weights: dict[View, float]
    clip: float = Field(3.0, gt=0)
    percentiles: tuple[float, float, float] = (10.0, 50.0, 90.0)  # low, centre, high of the per-query scaling
    agreement_weight: float = Field(1.0, ge=0)
    rrf_k: float = Field(10.0, gt=0)
    pool_size: int = Field(10, ge=2, le=100)  # candidates passed to the experts

    @model_validator(mode="after")
    def _check(self):
        lo, mid, hi = self.percentiles
        if not 0 <= lo < mid < hi <= 100:
            raise ValueError("percentiles must be increasing within [0, 100]")
        if not set(self.anchor_views) <= {"full", "structured"}:
            raise ValueError("anchor_views must be global caption views (full, structured)")
        if set(self.view_weights) != {"full", "structured", "appearance", "action", "object", "scene"}:
            raise ValueError("view_weights needs exactly the six views")
        return self


class ExpertParams(StrictModel):
    epochs: int = Field(ge=1, le=200)  # the cap: early stopping (``stopping``) usually ends training first
    stopping: StoppingParams
    families_per_batch: int = Field(8, ge=2, le=256)
    lr: float = Field(2e-3, gt=0, le=1)
    width: int = Field(32, ge=8, le=256)  # channels of the experts' small image encoders


class ConsensusParams(StrictModel):
    # how the gate measures the fused prediction's certainty (paperworks/person_search/consensus.py)
    # fitted: the kind is chosen on validation with the threshold (the highest validation mAP@10)
    confidence: Literal["margin", "entropy", "agreement", "fitted"] = "margin"


class EvalParams(StrictModel):
    contact_queries: int = Field(4, ge=1, le=20)  # queries on the before/after contact sheet


class Params(StrictModel):
    # independent training runs: every encoder, expert and everything downstream of them is
    # repeated per seed; claims comparing methods use the seeds as clusters (queries inside them)
    seeds: list[int] = Field(min_length=1, max_length=10)
    data: DataParams
    text: TextParams
    encoder: EncoderParams
    retrieval: RetrievalParams
    fusion: FusionParams
    experts: ExpertParams
    consensus: ConsensusParams
    eval: EvalParams
