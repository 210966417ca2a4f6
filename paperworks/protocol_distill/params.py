"""Typed parameters of the protocol_distill track (section ``protocol_distill`` of params.yaml)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from pydantic import Field, field_validator, model_validator

from paperworks.core.lm.model import LMConfig
from paperworks.core.params import StrictModel

SizeName = Literal["tiny", "small"]
TeacherName = Literal["opus", "gpt", "gemini"]
MethodName = Literal["grpo", "opsd", "trace", "mapd"]

RUN_PATTERN = re.compile(r"^(?:(grpo|opsd|trace)|mapd_(opus|gpt|gemini)(_styled)?(?:_lam(\d+(?:\.\d+)?))?)$")
RUN_HELP = ("grpo | opsd | trace | mapd_<teacher>[_styled][_lam<λ>] with <teacher> in opus/gpt/gemini "
            "(e.g. mapd_opus, mapd_opus_styled, mapd_opus_lam0.3)")


@dataclass(frozen=True)
class RunSpec:
    """One online run: its method, the teacher whose protocols MAPD reads ('' otherwise), whether
    those protocols carry the teacher's style in their free-form fields, and λ."""

    run: str
    method: str
    teacher: str
    styled: bool
    kl_coef: float

    @property
    def protocol_source(self) -> str:
        """The protocol rows' teacher name (``opus`` or ``opus_styled``)."""
        return f"{self.teacher}_styled" if self.styled else self.teacher


def parse_run(name: str, default_kl: float) -> RunSpec:
    m = RUN_PATTERN.match(name)
    if m is None:
        raise ValueError(f"unknown run {name!r}: expected {RUN_HELP}")
    plain, teacher, styled, lam = m.groups()
    if plain:
        return RunSpec(name, plain, "", False, default_kl if plain == "opsd" else 0.0)
    return RunSpec(name, "mapd", teacher, bool(styled), float(lam) if lam is not None else default_kl)


class PoolSizes(StrictModel):
    warm: int = Field(ge=1, le=1_000_000, description="questions per set for the warm-start demonstrations")
    online: int = Field(ge=1, le=1_000_000, description="questions per set for online training")
    test: int = Field(ge=1, le=1_000_000, description="held-out questions per set")
    transfer: int = Field(0, ge=0, le=1_000_000, description="test questions per set on the closed transfer region "
                          "(needs world.transfer.enabled)")


class RedirectParams(StrictModel):
    """Issue 15's transferable strategy: renamed organisations and cities behind redirect documents."""

    enabled: bool = Field(False, description="the switch: renamed entities, redirect documents ('<old> see <new>'), "
                          "the teachers' repair rule in their protocols, and no repair in the student branch's demonstrations")
    share: float = Field(0.5, gt=0, le=0.9, description="share of the organisations and of the cities that were renamed")


class TransferParams(StrictModel):
    enabled: bool = Field(False, description="a closed region of the world whose questions (pool 'transfer') share no "
                          "entity with any training question or protocol")
    share: float = Field(0.15, gt=0, le=0.5, description="share of the people, organisations and cities in the region")


class WorldParams(StrictModel):
    n_persons: int = Field(ge=12, le=1_000_000)  # the world and its documents live in memory
    n_orgs: int = Field(ge=4, le=100_000)
    n_cities: int = Field(ge=3, le=100_000)
    n_collisions: int = Field(ge=0, le=1_000_000)
    doc_forms: int = Field(1, ge=1, le=3, description="relation words a fact's document may use, drawn per fact "
                                                      "(1: always the canonical word)")
    questions: PoolSizes
    redirects: RedirectParams = RedirectParams()
    transfer: TransferParams = TransferParams()

    @model_validator(mode="after")
    def _transfer_questions_need_the_region(self) -> "WorldParams":
        if self.transfer.enabled != (self.questions.transfer > 0):
            raise ValueError("world.questions.transfer must be > 0 exactly when world.transfer.enabled is true")
        return self

    def redirect_share(self) -> float:
        return self.redirects.share if self.redirects.enabled else 0.0

    def transfer_share(self) -> float:
        return self.transfer.share if self.transfer.enabled else 0.0


class SearchParams(StrictModel):
    top_k: int = Field(1, ge=1, le=5)


class RolloutParams(StrictModel):
    max_completion: int = Field(ge=16, le=512, description="model + tool tokens per episode")
    max_searches: int = Field(ge=1, le=8)


class WarmMix(StrictModel):
    plain: float = Field(ge=0, le=1)
    protocol: float = Field(ge=0, le=1)
    answer: float = Field(ge=0, le=1)
    strategy: float = Field(0.0, ge=0, le=1, description="another question's protocol (a strategy protocol) in front of "
                            "this question: the privileged branch learns to take the strategy, not the instance, from it")


class StepsPerSize(StrictModel):
    tiny: int = Field(ge=1)
    small: int = Field(ge=1)


class LrPerSize(StrictModel):
    tiny: float = Field(gt=0, le=0.1)
    small: float = Field(gt=0, le=0.1)


