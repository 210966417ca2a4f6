"""Typed ``params.yaml:video_qa`` section (validated before any stage does work)."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from paperworks.core.params import StrictModel

QType = Literal["global", "local", "temporal", "counting"]
QTYPES: tuple[str, ...] = ("global", "local", "temporal", "counting")
SizeName = Literal["small", "medium", "large"]


class WorldParams(StrictModel):
    """Scripted shape videos (``core.render.scene``) and the questions asked about them."""

    n_train_videos: int = Field(ge=2, le=5000)
    n_dev_videos: int = Field(ge=2, le=5000)   # τ and the temperature are chosen here only
    n_test_videos: int = Field(ge=2, le=5000)
    n_frames: int = Field(1200, ge=120, le=20_000)  # 10 min at 2 fps
    fps: float = Field(2.0, gt=0, le=30)
    size: int = Field(64, ge=32, le=128, description="frame height = width (pixels, multiple of 4)")
    n_events: int = Field(12, ge=4, le=200)
    event_frames: tuple[int, int] = (4, 8)  # 2–4 s at 2 fps
    n_visible: tuple[int, int] = (3, 4)     # objects on screen at frame 0 (inclusive); + 1 that enters later
    sizes: list[SizeName] = Field(default_factory=lambda: ["large"], min_length=1)
    questions_per_video: int = Field(3, ge=1, le=8)  # dev and test videos
    train_all_candidates: bool = Field(True, description="training videos give every question their script allows")
    mix: dict[QType, float] = Field(default_factory=lambda: {"global": 0.4, "local": 0.3, "temporal": 0.15, "counting": 0.15})

    @model_validator(mode="after")
    def _check(self) -> "WorldParams":
        if self.size % 4:
            raise ValueError(f"size={self.size}: must be a multiple of 4 (the encoder's patch)")
        lo, hi = self.event_frames
        if not 1 <= lo <= hi:
            raise ValueError(f"event_frames={self.event_frames}: need 1 ≤ low ≤ high")
        if self.n_events * hi >= self.n_frames:
            raise ValueError(f"n_events={self.n_events} events of up to {hi} frames do not fit n_frames={self.n_frames}")
        if not 1 <= self.n_visible[0] <= self.n_visible[1] <= 4:
            raise ValueError(f"n_visible={self.n_visible}: need 1 ≤ low ≤ high ≤ 4 (five distinct shapes, one enters later)")
        if set(self.mix) != set(QTYPES) or any(v < 0 for v in self.mix.values()):
            raise ValueError(f"mix: needs a share ≥ 0 for each of {', '.join(QTYPES)} (got {sorted(self.mix)})")
        if abs(sum(self.mix.values()) - 1.0) > 1e-6:
            raise ValueError(f"mix: shares must sum to 1 (got {sum(self.mix.values()):.4f})")
        return self


class EncoderParams(StrictModel):
    """Patchify frame encoder pre-trained on per-frame truth, then frozen; embeddings cached."""

    widths: list[int] = Field(default_factory=lambda: [16, 32, 64], min_length=2, max_length=4)
    strides: list[int] = Field(default_factory=lambda: [2, 2], min_length=1, max_length=3,
                               json_schema_extra={"repeats": True}, description="one per width after the first")
    embed_dim: int = Field(64, ge=8, le=512)
    pretrain_frames: int = Field(ge=64, le=500_000)  # truth-labelled frames …
    pretrain_scenes: int = Field(2000, ge=1, le=100_000)  # … spread over this many scenes of their own
    heldout_scenes: int = Field(200, ge=1, le=10_000, description=(
        "more scenes of their own, never trained on (as many frames each): their loss is the curve the plateau check reads"))
    steps: int = Field(ge=10, le=200_000)
    batch_size: int = Field(64, ge=4, le=1024)
    lr: float = Field(2e-3, gt=0, le=1)
    log_every: int = Field(25, ge=1, le=10_000)

    @model_validator(mode="after")
    def _strides(self) -> "EncoderParams":
        if len(self.strides) != len(self.widths) - 1 or not all(1 <= s <= 4 for s in self.strides):
            raise ValueError(f"strides {self.strides}: need one stride in 1..4 per width after the first ({len(self.widths) - 1})")
        return self


class AnswererParams(StrictModel):
    """Option features read off the queried shape's probe track → a small MLP per question type (no tool-use data)."""

    hidden: int = Field(16, ge=1, le=256, description="width of each question type's option scorer")
    steps: int = Field(ge=10, le=200_000)
    batch_size: int = Field(64, ge=4, le=1024)
    lr: float = Field(2e-3, gt=0, le=1)
    window_view_share: float = Field(0.5, ge=0, le=1, description="training batches that see a dense clip instead of the uniform frames")
    evidence_clip_share: float = Field(0.5, ge=0, le=1, description="dense clips that contain the question's event (plain clip QA)")
    log_every: int = Field(25, ge=1, le=10_000)


