"""Typed ``params.yaml:encoder_fusion`` section (validated before any stage does work).

Everything in this track is synthetic: x-ray-like and pathology-like images drawn by
:mod:`paperworks.encoder_fusion.world`, a simulated rater panel, no clinical claim.
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field, NonNegativeInt, model_validator

from paperworks.core.params import ParamsError, StrictModel

Modality = Literal["xray", "path"]
MODALITIES: tuple[str, ...] = ("xray", "path")
Fusion = Literal["foundation", "parallel", "parallel_query", "cascade"]
FUSIONS: tuple[str, ...] = ("foundation", "parallel", "parallel_query", "cascade")
VolumeArm = Literal["anchored", "sampled", "encoder3d"]
VOLUME_ARMS: tuple[str, ...] = ("anchored", "sampled", "encoder3d")


class WorldParams(StrictModel):
    """Cases per modality: an image with lesions in four named regions + a clinical context (RoI)."""

    size: int = Field(64, ge=32, le=256, description="image height = width (pixels, multiple of 32)")
    n_train: int = Field(ge=8, le=20_000, description="training cases per modality")
    n_dev: int = Field(ge=4, le=5000, description="dev cases per modality (the heads' held-out curves)")
    n_test: int = Field(ge=4, le=5000, description="test cases per modality")
    max_lesions: int = Field(2, ge=1, le=4, description="lesions per case: 0..max, in distinct regions")
    small_share: float = Field(0.5, ge=0, le=1, description="share of lesions that are small (visible at full resolution only)")
    contrast: int = Field(40, ge=10, le=80, description="lesion amplitude (grey levels)")
    noise: float = Field(6.0, ge=0, le=30, description="pixel noise (grey levels, standard deviation)")
    roi_on_lesion: float = Field(0.7, ge=0, le=1, description="chance the clinical context names a lesion's region")

    @model_validator(mode="after")
    def _check(self) -> "WorldParams":
        if self.size % 32:
            raise ValueError(f"size={self.size}: must be a multiple of 32 (2× coarse view, 4-pixel patches, 2×2 regions)")
        return self


class FoundationParams(StrictModel):
    """F: patchify encoder on the 2× coarse view, CLIP-style against MiniLM embeddings of finding sentences."""

    widths: list[int] = Field(default_factory=lambda: [16, 32, 64], min_length=3, max_length=3)
    steps: int = Field(ge=10, le=100_000)
    batch_size: int = Field(64, ge=8, le=1024)
    lr: float = Field(3e-3, gt=0, le=1)
    log_every: int = Field(10, ge=1, le=10_000)


class SpecialistParams(StrictModel):
    """One specialist per 2D modality: patchify encoder at full resolution, trained on dense (per-cell) lesion labels."""

    widths: list[int] = Field(default_factory=lambda: [16, 32, 64], min_length=3, max_length=3)
    steps: int = Field(ge=10, le=100_000)
    batch_size: int = Field(32, ge=4, le=1024)
    lr: float = Field(3e-3, gt=0, le=1)
    log_every: int = Field(10, ge=1, le=10_000)


class HeadParams(StrictModel):
    """Fusion module + VQA head, trained per (fusion, seed) on the frozen, cached encoder tokens."""

    fusions: list[Fusion] = Field(default_factory=lambda: list(FUSIONS), min_length=2)
    seeds: list[NonNegativeInt] = Field(default_factory=lambda: [0, 1, 2, 3, 4], min_length=1, max_length=50, description=(
        "independent trainings (the claims' clusters): seed s trains its own foundation encoder and specialists "
        "(encoder_fusion_encoders@<s>) and every fusion head on them (encoder_fusion_vqa@<s>); report-decoder seed i and "
        "explore seed i read the encoders of the i-th listed seed (so decoder.seeds and explore.seeds are at most its length)"))
    d_model: int = Field(64, ge=8, le=512)
    heads: int = Field(4, ge=1, le=16)
    window: int = Field(1, ge=0, le=8, description="local cross-attention radius in token cells (0: same cell only)")
    steps: int = Field(ge=10, le=200_000)
    batch_size: int = Field(128, ge=8, le=4096)
    lr: float = Field(2e-3, gt=0, le=1)
    log_every: int = Field(25, ge=1, le=10_000)
    patience: int | None = Field(None, ge=1, le=200_000, description=(
        "stop once this many steps pass without a better dev accuracy (null: train all ``steps``)"))

    @model_validator(mode="after")
    def _check(self) -> "HeadParams":
        if self.d_model % self.heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by heads={self.heads}")
        if "foundation" not in self.fusions or "cascade" not in self.fusions:
            raise ValueError(f"fusions {self.fusions}: need at least 'foundation' and 'cascade' (the claims compare them)")
        if len(set(self.fusions)) != len(self.fusions):
            raise ValueError(f"fusions {self.fusions}: repeated entry")
        return self


class PanelParams(StrictModel):
    """The RoI-metric study: simulated systems' reports, a simulated rater panel, the finding tagger."""

    n_cases: int = Field(ge=10, le=10_000, description="cases whose three systems' reports the panel ranks")
    raters: int = Field(6, ge=2, le=50)
    roi_weight_range: tuple[float, float] = (2.0, 4.0)  # rater-specific weight of an error inside the RoI (hidden from metrics)
    rater_noise: float = Field(0.5, ge=0, le=10, description="std of each rater's utility noise (severity units)")
    paraphrase_rate: float = Field(0.5, ge=0, le=1, description="chance each sentence uses a non-canonical template or synonym")
    metric_roi_weight: float = Field(3.0, ge=1, le=10, description="the RoI metric's own weight of an RoI error (fixed, not the raters')")
    tagger_sentences: int = Field(2000, ge=50, le=100_000, description="annotated sentences the finding tagger trains on (separate set)")


