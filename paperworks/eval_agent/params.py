"""Typed ``params.yaml:eval_agent`` section (validated before any stage does work)."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from paperworks.core.params import StrictModel

Dim = Literal["colour", "presence", "count", "spatial", "quality"]
DIMS: tuple[str, ...] = ("colour", "presence", "count", "spatial", "quality")
# The text-to-video suite's dimensions: VBench's 16 less the two with no honest procedural analogue here
# (aesthetic_quality: a learned human-preference predictor; temporal_style: camera motion, and the renderer has no
# camera); human_action becomes object_action (the subject's requested motion). See docs/tracks/eval_agent.md.
VDim = Literal["subject_consistency", "background_consistency", "temporal_flickering", "motion_smoothness", "dynamic_degree",
               "imaging_quality", "object_class", "multiple_objects", "object_action", "colour", "spatial_relationship",
               "scene", "appearance_style", "overall_consistency"]
VDIMS: tuple[str, ...] = VDim.__args__  # type: ignore[attr-defined]


class ZooParams(StrictModel):
    """The generator zoo and the benchmark's prompt pools (T2I-CompBench-like, one pool per dimension)."""

    n_per_family: int = Field(4, ge=1, le=50, description="in-family generators of each known family (A flat, B textured)")
    n_held_out: int = Field(2, ge=1, le=50, description="generators of the held-out family C (flat + shading)")
    n_population: int = Field(30, ge=5, le=1000, description="extra A/B generators that only build the five-level reference tables")
    dims: list[Dim] = Field(default_factory=lambda: list(DIMS), min_length=1)
    prompts_per_dim: int = Field(100, ge=4, le=5000)
    samples_per_prompt: int = Field(4, ge=1, le=20)
    image_size: Literal[64] = 64
    noise_max: float = Field(28.0, gt=0, le=80, description="largest per-pixel noise std a generator draws (pixel units)")
    quality_threshold: float = Field(12.0, gt=0, le=80, description="a sample passes 'quality' when its noise std is below this")


class ToolParams(StrictModel):
    """Component heads (shape, colour) and the noise meter, fitted on renders of families A and B with renderer truth."""

    n_train: int = Field(ge=16, le=500_000, description="labelled training renders (A and B population generators)")
    n_heldout: int = Field(ge=32, le=100_000, description="renders per family never trained on: the plateau curve and the per-family accuracy")
    hidden: int = Field(128, ge=8, le=2048, description="width of the shape/colour MLP")
    steps: int = Field(ge=10, le=200_000)
    batch_size: int = Field(64, ge=4, le=1024)
    lr: float = Field(2e-3, gt=0, le=1, description="peak learning rate")
    warmup_steps: int = Field(100, ge=0, le=100_000, description="linear warm-up to lr")
    min_lr_ratio: float = Field(0.05, ge=0, le=1, description="the cosine decay ends at lr × this")
    log_every: int = Field(25, ge=1, le=10_000)


class AgentParams(StrictModel):
    """The scripted planner's session: batches of samples until the interval sits inside one level."""

    batch_size: int = Field(8, ge=1, le=200, description="samples per round")
    max_rounds: int = Field(10, ge=1, le=100)
    confidence: float = Field(0.9, gt=0.5, lt=1, description="family confidence of the stopping interval (Bonferroni over the rounds)")
    allocation: Literal["neyman", "proportional"] = Field("neyman", description=(
        "how a round's samples spread over the dimension's sub-aspects after the first round"))
    repeats: int = Field(5, ge=1, le=100, description="sessions per (model, dimension)")


class PlannerParams(StrictModel):
    """The trained planner: step records of scripted sessions on population generators → SFT of a tiny ``core/lm`` model."""

    seeds: list[int] = Field(default_factory=lambda: [0, 1, 2], min_length=1, max_length=20, description=(
        "planner training draws (stage eval_agent_planner@<seed>): the clusters of the planner claims"))
    trace_repeats: int = Field(4, ge=1, le=200, description="scripted sessions per (population generator, dimension) that become step records")
    heldout_generators: int = Field(2, ge=1, le=100, description="population generators whose records only feed the held-out loss curve")
    vocab_size: int = Field(320, ge=0, le=4000, description="BPE vocabulary (0 = characters only)")
    hidden: int = Field(96, ge=16, le=1024)
    layers: int = Field(3, ge=1, le=12)
    heads: int = Field(4, ge=1, le=16)
    max_positions: int = Field(256, ge=64, le=2048)
    steps: int = Field(1200, ge=10, le=100_000)
    batch_size: int = Field(32, ge=2, le=512)
    lr: float = Field(3e-3, gt=0, le=1)
    eval_every: int = Field(50, ge=1, le=10_000)
    max_new_tokens: int = Field(48, ge=8, le=256, description="tokens a decision may take (reasoning line + JSON action)")