class ScorerParams(StrictModel):
    """Per-frame relevance of a frame to a question, trained on frame-level truth."""

    hidden: int = Field(64, ge=8, le=512)
    steps: int = Field(ge=10, le=200_000)
    batch_size: int = Field(256, ge=8, le=4096)
    lr: float = Field(2e-3, gt=0, le=1)
    log_every: int = Field(25, ge=1, le=10_000)


class PipelineParams(StrictModel):
    """CADER: stage 1 global pass; stage 2 grounding → crop → check → reflection → RGR → answer."""

    global_frames: int = Field(64, ge=4, le=1024)   # stage 1: uniform frames over the whole video
    window_frames: int = Field(32, ge=4, le=1024)   # a crop at full rate
    max_rounds: int = Field(3, ge=1, le=10)         # R: reflection rounds (1 = no reflection)
    resample_frames: int = Field(64, ge=0, le=4096)  # RGR: new frames per reflection round
    segments: int = Field(16, ge=2, le=512)          # RGR's frame-rate map resolution
    relevance_threshold: float = Field(0.5, gt=0, lt=1)  # the crop passes the check when its peak relevance ≥ this …
    check_precision: float | None = Field(0.5, gt=0, lt=1, description=(
        "… unless set: then the threshold is the lowest relevance at which, over every frame of the dev "
        "videos, at least this share of frames is inside the question's evidence span (fitted on dev)"))
    rgr_floor: float = Field(0.1, ge=0, le=1, description="share of resampled frames spread uniformly (the rest ∝ relevance)")


class GateParams(StrictModel):
    paper_tau: float = Field(0.97, ge=0, le=1)  # CADER's τ, reported beside the dev-chosen one
    sweep_points: int = Field(101, ge=3, le=10_001)  # τ grid of the accuracy-vs-τ plot
    reliability_bins: int = Field(10, ge=2, le=100)


class CostParams(StrictModel):
    """The CPU-ms model of a question (measured by benchmarks/video_qa_speed.py, one thread)."""

    ms_per_frame: float = Field(0.18, gt=0, le=1000, description="render + encode one frame")
    ms_per_call: float = Field(0.5, gt=0, le=1000, description="one answerer or scorer forward on one question")


class ClaimsParams(StrictModel):
    min_local_gain: float = Field(0.20, ge=0, le=1)     # oracle window vs global pass, local questions
    min_crop_cost: float = Field(0.10, ge=0, le=1)      # global pass vs a cropped window, global questions
    min_rel_improvement: float = Field(0.05, ge=0, le=1)  # a training loss must leave its start by this much


class Params(StrictModel):
    # Training draws of the answerer and the scorer: stages video_qa_train@<seed> and video_qa_infer@<seed>, and the
    # clusters of every claim (the policies share one draw's models, so only repeating the draw shows training
    # variance). The encoder is one draw, frozen, as the paper's pretrained backbone is.
    seeds: list[int] = Field(min_length=1, max_length=20)
    world: WorldParams
    encoder: EncoderParams
    answerer: AnswererParams
    scorer: ScorerParams
    pipeline: PipelineParams = PipelineParams()
    gate: GateParams = GateParams()
    cost: CostParams = CostParams()
    claims: ClaimsParams = ClaimsParams()

    @model_validator(mode="after")
    def _fits(self) -> "Params":
        n = self.world.n_frames
        if self.pipeline.global_frames > n or self.pipeline.window_frames > n:
            raise ValueError(f"pipeline.global_frames ({self.pipeline.global_frames}) and window_frames "
                             f"({self.pipeline.window_frames}) must be ≤ world.n_frames ({n})")
        if self.pipeline.segments > n:
            raise ValueError(f"pipeline.segments ({self.pipeline.segments}) must be ≤ world.n_frames ({n})")
        return self
