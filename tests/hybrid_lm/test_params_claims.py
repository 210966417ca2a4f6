"""hybrid_lm params (clear errors before any work), claim specs, per-unit tables, preconditions,
FLOP counting and one short training run."""
from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import yaml

from paperworks.core.claims import MAX_HEADLINE, EvidenceParams, evaluate_claims
from paperworks.core.params import ParamsError, validate_section
from paperworks.core.profile import compose
from paperworks.hybrid_lm import corpus as C
from paperworks.hybrid_lm import report
from paperworks.hybrid_lm.params import Params, TrainParams
from paperworks.hybrid_lm.train import forward_flops_per_token, train_run

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = yaml.safe_load((ROOT / "conf/default/hybrid_lm.yaml").read_text())
EV = EvidenceParams()


def raw(**changes) -> dict:
    d = copy.deepcopy(DEFAULT)
    for path, value in changes.items():
        *head, last = path.split("__")
        node = d
        for k in head:
            node = node[k]
        node[last] = value
    return d


def error(d: dict) -> str:
    with pytest.raises(ParamsError) as e:
        validate_section("hybrid_lm", Params, d)
    return str(e.value)


@pytest.mark.parametrize("profile", ["smoke", "default", "paper"])
def test_every_profile_validates(profile):
    p = validate_section("hybrid_lm", Params, compose(profile, ROOT / "conf")["hybrid_lm"])
    assert p.run_names() and all(p.model_config_for(v) for v in p.variants)


def test_default_grid_tests_every_headline_claim_and_paper_keeps_the_rest():
    """The budget shrinks the default grid, never the headline: every headline claim's two arms train in
    `default`; every variant a claim names trains in `paper`; and what `default` leaves out is only
    exploratory (its claims then read "not tested: <variant> in the grid")."""
    default, paper = (validate_section("hybrid_lm", Params, compose(name, ROOT / "conf")["hybrid_lm"])
                      for name in ("default", "paper"))
    specs = report.claim_specs(default)
    headline_arms = {v for s in specs if s.role == "headline" for v in (s.method, s.baseline)}
    assert headline_arms <= set(default.grid.variants)
    assert {v for s in specs for v in (s.method, s.baseline)} <= set(paper.grid.variants)
    left_out = {v for s in specs for v in (s.method, s.baseline)} - set(default.grid.variants)
    assert all(s.role == "exploratory" for s in specs if {s.method, s.baseline} & left_out)


def test_chunk_times_bound_rule_names_the_variant_and_keys():
    d = raw()
    d["variants"]["hybrid"]["overrides"] = {"kda": {"chunk_size": 64, "lower_bound": -2.5}}
    msg = error(d)
    assert "variants.hybrid" in msg and "chunk_size * |kda.lower_bound|" in msg and "160" in msg
    d = raw()
    d["model"]["kda"]["lower_bound"] = -5.0    # the base model breaks every KDA variant
    assert "overflows float32" in error(d)
    d["model"]["kda"]["chunk_size"] = 16       # 16 × 5 = 80 is allowed
    validate_section("hybrid_lm", Params, d)


def test_bad_values_fail_with_the_key_named():
    assert "grid.variants: unknown variants ['hybird']" in error(raw(grid__variants=["hybird"]))
    assert "n_keys" in error(raw(corpus__mqar_pairs=[8, 100]))
    assert "more than context" in error(raw(corpus__mqar_pairs=[70], corpus__n_keys=80))
    assert "eval_multiples" in error(raw(corpus__eval_multiples=[2, 4]))
    assert "corpus.mix" in error(raw(corpus__mix={"mqar": 1.0, "poetry": 1.0}))
    assert "vocab_size" in error(raw(model__vocab_size=99))
    assert "layer_pattern" in error(raw(variants__dense={"overrides": {"layer_pattern": "AXB"}}))
    assert "hybrid_lm.train.stepz" in error(raw(train__stepz=3))
    assert "logs < 4 points" in error(raw(train__steps=20, train__log_every=10))
    assert "seeds" in error(raw(grid__seeds=[0, 0]))


