"""The claim tables and preconditions read the run records as the issue asks: identical step
indices across methods, paired seeds, GRPO judged on validation, GRPO's lr chosen on validation."""
from __future__ import annotations

import pytest

from paperworks.core.claims import load_evidence
from paperworks.core.profile import compose
from paperworks.selfdistill.params import Params
from paperworks.selfdistill.report import pick_grpo_lr, preconditions, seed_units  # pick_grpo_lr lives in pipeline


def _record(method, seed, accs, ents, steps=(0, 300, 600), pass1=0.5):
    hist = [{"step": s, "acc": a, "entropy": e, "entropy_sum": e} for s, a, e in zip(steps, accs, ents)]
    return {"method": method, "seed": seed, "steps": steps[-1], "history": hist, "final": {"pass1": pass1},
            "config": {"lr": 1e-3}, "cost": {"forward_passes_per_step": 2}}


def _runs(grpo_end=0.4, grpo_steps=(0, 300, 600)):
    return {"reverse_kl": [_record("reverse_kl", s, [0.3, 0.6, 0.2], [0.5, 0.3, 0.1]) for s in range(5)],
            "sr_opsd": [_record("sr_opsd", s, [0.3, 0.5, 0.45], [0.5, 0.48, 0.47]) for s in range(5)],
            "grpo": [_record("grpo", s, [0.3, 0.35, grpo_end], [0.5, 0.5, 0.5], steps=grpo_steps) for s in range(5)]}


def test_units_are_paired_seeds_and_read_at_identical_steps():
    units = seed_units(_runs())
    drop = units["entropy_drop"]
    assert sorted(drop[drop.arm == "reverse_kl"]["value"].round(6)) == [0.4] * 5
    assert sorted(drop[drop.arm == "sr_opsd"]["value"].round(6)) == [0.03] * 5
    assert set(units["peak_to_final_drop"].query("arm == 'reverse_kl'")["value"].round(6)) == {0.4}
    se = units["entropy_start_end"]
    assert set(se.arm) == {"reverse_kl_start", "reverse_kl_end"} and len(se) == 10
    with pytest.raises(ValueError, match="identical steps"):
        seed_units(_runs(grpo_steps=(0, 250, 600)))


def test_grpo_precondition_reads_validation_start_and_end():
    p = Params.model_validate(compose("default")["selfdistill"])
    ev = load_evidence()
    base_loss = [1.0] * 20
    by_name = lambda runs: {r["name"]: r for r in preconditions(p, runs, base_loss, ev, [0.5] * 12)}
    fell = by_name(_runs(grpo_end=0.2))
    assert not fell["GRPO does not end below its starting validation accuracy"]["passed"]
    held = by_name(_runs(grpo_end=0.3))
    assert held["GRPO does not end below its starting validation accuracy"]["passed"]
    assert held["GRPO ran the same budget"]["passed"] and held["enough paired seeds"]["passed"]
    assert held["base model's validation accuracy plateaued"]["passed"]
    rising = {r["name"]: r for r in preconditions(p, _runs(), base_loss, ev, [0.1 * i for i in range(12)])}
    assert not rising["base model's validation accuracy plateaued"]["passed"]
    fewer = _runs()
    fewer["grpo"] = fewer["grpo"][:4]
    assert not by_name(fewer)["enough paired seeds"]["passed"]


def test_pick_grpo_lr_takes_the_best_final_validation_accuracy():
    tuning = {1e-4: _record("grpo", 1000, [0.3, 0.3, 0.32], [0.5] * 3), 3e-4: _record("grpo", 1000, [0.3, 0.5, 0.4], [0.5] * 3),
              1e-3: _record("grpo", 1000, [0.3, 0.6, 0.1], [0.5] * 3)}
    lr, table = pick_grpo_lr(tuning)
    assert lr == 3e-4 and list(table["lr"]) == [1e-4, 3e-4, 1e-3]
