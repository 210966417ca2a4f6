"""Typed ``params.yaml:mol`` section (validated before any stage does work)."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from paperworks.core.lm import LMConfig
from paperworks.core.params import StrictModel

RouterName = Literal["rules", "tfidf_lr", "minilm_lr"]
LearnedRouting = Literal["xlora", "poly"]


class WorldParams(StrictModel):
    """Requests in four formats, single-turn suites and multi-turn conversations (``mol.world``)."""

    train_per_capability: int = Field(ge=8, le=100_000)
    dev_per_capability: int = Field(ge=4, le=10_000, description="held-out loss curve (the plateau check) of every adapter")
    test_per_capability: int = Field(ge=4, le=10_000, description="the acceptance suite of each capability")
    neutral_share: float = Field(0.1, ge=0, le=0.5, description="turns with no cue ('also, …'): continue the previous capability")
    weak_cue_share: float = Field(0.0, ge=0, le=0.5, description=(
        "prompts whose only cue is a short tag after the request ('as json call' vs 'as json view', "
        "'in plain text' vs 'in plain code'): one token tells two near-identical formats apart"))
    router_train_conversations: int = Field(ge=4, le=100_000)
    test_conversations: int = Field(ge=4, le=100_000)
    turns: tuple[int, int] = (2, 4)
    hidden_table_sets: int = Field(3, ge=1, le=50, description="hidden tables the coding verifier runs programs on")
    pretrain_docs: int = Field(ge=50, le=1_000_000, description="generic world corpus of the base (no capability formatting)")

    @model_validator(mode="after")
    def _turns(self) -> "WorldParams":
        if not 2 <= self.turns[0] <= self.turns[1] <= 8:
            raise ValueError(f"turns={self.turns}: need 2 ≤ low ≤ high ≤ 8 (a conversation switches capability)")
        return self


class TokenizerParams(StrictModel):
    vocab_size: int = Field(500, ge=0, le=20_000, description="BPE vocabulary (0 = characters only)")


class BaseParams(StrictModel):
    """Pre-training of the base LM on the generic corpus; frozen afterwards (``mol.base``)."""

    model: LMConfig
    steps: int = Field(ge=10, le=1_000_000)
    batch_size: int = Field(32, ge=2, le=1024)
    lr: float = Field(3e-3, gt=0, le=1)
    eval_every: int = Field(ge=1, le=100_000, description="held-out corpus loss logged every this many steps")


class AdapterParams(StrictModel):
    """Four LoRA specialists vs one LoRA on the mixture vs multi-task full fine-tuning (``mol.adapters``).

    The single LoRA has rank ``4 × rank`` (the same trainable parameters as the four specialists
    together) and ``4 × steps`` steps (the same total steps); full fine-tuning runs ``4 × steps`` too.
    """

    seeds: list[int] = Field(min_length=1, max_length=20)
    rank: int = Field(8, ge=1, le=256)
    alpha_over_rank: float = Field(2.0, gt=0, le=16, description="LoRA alpha = this × rank (same scaling for every rank)")
    steps: int = Field(ge=4, le=1_000_000, description="steps of one specialist")
    batch_size: int = Field(32, ge=2, le=1024)
    lr: float = Field(1e-2, gt=0, le=1, description="learning rate of a specialist")
    single_lora_lr: float = Field(3e-3, gt=0, le=1, description=(
        "learning rate of the one LoRA on the mixture (its own: at the specialists' 1e-2 the rank-32 LoRA diverged in a probe)"))
    full_ft_lr: float = Field(1e-3, gt=0, le=1)
    eval_every: int = Field(ge=1, le=100_000, description="held-out (dev) loss every this many steps of a specialist")
    max_new_tokens: int = Field(64, ge=8, le=512)
    full_ft: bool = Field(True, description="train the multi-task full fine-tuning baseline")

    @model_validator(mode="after")
    def _seeds(self) -> "AdapterParams":
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds={self.seeds}: must be distinct")
        return self


class RouterParams(StrictModel):
    """Per-turn routers (``mol.router``): keyword rules, TF-IDF + LR, MiniLM embeddings + LR."""

    methods: list[RouterName] = Field(default_factory=lambda: ["rules", "tfidf_lr", "minilm_lr"], min_length=1)
    confidence_threshold: float = Field(0.6, ge=0, le=1, description="below it a learned router keeps the previous turn's route")
    headline: RouterName = Field("tfidf_lr", description="the router the headline router-vs-oracle claim tests")

    @model_validator(mode="after")
    def _headline(self) -> "RouterParams":
        if self.headline not in self.methods:
            raise ValueError(f"headline={self.headline!r}: must be one of methods {self.methods}")
        if len(set(self.methods)) != len(self.methods):
            raise ValueError(f"methods={self.methods}: must be distinct")
        return self


class XLoraParams(StrictModel):
    """peft X-LoRA over the four trained specialists (frozen): only its classifier trains, on the mixture."""

    steps: int = Field(900, ge=2, le=1_000_000, description="classifier steps on the mixture (default: one specialist's steps)")
    lr: float = Field(1e-3, gt=0, le=1)
    eval_every: int = Field(90, ge=1, le=100_000, description=(
        "dev loss + dev success every this many steps (X-LoRA generates without a KV cache: each evaluation is costly)"))
    depth: int = Field(1, ge=1, le=8, description="classifier layers (1 = one linear map of the hidden state)")
    size: int = Field(64, ge=4, le=4096, description="classifier hidden width (used when depth > 1)")
    layerwise: bool = Field(False, description="one mixture per layer instead of one broadcast to every layer")
    temperature: float = Field(1.0, gt=0, le=100, description="softmax temperature of the mixture")


class PolyParams(StrictModel):
    """peft Polytropon: ``n_skills`` LoRA skills (rank = adapters.rank) shared by the four capabilities (tasks)."""

    steps: int = Field(3600, ge=2, le=1_000_000, description="steps on the mixture (default: the single LoRA's 4 × adapters.steps)")
    lr: float = Field(1e-2, gt=0, le=1, description="Poly scales its LoRA by 1/r (no alpha): its own rate, not searched")
    eval_every: int = Field(240, ge=1, le=100_000, description="dev loss + dev success every this many steps")
    n_skills: int = Field(4, ge=1, le=64, description="4 skills of adapters.rank = the four specialists' LoRA parameters")
    n_splits: int = Field(1, ge=1, le=16)


class LearnedRoutingParams(StrictModel):
    """Learned-routing ablations (``mol.learned_routing``, stage ``mol_learned_routing``), exploratory claims only."""

    # empty = the stage runs neither ablation and records both under ``not_run`` (default: their ≈ 1–2 CPU-h is over
    # the track's budget on 2 cores; paper runs both)
    methods: list[LearnedRouting] = Field(default_factory=lambda: ["xlora", "poly"])
    xlora: XLoraParams = XLoraParams()
    poly: PolyParams = PolyParams()

    @model_validator(mode="after")
    def _distinct(self) -> "LearnedRoutingParams":
        if len(set(self.methods)) != len(self.methods):
            raise ValueError(f"methods={self.methods}: must be distinct")
        return self


class ClaimsParams(StrictModel):
    min_own_success: float = Field(0.6, ge=0, le=1, description="each specialist's success on its own suite …")
    min_gain_over_base: float = Field(0.2, ge=0, le=1, description="… and its gain over the base (precondition)")
    router_margin: float = Field(0.05, gt=0, le=1, description="non-inferiority margin of router vs oracle routing")


class CycleParams(StrictModel):
    """One cycle of the versioned loop: the traffic it audits, and whether its candidate is the deliberately faulty one."""

    shift: int = Field(ge=0, le=3, description="traffic shift: 1 adds the verb 'export' (new tools export_*), 2 adds 'plot' "
                       "(new UI component chart), 3 adds 'count' (coding pipelines ending in |count)")
    faulty: bool = Field(False, description=(
        "the candidate's update data is mislabelled (targets in another capability's format, the verifier filter "
        "bypassed): the contract must reject it and leave the accepted version serving"))


class ContractParams(StrictModel):
    """What a candidate version must meet to be accepted (``mol.versions.contract``)."""

    min_success: float = Field(0.8, ge=0, le=1, description="the updated capability's success on the new traffic's acceptance suite")
    require_improvement: bool = Field(True, description="… and better than the parent there (superiority, core.stats)")
    retention_margin: float = Field(0.05, gt=0, le=1, description=(
        "non-inferiority margin vs the parent on every earlier accepted suite (per capability, unit = item)"))
    min_data_verified: float = Field(1.0, ge=0, le=1, description="share of the update's trajectories the contract re-verifies")


class HarnessParams(StrictModel):
    """The harness search of each cycle (``mol.versions.harness``, :mod:`paperworks.mol.harness`): how the served
    adapter produces its own trajectories on the cycle's seed problems — greedy, or temperature sampling with up to
    ``max_retries`` samples per problem, the first one the capability's verifier accepts kept — chosen by Optuna (TPE,
    seeded from the cycle) on a harness dev pool of ``pool`` problems of the cycle's traffic (disjoint from every
    suite, dev pool, training item and the seed problems). Skipped in the deliberately faulty cycle (its update data
    is the mislabelled teacher's; the model's own answers are not used).

    Few-shot exemplars (the paper's context configurations) are **not** searched: the ≈ 0.9 M-parameter base is
    pre-trained on short generic documents and has no in-context learning to search over, and its context
    (``base.model.max_positions`` = 96 at default, of which ``adapters.max_new_tokens`` = 48 are the answer) has no
    room for an exemplar (a request and its answer are ≈ 40 tokens)."""

    trials: int = Field(8, ge=1, le=1000, description="Optuna trials per cycle; the first is greedy decoding (the loop's old harness)")
    max_retries: int = Field(4, ge=1, le=64, description="the most samples per problem the search may choose")
    pool: int = Field(24, ge=2, le=10_000, description="harness dev-pool problems per cycle (of the weakest capability)")
    temperature_range: tuple[float, float] = Field((0.3, 1.5), description="searched sampling temperature (low, high)")

    @field_validator("temperature_range")
    @classmethod
    def _temperatures(cls, v: tuple[float, float]) -> tuple[float, float]:
        if not 0 < v[0] <= v[1] <= 5:
            raise ValueError(f"temperature_range={list(v)}: need 0 < low ≤ high ≤ 5 (greedy is its own choice)")
        return v


class VersionsParams(StrictModel):
    """The versioned loop (``mol.versions``): v0 = the specialists of ``seed``; each cycle audits shifted traffic
    with the verifiers, picks the weakest capability, keeps verified trajectories on seed problems, updates that
    one adapter and accepts the candidate only if the contract holds."""

    seed: int = Field(description="the mol.adapters seed whose specialists are v0 (the loop that serves: mol_fifth, the endpoint and the deployment read its store)")
    replicate_seeds: list[int] = Field(default_factory=list, max_length=16, description=(
        "further mol.adapters seeds the same loop runs on (stage mol_versions_replicate, both layouts): v0 = that seed's "
        "specialists / single LoRA, the updates' initialisation and data order seeded by it, the same traffic and suites; "
        "the loop claims and the forgetting claim are at the level of these independent loop runs"))
    cycles: list[CycleParams] = Field(min_length=1, max_length=10, json_schema_extra={"repeats": True})
    audit_per_capability: int = Field(ge=2, le=10_000, description="simulated traffic items per capability audited each cycle")
    suite_per_capability: int = Field(ge=2, le=10_000, description="acceptance suite of a traffic shift, per capability")
    dev_per_capability: int = Field(ge=2, le=10_000, description="dev pool of the update's success curve")
    new_verb_share: float = Field(0.5, gt=0, le=1, description="share of a shifted traffic's requests that use its new verbs")
    seed_problems: int = Field(ge=2, le=100_000, description="seed problems of the weakest capability per cycle")
    teacher_samples: int = Field(2, ge=1, le=16, description="trajectories proposed per seed problem by the noisy teacher")
    teacher_noise: float = Field(0.3, ge=0, le=1, description="probability that a proposed trajectory is corrupted (the verifier must drop it)")
    replay_items: int = Field(ge=0, le=100_000, description="the capability's original training items mixed into the update")
    update_steps: int = Field(ge=2, le=100_000)
    update_lr: float = Field(3e-3, gt=0, le=1)
    eval_every: int = Field(ge=1, le=100_000)
    contract: ContractParams = ContractParams()
    harness: HarnessParams = HarnessParams()


class MonolithParams(StrictModel):
    """The same versioned loop on one monolithic model (``mol.monolith``, stage ``mol_versions_monolith``): v0 = the
    one LoRA on the mixture of ``versions.seed`` (rank 4 × ``adapters.rank``: the specialists' trainable parameters);
    every cycle is ``mol.versions``'s — the same audit traffic, weakest-capability rule, seed problems, verified
    trajectories, update steps and contract — but the update goes into the one adapter that answers every capability."""

    update_lr: float = Field(3e-3, gt=0, le=1, description=(
        "learning rate of the monolith's update, chosen with update_steps on cycle 1's dev pool (3e-3 learns nothing in "
        "300 steps and plateaus by ~500 of 1,200; 5e-3 rises late in 300-600 steps; 1e-2 and above collapse the rank-32 LoRA)"))
    update_steps: int | None = Field(None, ge=2, le=100_000, description=(
        "the monolith's update steps (None: versions.update_steps): its own, trained until its dev success plateaus — "
        "at 300-600 steps the rank-32 update was still rising in its last window"))
    replay: Literal["updated", "answered"] = Field("answered", description=(
        "what the monolith's update replays (mol.versions.replay_items in all): 'answered' = training items of every "
        "capability the one file answers (a monolithic practitioner's mixture replay, the fair baseline), 'updated' = "
        "only the updated capability's, as the mixture's update does (its other adapters are untouched)"))


class Params(StrictModel):
    world: WorldParams
    tokenizer: TokenizerParams = TokenizerParams()
    base: BaseParams
    adapters: AdapterParams
    router: RouterParams = RouterParams()
    learned_routing: LearnedRoutingParams = LearnedRoutingParams()
    claims: ClaimsParams = ClaimsParams()
    versions: VersionsParams
    monolith: MonolithParams = MonolithParams()

    @model_validator(mode="after")
    def _versions_seed(self) -> "Params":
        if self.versions.seed not in self.adapters.seeds:
            raise ValueError(f"versions.seed={self.versions.seed}: must be one of adapters.seeds {self.adapters.seeds}")
        reps = self.versions.replicate_seeds
        bad = [s for s in reps if s not in self.adapters.seeds or s == self.versions.seed]
        if not reps or bad or len(set(reps)) != len(reps):
            raise ValueError(f"versions.replicate_seeds={reps}: each must be one of adapters.seeds {self.adapters.seeds}, "
                             f"other than versions.seed={self.versions.seed}, and appear once; at least one (the loop claims are over "
                             f"independent loop runs, and mol_evaluate reads data/mol/versions_replicates)")
        if self.world.neutral_share + self.world.weak_cue_share > 0.8:
            raise ValueError("world.neutral_share + world.weak_cue_share must be ≤ 0.8 (most prompts keep a strong cue)")
        return self
