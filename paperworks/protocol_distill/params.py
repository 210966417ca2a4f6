"""Typed parameters of the protocol_distill track (section ``protocol_distill`` of params.yaml)."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from paperworks.core.lm.model import LMConfig
from paperworks.core.params import StrictModel

SizeName = Literal["tiny", "small"]
TeacherName = Literal["opus", "gpt", "gemini"]
MethodName = Literal["grpo", "opsd", "trace", "mapd"]


class PoolSizes(StrictModel):
    warm: int = Field(ge=1, le=1_000_000, description="questions per set for the warm-start demonstrations")
    online: int = Field(ge=1, le=1_000_000, description="questions per set for online training")
    test: int = Field(ge=1, le=1_000_000, description="held-out questions per set")


class WorldParams(StrictModel):
    n_persons: int = Field(ge=12, le=1_000_000)  # the world and its documents live in memory
    n_orgs: int = Field(ge=4, le=100_000)
    n_cities: int = Field(ge=3, le=100_000)
    n_collisions: int = Field(ge=0, le=1_000_000)
    doc_forms: int = Field(1, ge=1, le=3, description="relation words a fact's document may use, drawn per fact "
                                                      "(1: always the canonical word)")
    questions: PoolSizes


class SearchParams(StrictModel):
    top_k: int = Field(1, ge=1, le=5)


class RolloutParams(StrictModel):
    max_completion: int = Field(ge=16, le=512, description="model + tool tokens per episode")
    max_searches: int = Field(ge=1, le=8)


class WarmMix(StrictModel):
    plain: float = Field(ge=0, le=1)
    protocol: float = Field(ge=0, le=1)
    answer: float = Field(ge=0, le=1)


class StepsPerSize(StrictModel):
    tiny: int = Field(ge=1)
    small: int = Field(ge=1)


class WarmStartParams(StrictModel):
    steps: StepsPerSize
    batch_size: int = Field(ge=1)
    lr: float = Field(gt=0, le=0.1)
    warmup_steps: int = Field(ge=0)
    mix: WarmMix
    question_dropout: float = Field(ge=0, le=1, description="share of context-conditioned demos whose question is hidden")
    probe_questions: int = Field(ge=1, description="online-pool questions used to log student/privileged EM")
    eval_every: int = Field(ge=1)


class OnlineParams(StrictModel):
    methods: list[MethodName] = Field(min_length=1)
    steps: int = Field(ge=1)
    prompts_per_step: int = Field(ge=1)
    group_size: int = Field(ge=2, description="GRPO group size G")
    lr: float = Field(gt=0, le=0.1)
    temperature: float = Field(gt=0, le=2)
    clip_eps: float = Field(gt=0, le=1)
    normalise_std: bool = Field(description="divide the group-centred reward by the group std")
    kl_coef: float = Field(ge=0, le=10, description="λ of the KL term (OPSD, MAPD)")
    kl_warmup_steps: int = Field(ge=0)
    kl_direction: Literal["reverse", "forward"]
    lambda_sweep: list[float] = Field(description="extra MAPD runs (first teacher) at these λ")
    lambda_sweep_sizes: list[SizeName]
    trace_batch_size: int = Field(ge=1)
    probe_every: int = Field(ge=1)

    @field_validator("lambda_sweep")
    @classmethod
    def _nonnegative(cls, v: list[float]) -> list[float]:
        if any(x < 0 for x in v):
            raise ValueError("every λ in the sweep must be ≥ 0")
        return v


class ModelSizes(StrictModel):
    tiny: LMConfig
    small: LMConfig


class ClaimParams(StrictModel):
    """What the claims rest on (read by protocol_distill_evaluate only)."""

    min_privileged_gap_points: float = Field(20.0, gt=0, le=100, description="EM points the privileged branch must beat the student by on multi-hop before online training")


class Params(StrictModel):
    world: WorldParams
    search: SearchParams
    teachers: list[TeacherName] = Field(min_length=1)
    models: ModelSizes
    sizes: list[SizeName] = Field(min_length=1)
    seeds: list[int] = Field(min_length=1)
    rollout: RolloutParams
    warmstart: WarmStartParams
    online: OnlineParams
    eval_batch_size: int = Field(ge=1)
    claims: ClaimParams = ClaimParams()

    @field_validator("teachers")
    @classmethod
    def _unique_teachers(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError("teachers must be distinct")
        return v