class ClaimsParams(StrictModel):
    within_one_margin: float = Field(0.10, gt=0, le=1, description="non-inferiority margin of the agent vs a full-benchmark rerun (within-one agreement)")
    min_tool_accuracy: float = Field(0.95, gt=0, le=1, description="tool verdict vs renderer truth, per known family and dimension")
    min_rel_improvement: float = Field(0.2, ge=0, le=1, description="the tool's held-out loss must leave its start by this much")
    min_valid_action_rate: float = Field(0.9, gt=0, le=1, description="share of the trained planner's first-try actions that must be valid for its claims")


class T2VParams(StrictModel):
    """The text-to-video generators and the VBench-like suite (``paper`` profile; off in default and smoke)."""

    enabled: bool = Field(False, description="build and evaluate the text-to-video suite (the paper profile turns it on)")
    n_per_family: int = Field(2, ge=1, le=50, description="generators of each of the 4 in-domain families (V0–V3)")
    n_held_out: int = Field(1, ge=1, le=50, description="generators of each of the 3 held-out families (H0–H2)")
    n_population: int = Field(20, ge=5, le=1000, description="in-domain generators that only build the five-level reference tables")
    dims: list[VDim] = Field(default_factory=lambda: list(VDIMS), min_length=1)
    prompts_per_dim: int = Field(68, ge=2, le=5000, description="prompts per dimension (14 × 68 × 5 = 4,760 clips per model, VBench: 4,730)")
    samples_per_prompt: int = Field(5, ge=1, le=20)
    n_frames: int = Field(8, ge=6, le=64, description="frames per clip (64 × 64)")
    flicker_threshold: float = Field(0.02, gt=0, le=1, description="a clip passes temporal_flickering when the frame-to-frame brightness std / mean is below this")
    jerk_threshold: float = Field(0.04, gt=0, le=1, description="motion_smoothness: RMS second difference of the subject's track (normalised units) below this")
    dynamic_threshold: float = Field(0.1, gt=0, le=1, description="dynamic_degree / object_action: the subject must travel at least this far (normalised)")


class Params(StrictModel):
    zoo: ZooParams = ZooParams()
    tools: ToolParams
    agent: AgentParams = AgentParams()
    planner: PlannerParams = PlannerParams()
    claims: ClaimsParams = ClaimsParams()
    t2v: T2VParams = T2VParams()

    @model_validator(mode="after")
    def _fits(self) -> "Params":
        cap = self.agent.batch_size * self.agent.max_rounds
        pool = self.zoo.prompts_per_dim * self.zoo.samples_per_prompt
        if cap > pool:
            raise ValueError(f"agent.batch_size × agent.max_rounds = {cap} exceeds one dimension's benchmark "
                             f"(zoo.prompts_per_dim × zoo.samples_per_prompt = {pool}): the agent could need more samples than exist")
        if self.planner.heldout_generators >= self.zoo.n_population:
            raise ValueError(f"planner.heldout_generators = {self.planner.heldout_generators} leaves no population generator "
                             f"for training records (zoo.n_population = {self.zoo.n_population})")
        if self.planner.hidden % self.planner.heads:
            raise ValueError(f"planner.hidden = {self.planner.hidden} is not a multiple of planner.heads = {self.planner.heads}")
        t2v_pool = self.t2v.prompts_per_dim * self.t2v.samples_per_prompt
        if self.t2v.enabled and cap > t2v_pool:
            raise ValueError(f"agent.batch_size × agent.max_rounds = {cap} exceeds one text-to-video dimension's benchmark "
                             f"(t2v.prompts_per_dim × t2v.samples_per_prompt = {t2v_pool})")
        if len(set(self.t2v.dims)) != len(self.t2v.dims):
            raise ValueError(f"t2v.dims: items must be distinct (got {self.t2v.dims})")
        if len(set(self.zoo.dims)) != len(self.zoo.dims):
            raise ValueError(f"zoo.dims: items must be distinct (got {self.zoo.dims})")
        return self