class VolumeParams(StrictModel):
    """Comparison 2: CT-like volumes (D slices of S × S) with lesions spanning 1–3 slices; 2D-anchored
    depth-aware fusion vs k sampled slices vs a 3D encoder with its own projector, trained end to end
    per (arm, seed) on 3D VQA (presence and type of a lesion per named region)."""

    depth: int = Field(16, ge=4, le=128, description="slices per volume")
    size: int = Field(32, ge=32, le=256, description="slice height = width (pixels, multiple of 32)")
    n_train: int = Field(ge=8, le=20_000, description="training volumes")
    n_dev: int = Field(ge=4, le=5000, description="dev volumes (the plateau curves, checkpoint selection)")
    n_test: int = Field(ge=4, le=5000, description="test volumes")
    max_lesions: int = Field(2, ge=1, le=4, description="lesions per volume: 0..max, in distinct regions")
    contrast: int = Field(40, ge=10, le=100, description="lesion amplitude (grey levels)")
    noise: float = Field(6.0, ge=0, le=30, description="voxel noise (grey levels, standard deviation)")
    k_slices: int = Field(6, ge=1, le=128, description="slices the 'sampled' arm sees (evenly spaced, first and last included)")
    arms: list[VolumeArm] = Field(default_factory=lambda: list(VOLUME_ARMS), min_length=2)
    seeds: int = Field(3, ge=1, le=50, description="independent trainings of each arm (the claims' clusters)")
    widths: list[int] = Field(default_factory=lambda: [8, 16, 32], min_length=3, max_length=3)
    d_model: int = Field(32, ge=8, le=512)
    steps: int = Field(ge=10, le=100_000)
    batch_size: int = Field(16, ge=2, le=1024, description="volumes per step (every question of each)")
    lr: float = Field(3e-3, gt=0, le=1)
    log_every: int = Field(20, ge=1, le=10_000)
    patience: int | None = Field(None, ge=1, le=100_000, description=(
        "stop once this many steps pass without a better dev accuracy (null: train all ``steps``); the heads' rule"))

    @model_validator(mode="after")
    def _check(self) -> "VolumeParams":
        if self.size % 32:
            raise ValueError(f"size={self.size}: must be a multiple of 32 (4-pixel patches, two stride-2 layers, ≥ 2 × 2 cells for 2 × 2 regions)")
        if self.k_slices >= self.depth:
            raise ValueError(f"k_slices={self.k_slices}: must be below depth={self.depth} (otherwise nothing is sampled away)")
        if self.depth % 4:
            raise ValueError(f"depth={self.depth}: must be a multiple of 4 (the 3D encoder's two stride-2 layers)")
        if "anchored" not in self.arms or "sampled" not in self.arms:
            raise ValueError(f"arms {self.arms}: need at least 'anchored' and 'sampled' (the claims compare them)")
        if len(set(self.arms)) != len(self.arms):
            raise ValueError(f"arms {self.arms}: repeated entry")
        return self