def test_claim_specs_headline_limit_unique_ids_and_preconditions():
    p = Params.model_validate(DEFAULT)
    specs = report.claim_specs(p, tokens=1234)
    assert sum(s.role == "headline" for s in specs) == 3 <= MAX_HEADLINE
    assert [s.id for s in specs[:3]] == ["hybrid_vs_dense_loss", "kda_vs_head_gate_timescale", "qb_vs_aux_maxvio"]
    assert len({s.id for s in specs}) == len(specs) and all(s.table == s.id for s in specs)
    for s in specs:
        for arm in (s.method, s.baseline):
            assert {f"{arm} converged", f"{arm} learned", f"{arm} in the grid"} <= set(s.preconditions)
        assert f"active parameters matched: {s.method} vs {s.baseline}" in s.preconditions
        assert "equal training tokens" in s.preconditions and s.cluster == "seed"
    loss = specs[0]
    assert loss.kind == "non_inferiority" and loss.margin == p.claims.loss_margin and "1,234 tokens" in loss.statement
    assert "MQAR sweep passes the KDA state capacity" in next(s for s in specs if s.id == "global_layer_needed").preconditions


def fake_run(rng, loss_end: float, active: int, n_heldout: int = 12, moe: bool = False, tokens: int = 1000) -> dict:
    """A run record with the fields the report reads (values synthetic, structure real)."""
    steps = 20
    loss = list(np.linspace(4.0, loss_end, steps // 2)) + [loss_end] * (steps // 2)
    hist = [{"step": i + 1, "loss": float(x), "tokens": (i + 1) * tokens // steps, "cpu_s": 0.1 * (i + 1)} for i, x in enumerate(loss)]
    recall = {}
    for name in ("mqar_ctx1", "mqar_ctx2", "timescale_ctx1", "timescale_ctx2", "mqar_pairs8", "mqar_pairs48"):
        kind = "long" if name.startswith("timescale") else "mqar"
        recall[name] = {"seq": [0, 0, 1], "pos": [5, 7, 5], "kind": [kind] * 3, "hit": list(rng.integers(0, 2, 3))}
    return {"history": hist, "heldout_loss": list(loss_end + 0.1 * rng.random(n_heldout)), "recall": recall,
            "step_maxvio": list(rng.random(steps)) if moe else [], "load_log": [],
            "params": {"active": active, "total": active}, "cost": {"tokens": tokens, "flops_per_token_fwd": 1e5,
                                                                   "train_flops": 3e5 * tokens, "cpu_s": 2.0},
            "probe": {"stream_rms": [1.0, 2.0]}}


def small_params(**grid) -> Params:
    # its own corpus (not the default's): a pair sweep past the capacity (48 > head_dim 32), chance 1/64
    d = raw(corpus__context=128, corpus__n_keys=64, corpus__n_values=64, corpus__eval_multiples=[1, 2],
            corpus__mqar_pairs=[8, 48])
    d["grid"].update(grid)
    return Params.model_validate(d)


def test_unit_tables_pair_arms_by_seed_and_nest_units():
    rng = np.random.default_rng(0)
    p = small_params(variants=["dense", "hybrid", "moe_aux", "moe_qb"], seeds=[0, 1])
    runs = {v: {s: fake_run(rng, 2.0 + 0.1 * s, 1000, moe=v.startswith("moe")) for s in (0, 1)} for v in p.grid.variants}
    tables = report.unit_tables(p, runs, EV)
    # arms without a trained partner get no table (kda_only, hybrid_headgate, attnres, latent_moe not in the grid)
    assert "global_layer_needed" not in tables and "kda_vs_head_gate_loss" not in tables
    loss = tables["hybrid_vs_dense_loss"]
    assert set(loss["arm"]) == {"hybrid", "dense"} and set(loss["cluster"]) == {"0", "1"}
    assert len(loss) == 2 * 2 * 12
    row = loss[(loss.arm == "hybrid") & (loss.cluster == "1") & (loss.unit == "3")]["value"].item()
    assert row == runs["hybrid"][1]["heldout_loss"][3]
    recall = tables["hybrid_vs_dense_recall_long"]   # only the longest context's queries
    assert all(u.startswith("mqar_ctx2/") for u in recall["unit"]) and len(recall) == 2 * 2 * 3
    maxvio = tables["qb_vs_aux_maxvio"]              # the last convergence_tail share of the steps
    assert sorted(set(maxvio["unit"].astype(int))) == list(range(17, 21))


def test_preconditions_fail_for_missing_arms_unmatched_parameters_and_unequal_tokens():
    rng = np.random.default_rng(1)
    p = small_params(variants=["dense", "hybrid"], seeds=[0, 1])
    runs = {"dense": {s: fake_run(rng, 2.0, 1000) for s in (0, 1)}, "hybrid": {s: fake_run(rng, 2.0, 1200) for s in (0, 1)}}
    pre = {r["name"]: r for r in report.preconditions(p, runs, EV)}
    assert pre["dense converged"]["passed"] and pre["hybrid learned"]["passed"]
    assert not pre["active parameters matched: hybrid vs dense"]["passed"]       # 1200 vs 1000: gap 0.17 > 0.10
    assert not pre["kda_only in the grid"]["passed"] and not pre["kda_only converged"]["passed"]
    assert pre["equal training tokens"]["passed"]
    runs["hybrid"][1]["cost"]["tokens"] = 999
    assert not {r["name"]: r for r in report.preconditions(p, runs, EV)}["equal training tokens"]["passed"]
    # a loss that never moved has "converged" but has not learned
    runs["dense"][0]["history"] = [dict(h, loss=4.0) for h in runs["dense"][0]["history"]]
    pre = {r["name"]: r for r in report.preconditions(p, runs, EV)}
    assert pre["dense converged"]["passed"] and not pre["dense learned"]["passed"]


def test_claims_evaluate_end_to_end_with_not_tested_and_measured_verdicts():
    rng = np.random.default_rng(2)
    p = small_params(variants=["dense", "hybrid"], seeds=[0, 1, 2])
    runs = {"dense": {s: fake_run(rng, 2.5, 1000) for s in range(3)}, "hybrid": {s: fake_run(rng, 2.0, 1050) for s in range(3)}}
    claims = {c["id"]: c for c in evaluate_claims(report.claim_specs(p), report.unit_tables(p, runs, EV),
                                                  report.preconditions(p, runs, EV), EV, seed=0, track="hybrid_lm")}
    assert claims["hybrid_vs_dense_loss"]["verdict"].startswith("non-inferior")
    assert claims["hybrid_vs_dense_loss"]["diff"] == pytest.approx(-0.5, abs=0.06)
    assert claims["kda_vs_head_gate_timescale"]["verdict"].startswith(
        "not tested: hybrid_headgate in the grid, hybrid_headgate converged, hybrid_headgate learned, "
        "active parameters matched: hybrid vs hybrid_headgate")
    compute = claims["hybrid_vs_dense_compute"]   # hybrid reaches dense's final loss earlier on every seed
    assert compute["units"]["unit"] == "seed" and compute["diff"] < 0


def test_flops_attention_grows_with_context_kda_does_not():
    p = Params.model_validate(DEFAULT)
    dense, kda = p.model_config_for("dense"), p.model_config_for("kda_only")
    assert forward_flops_per_token(dense, 1024) - forward_flops_per_token(dense, 128) == pytest.approx(
        4 * 2 * 2 * dense.num_heads * dense.head_dim * (1024 - 128) / 2)
    assert forward_flops_per_token(kda, 1024) == forward_flops_per_token(kda, 128)
    assert forward_flops_per_token(kda, 16) < forward_flops_per_token(kda, 128)   # chunk capped by the context


def test_short_training_run_learns_logs_routing_and_counts_cost():
    d = raw(corpus__context=32, corpus__mqar_pairs=[4], corpus__eval_pairs=4, model__hidden_size=32, model__head_dim=16,
            model__kda={"chunk_size": 16}, model__mla_kv_rank=8, model__mlp_hidden=64, model__moe={"expert_hidden": 32})
    p = Params.model_validate(d)
    data = C.mixture(np.random.default_rng(0), p.corpus, 64)
    tp = TrainParams(steps=24, batch_size=8, lr=1e-2, warmup_steps=2, log_every=3)
    model, rec = train_run(p.model_config_for("moe_qb"), tp, data, seed=0)
    losses = [h["loss"] for h in rec["history"]]
    assert len(losses) == 8 and losses[-1] < 0.9 * losses[0]
    assert len(rec["step_maxvio"]) == 24 and all(h["maxvio"] >= 0 for h in rec["history"])
    assert rec["cost"]["tokens"] == 24 * 8 * 32 and rec["cost"]["cpu_s"] > 0
    assert rec["cost"]["train_flops"] == pytest.approx(3 * rec["cost"]["flops_per_token_fwd"] * rec["cost"]["tokens"])
    shares = np.asarray(rec["load_log"][-1]["share"])
    assert shares.shape == (4, 8) and np.allclose(shares.sum(1), 1)
    # the same seed gives the same run
    _, again = train_run(p.model_config_for("moe_qb"), tp, data, seed=0)
    assert [h["loss"] for h in again["history"]] == losses


def test_recall_claims_need_an_arm_above_chance():
    rng = np.random.default_rng(3)
    p = small_params(variants=["dense", "hybrid"], seeds=[0, 1])
    runs = {v: {s: fake_run(rng, 2.0, 1000) for s in (0, 1)} for v in ("dense", "hybrid")}
    for by in runs.values():      # every query right: far above chance (1/64)
        for r in by.values():
            for q in r["recall"].values():
                q["hit"] = [1] * len(q["hit"])
    name = "an arm recalls above chance: hybrid_vs_dense_recall_long"
    spec = next(s for s in report.claim_specs(p) if s.id == "hybrid_vs_dense_recall_long")
    assert name in spec.preconditions
    assert {r["name"]: r for r in report.preconditions(p, runs, EV)}[name]["passed"]
    for by in runs.values():      # no hit in 6 queries per arm: the lower bound (0) is not above chance
        for r in by.values():
            r["recall"]["mqar_ctx2"]["hit"] = [0, 0, 0]
    pre = {r["name"]: r for r in report.preconditions(p, runs, EV)}
    assert not pre[name]["passed"] and "chance 0.016" in pre[name]["detail"]
    claims = {c["id"]: c for c in evaluate_claims(report.claim_specs(p), report.unit_tables(p, runs, EV),
                                                  report.preconditions(p, runs, EV), EV, seed=0, track="hybrid_lm")}
    assert claims["hybrid_vs_dense_recall_long"]["verdict"] == f"not tested: {name}"


def test_auxiliary_loss_reaches_the_gradient():
    """The MoE auxiliary loss is trained on (core.lm.sft_loss would drop it): with the same data and
    seed, a larger coefficient moves the router differently."""
    d = raw(corpus__context=32, corpus__mqar_pairs=[4], corpus__eval_pairs=4, model__hidden_size=32, model__head_dim=16,
            model__kda={"chunk_size": 16}, model__mla_kv_rank=8, model__mlp_hidden=64, model__moe={"expert_hidden": 32})
    data = C.mixture(np.random.default_rng(0), Params.model_validate(d).corpus, 16)
    tp = TrainParams(steps=4, batch_size=4, warmup_steps=0, log_every=1)
    routers = []
    for coef in (0.0, 10.0):
        d["variants"]["moe_aux"]["overrides"]["moe"]["aux_loss_coef"] = coef
        model, rec = train_run(Params.model_validate(d).model_config_for("moe_aux"), tp, data, seed=0)
        routers.append(model.mlps[0].router.weight.detach().clone())
        assert ("aux_loss" in rec["history"][-1]) == (coef > 0)
    assert not np.allclose(routers[0].numpy(), routers[1].numpy())