class WarmStartParams(StrictModel):
    steps: StepsPerSize
    batch_size: int = Field(ge=1)
    lr: LrPerSize = Field(description="per student size: the larger one needs its own rate to beat the smaller")
    warmup_steps: int = Field(ge=0)
    mix: WarmMix
    question_dropout: float = Field(ge=0, le=1, description="share of context-conditioned demos whose question is hidden")
    probe_questions: int = Field(ge=1, description="online-pool questions used to log student/privileged EM")
    eval_every: int = Field(ge=1, description="steps between probe-EM evaluations (the held-out loss is logged at every log point)")
    styled_share: float = Field(0.0, ge=0, le=1, description="share of the protocol-conditioned demonstrations of a style teacher "
                                "shown with its styled protocol (and the styled plan's queries as the completion): without any, "
                                "the privileged branch never learns to read a styled protocol and the style test cannot fail")
    heldout_examples: int = Field(128, ge=8, le=100_000, description="demonstrations of warm-pool questions held out of training; "
                                  "their loss is the curve the convergence check reads")
    plain_redirect: Literal["omit", "no_repair"] = Field("omit", description="the student branch's demonstration of a question "
                                                         "whose episode meets a redirect: none ('omit') or the episode cut at the "
                                                         "redirect and answered with the entity it names ('no_repair'); never the repair")


class OnlineParams(StrictModel):
    runs: list[str] = Field(min_length=1, description=f"online runs, one DVC stage each per size and seed: {RUN_HELP}")
    steps: int = Field(ge=1)
    prompts_per_step: int = Field(ge=1)
    group_size: int = Field(ge=2, description="GRPO group size G")
    lr: float = Field(gt=0, le=0.1)
    temperature: float = Field(gt=0, le=2)
    clip_eps: float = Field(gt=0, le=1)
    normalise_std: bool = Field(description="divide the group-centred reward by the group std")
    kl_coef: float = Field(ge=0, le=10, description="λ of the KL term (OPSD, MAPD) unless the run name sets it")
    kl_warmup_steps: int = Field(ge=0)
    kl_direction: Literal["reverse", "forward"]
    kl_protocol: Literal["instance", "strategy"] = Field("instance", description="what MAPD's privileged branch reads: "
                                                         "the online question's own protocol (the paper's; its grounding facts "
                                                         "hold the answer) or a strategy protocol (another online question's of "
                                                         "the same task type and failure kind, naming none of its entities)")
    probe_every: int = Field(ge=1)

    @field_validator("runs")
    @classmethod
    def _known_runs(cls, v: list[str]) -> list[str]:
        for name in v:
            parse_run(name, 0.0)
            if float(RUN_PATTERN.match(name).group(4) or 0) > 10:
                raise ValueError(f"run {name!r}: λ must be ≤ 10")
        return v


class TraceParams(StrictModel):
    """Trace imitation trained to its own standard (SFT on the teachers' raw traces from the warm start)."""

    steps: int = Field(ge=1, description="SFT steps; its loss curve must plateau (convergence precondition)")
    lr: float = Field(gt=0, le=0.1)
    warmup_steps: int = Field(ge=0)
    batch_size: int = Field(ge=1)
    log_every: int = Field(ge=1)
    heldout_examples: int = Field(128, ge=8, le=100_000, description="traces of online questions held out of trace training; "
                                  "their loss is the curve the convergence check reads")
    max_completion: int = Field(ge=16, le=512, description="rollout cap of the trace-imitation student; every training "
                                                           "trace must fit (checked before training)")


class ModelSizes(StrictModel):
    tiny: LMConfig
    small: LMConfig


class ClaimParams(StrictModel):
    """What the claims rest on (read by protocol_distill_evaluate only)."""

    min_privileged_gap_points: float = Field(20.0, gt=0, le=100, description="EM points the privileged branch must beat the student by on multi-hop before online training")
    style_margin: float = Field(0.05, gt=0, le=1, description="non-inferiority margin (share of outputs with a tic word) of "
                                                              "'MAPD with styled protocols adds no tics over GRPO'")


class Params(StrictModel):
    world: WorldParams
    search: SearchParams
    teachers: list[TeacherName] = Field(min_length=1)
    style_teachers: list[TeacherName] = Field(default_factory=list, description="teachers that also write a styled protocol "
                                              "variant (<teacher>_styled): their narration in the free-form fields")
    models: ModelSizes
    sizes: list[SizeName] = Field(min_length=1)
    seeds: list[int] = Field(min_length=1, description="one warm start and one run of every method per seed (paired)")
    rollout: RolloutParams
    warmstart: WarmStartParams
    online: OnlineParams
    trace: TraceParams
    eval_batch_size: int = Field(ge=1)
    claims: ClaimParams = ClaimParams()

    @field_validator("teachers")
    @classmethod
    def _unique_teachers(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError("teachers must be distinct")
        return v

    @model_validator(mode="after")
    def _runs_use_known_teachers(self) -> "Params":
        for name in self.online.runs:
            r = parse_run(name, self.online.kl_coef)
            if r.method == "mapd" and r.teacher not in self.teachers:
                raise ValueError(f"online.runs: {name!r} reads protocols of {r.teacher!r}, not in teachers {self.teachers}")
            if r.styled and r.teacher not in self.style_teachers:
                raise ValueError(f"online.runs: {name!r} needs {r.teacher!r} in style_teachers {self.style_teachers}")
        if not set(self.style_teachers) <= set(self.teachers):
            raise ValueError(f"style_teachers {self.style_teachers} must be among teachers {self.teachers}")
        return self

    def run_specs(self) -> list[RunSpec]:
        return [parse_run(r, self.online.kl_coef) for r in self.online.runs]

    def branches(self) -> list[str]:
        """Every branch the warm-start report measures: student, answer, each teacher's protocol, styled variants."""
        return ["student", "answer", *self.teachers, *(f"{t}_styled" for t in self.style_teachers), *self.strategy_branches()]

    def strategy_branches(self) -> list[str]:
        """The strategy-protocol branch of the first teacher (what MAPD reads with kl_protocol = strategy),
        measured whenever the world has redirects or a transfer region."""
        on = self.world.redirects.enabled or self.world.transfer.enabled or self.online.kl_protocol == "strategy"
        return [f"{self.teachers[0]}_strategy"] if on else []