class DecoderParams(StrictModel):
    """The report decoder: a ``core.lm`` Llama decoder with a visual prefix (the fused token grid, projected,
    through ``inputs_embeds``), trained per (fusion, seed) with its fusion module end to end on each case's
    findings report; greedy reports of the test cases are scored by the RoI scorer against reference reports."""

    seeds: int = Field(3, ge=1, le=50, description=(
        "independent trainings of each fusion's decoder (the claims' clusters); seed i reads the encoders of head.seeds[i]"))
    hidden_size: int = Field(64, ge=8, le=1024)
    num_layers: int = Field(2, ge=1, le=12)
    num_heads: int = Field(4, ge=1, le=16)
    intermediate_size: int = Field(128, ge=8, le=4096)
    vocab_size: int = Field(160, ge=0, le=4096, description="BPE vocabulary trained on the training reports (0: characters only)")
    paraphrase_rate: float = Field(0.0, ge=0, le=1, description="paraphrase rate of the reports the decoder learns from")
    steps: int = Field(ge=10, le=100_000)
    batch_size: int = Field(32, ge=2, le=1024, description="cases per step")
    lr: float = Field(3e-3, gt=0, le=1)
    log_every: int = Field(50, ge=1, le=10_000)
    max_new_tokens: int = Field(64, ge=4, le=512, description="generation cap; a report cut here is counted as generated")
    patience: int | None = Field(None, ge=1, le=100_000, description=(
        "stop once this many steps pass without a lower dev loss (null: train all ``steps``)"))

    @model_validator(mode="after")
    def _check(self) -> "DecoderParams":
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size={self.hidden_size} must be divisible by num_heads={self.num_heads}")
        return self


class ExploreParams(StrictModel):
    """Exploratory comparisons with the report decoder's sizes (``decoder.*``) and a text prompt after the visual
    prefix: instruction retention after domain tuning with vs without instruction data mixed in, and the
    segmentation tool's region text as the prompt vs none (``paperworks.encoder_fusion.explore``)."""

    seeds: int = Field(3, ge=1, le=50, description=(
        "independent runs of each comparison (the claims' clusters); seed i reads the encoders of head.seeds[i]"))
    retention_fusion: Fusion = Field("cascade", description="the fusion under the retention decoder")
    instruct_steps: int = Field(ge=10, le=100_000, description="instruction tuning (plain + every format instruction)")
    instruct_patience: int | None = Field(None, ge=1, le=100_000, description=(
        "stop instruction tuning once this many steps pass without a lower dev loss (null: all ``instruct_steps``); "
        "the domain-tuning and tool arms always train their full steps (the compared arms get the same steps)"))
    domain_steps: int = Field(ge=10, le=100_000, description="domain tuning of each arm, from the instruction-tuned checkpoint")
    mix_share: float = Field(0.25, gt=0, lt=1, description="share of each domain-tuning batch drawn from the instruction items ('mixed' arm)")
    domain_paraphrase_rate: float = Field(0.5, ge=0, le=1, description="paraphrase rate of the domain-tuning reports (the new house style)")
    tool_fusion: Fusion = Field("foundation", description="the fusion under the tool-use decoder (the foundation alone cannot see small lesions)")
    tool_steps: int = Field(ge=10, le=100_000, description="training steps of each tool-use arm")
    log_every: int = Field(25, ge=1, le=10_000)


class DegradeParams(StrictModel):
    """A scanner-like degradation of the test images (declared and seeded): Gaussian blur, then an intensity
    drift gain · x + offset, then Gaussian noise; rounded and clipped to uint8."""

    blur: float = Field(0.5, ge=0, le=5, description="Gaussian blur σ (pixels); 0: none")
    gain: float = Field(0.9, ge=0.5, le=1.5, description="intensity drift: multiplicative")
    offset: float = Field(8.0, ge=-60, le=60, description="intensity drift: additive (grey levels)")
    noise: float = Field(6.0, ge=0, le=40, description="added Gaussian noise σ (grey levels), on top of the world's own")

    @model_validator(mode="after")
    def _check(self) -> "DegradeParams":
        if self.blur == 0 and self.gain == 1 and self.offset == 0 and self.noise == 0:
            raise ValueError("blur=0, gain=1, offset=0, noise=0: the degradation changes nothing")
        return self


class ReliabilityParams(StrictModel):
    """Beyond the paper, on the trained VQA heads: calibrated confidence with abstention, and robustness to
    ``degrade`` (``paperworks.encoder_fusion.reliability``, stage ``encoder_fusion_reliability``)."""

    coverage: float = Field(0.9, gt=0, le=1, description="answered share of the dev questions the abstention threshold is fitted to")
    n_bins: int = Field(10, ge=2, le=50, description="confidence bins of the reliability table and the ECE")
    abstention_fusions: list[Fusion] = Field(default_factory=lambda: ["foundation", "cascade"], min_length=1,
                                             description="fusions whose 'abstaining raises accuracy' claim is made")
    degrade: DegradeParams = DegradeParams()


class ClaimsParams(StrictModel):
    min_specialist_gain: float = Field(0.15, ge=0, le=1, description="specialist − foundation small-lesion detection accuracy")
    min_rel_improvement: float = Field(0.05, ge=0, le=1, description="a training loss must leave its start by this much")
    min_tagger_accuracy: float = Field(0.9, ge=0, le=1, description="field accuracy of the finding tagger on held-out sentences")
    min_thin_missed: float = Field(0.3, ge=0, le=1, description="share of thin (1-slice) test lesions absent from the k sampled slices")
    min_instruction_compliance: float = Field(0.8, ge=0, le=1, description="dev compliance of the instruction-tuned decoder (before domain tuning)")
    min_tool_f1: float = Field(0.8, ge=0, le=1, description="mean entity-F1 of the segmentation tool's findings against the test cases' truth")


class Params(StrictModel):
    world: WorldParams
    foundation: FoundationParams
    specialist: SpecialistParams
    head: HeadParams
    panel: PanelParams
    volume: VolumeParams
    decoder: DecoderParams
    explore: ExploreParams
    reliability: ReliabilityParams = ReliabilityParams()
    claims: ClaimsParams = ClaimsParams()

    @model_validator(mode="after")
    def _check(self) -> "Params":
        missing = [f for f in self.reliability.abstention_fusions if f not in self.head.fusions]
        if missing:
            raise ValueError(f"reliability.abstention_fusions {missing}: not trained (head.fusions is {self.head.fusions})")
        for stage in DRAW_STAGES:
            problem = _draws_problem(self, stage)
            if problem:
                raise ValueError(problem)
        return self


# the stages whose own seeds each read one encoder draw: seed i of ``<stage>.seeds`` reads ``head.seeds[i]``
DRAW_STAGES: tuple[str, ...] = ("decoder", "explore")


def _draws_problem(p: Params, stage: str) -> str | None:
    n, draws = getattr(p, stage).seeds, p.head.seeds
    if n <= len(draws):
        return None
    return (f"encoder_fusion.{stage}.seeds={n} exceeds len(encoder_fusion.head.seeds)={len(draws)} (head.seeds {list(draws)}): "
            f"{stage} seed i reads the encoders trained by head.seeds[i], so {stage}.seeds must be at most {len(draws)} "
            f"(list more head.seeds or lower {stage}.seeds)")


def encoder_draws(p: Params, stage: str) -> list[int]:
    """The encoder draw (a seed of ``head.seeds``, i.e. ``encoder_fusion_encoders@<draw>``) that each of ``stage``'s
    own seeds reads: seed i → ``head.seeds[i]``, for i in ``range(<stage>.seeds)``. Each decoder / explore seed thus
    sits on its own independent draw of the frozen encoders, and the intervals over those seeds cover the redraw.
    More stage seeds than ``head.seeds`` is a ``ParamsError`` (the params validator refuses it too)."""
    if stage not in DRAW_STAGES:
        raise ValueError(f"stage '{stage}': allowed {', '.join(DRAW_STAGES)}")
    problem = _draws_problem(p, stage)
    if problem:
        raise ParamsError(problem)
    return list(p.head.seeds[:getattr(p, stage).seeds])


def stage_seed(p: Params, argv: list[str] | None = None) -> int:
    """The ``--seed`` of a per-seed stage (``encoder_fusion_encoders@<s>``, ``encoder_fusion_vqa@<s>``); a seed that
    ``head.seeds`` does not list is a ``ParamsError`` before any work starts."""
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, required=True)
    s = ap.parse_args(argv).seed
    if s not in p.head.seeds:
        raise ParamsError(f"--seed {s} is not in encoder_fusion.head.seeds {p.head.seeds}")
    return s
