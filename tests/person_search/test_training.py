"""Training to a plateau (early stopping on held-out sim families) and the per-seed evidence plumbing."""
import dataclasses

import numpy as np
import pytest
import torch
from dvclive import Live

from paperworks.core.claims import EvidenceParams, convergence, live_curve
from paperworks.person_search.data import CorpusConfig, attribute_keys, make_corpus
from paperworks.person_search.embed import MINILM_DIM, view_table
from paperworks.person_search.evaluate import preconditions, query_units, rerank_flips, sum_flips, twin_order
from paperworks.person_search.experts import ExpertConfig, train_cloze
from paperworks.person_search.text import VIEWS
from paperworks.person_search.towers import EarlyStopping, EncoderConfig, eval_points, holdout_families, train_dual_encoder


def test_early_stopping_waits_patience_and_restores_the_best_weights():
    model = torch.nn.Linear(2, 1)
    stop = EarlyStopping(patience=2, min_rel_delta=0.1)
    decisions = []
    for i, loss in enumerate([1.0, 0.5, 0.47, 0.6]):
        with torch.no_grad():
            model.bias.fill_(float(i))
        decisions.append(stop.update(loss, model))
    # 0.47 is not 10 % better than 0.5: evaluations 3 and 4 do not reset patience, so it stops at the 4th
    assert decisions == [False, False, False, True]
    assert stop.best == 0.5 and stop.best_eval == 1
    # but 0.47 is the lowest held-out loss: its weights are the ones kept
    assert stop.kept_loss == 0.47 and stop.kept_eval == 2
    stop.restore(model)
    assert model.bias.item() == 2.0
    with pytest.raises(FloatingPointError):
        EarlyStopping(1, 0.0).update(float("nan"), model)


def test_early_stopping_also_waits_for_the_convergence_checks_plateau():
    """With ``plateau_tail`` the stop needs patience *and* a curve the evidence standard's check passes."""
    model = torch.nn.Linear(2, 1)
    ev = EvidenceParams()
    # the held-out curve of `encoder cnn seed 1` in the first issue-13 default run (rounded): patience
    # alone stopped it at its 29th point, where the check still failed (the last 6 points 5.6 % below
    # the 6 before)
    curve = [3.903, 3.711, 3.431, 3.382, 3.091, 2.966, 2.948, 2.755, 2.583, 2.616, 2.495, 2.447, 2.290, 2.237, 2.208, 2.136, 2.111, 2.051, 2.044, 1.999, 1.982, 1.964, 1.924, 1.914, 1.882, 1.883, 1.881, 1.871, 1.865]
    plain = EarlyStopping(4, 0.01)
    assert [plain.update(v, model) for v in curve].index(True) == 28
    assert not convergence("c", curve, ev)["passed"]
    stop = EarlyStopping(4, 0.01, ev.convergence_tail, ev.convergence_rel_tol, ev.convergence_min_points)
    assert not any(stop.update(v, model) for v in curve)
    longer = curve + [curve[-1]] * 20  # had it levelled off: it stops as soon as the check passes
    n = len(curve) + next(i + 1 for i, v in enumerate(longer[len(curve):]) if stop.update(v, model))
    assert convergence("c", longer[:n], ev)["passed"] and not convergence("c", longer[: n - 1], ev)["passed"]
    # a steeper curve (3 % per evaluation) never passes within 40 points: no stop
    steep = EarlyStopping(4, 0.05, ev.convergence_tail, ev.convergence_rel_tol, ev.convergence_min_points)
    assert not any(steep.update(3.0 * 0.97 ** i, model) for i in range(40))
    # flat at chance from the start (the verifiers): no stop before min_evals points
    flat = EarlyStopping(4, 0.01, ev.convergence_tail, ev.convergence_rel_tol, ev.convergence_min_points)
    assert [flat.update(0.693, model) for _ in range(10)] == [False] * 9 + [True]


def test_eval_points_and_holdout_are_whole_families():
    assert eval_points(10, 2) == {4, 9} and eval_points(3, 5) == {0, 1, 2} and eval_points(7, 1) == {6}
    families = np.repeat(np.arange(20), 4)
    held = holdout_families(families, 0.2, seed=0)
    assert held.sum() == 16 and all(held[families == f].all() or not held[families == f].any() for f in range(20))


@pytest.fixture(scope="module")
def corpus():
    cfg = CorpusConfig(n_train_families=10, family_size=3, n_targets=4, distractor_ratio=2.0, val_fraction=0.5,
                       drop_scene_prob=0.0, width=16, height=16)
    c = make_corpus(cfg, seed=0)
    texts, ids, _, _ = view_table(list(c["train"]["caption"]))
    emb = np.random.default_rng(0).standard_normal((len(texts), MINILM_DIM)).astype(np.float32)
    return c, ids, emb


def test_encoder_stops_when_the_held_out_loss_is_flat_and_logs_it(corpus, tmp_path):
    c, ids, emb = corpus
    keys = attribute_keys(c["train"])
    view_keys = np.stack([keys[v] for v in VIEWS], axis=1)
    # a learning rate of ~0 keeps the held-out loss flat: training must stop after `patience` more evaluations
    cfg = EncoderConfig("cnn", embed_dim=8, epochs=50, families_per_batch=2, lr=1e-12, patience=3, min_rel_delta=0.01,
                        evals_per_epoch=2, holdout_fraction=0.2)
    with Live(str(tmp_path / "live"), dvcyaml=False, save_dvc_exp=False, report=None) as live:
        train_dual_encoder(cfg, c["train_images"], c["train"]["family"].to_numpy(), ids, view_keys, emb, seed=1, live=live)
    val = live_curve(tmp_path / "live/plots/metrics/val/loss.tsv")
    assert len(val) == 4  # the first evaluation is the best; three more without improvement, then stop
    assert len(live_curve(tmp_path / "live/plots/metrics/train/loss.tsv")) == 4


def test_patience_restarts_after_a_decay():
    model = torch.nn.Linear(2, 1)
    stop = EarlyStopping(patience=2, min_rel_delta=0.1)
    assert [stop.update(v, model) for v in (1.0, 1.0, 1.0)] == [False, False, True] and stop.stalled()
    stop.restart_patience()
    assert not stop.stalled()
    # two more evaluations without improvement are needed again, counted from the restart
    assert [stop.update(1.0, model) for _ in range(2)] == [False, True] and stop.best_eval == 0


@pytest.mark.parametrize("warmup_epochs, first_rates", [(0.0, [1e-12]), (1.0, [7.5e-13])])
def test_step_on_plateau_decays_the_rate_at_each_stall_before_stopping(corpus, tmp_path, warmup_epochs, first_rates):
    c, ids, emb = corpus
    keys = attribute_keys(c["train"])
    view_keys = np.stack([keys[v] for v in VIEWS], axis=1)
    # a flat held-out loss stalls every `patience` evaluations: two stalls decay the rate, the third stops.
    # 8 training families in pairs: 4 steps per epoch, evaluations after steps 2 and 4 of each epoch, so a
    # 1-epoch warm-up is at 3/4 of the rate at the first evaluation and at the full rate from the second
    cfg = EncoderConfig("cnn", embed_dim=8, epochs=50, families_per_batch=2, lr=1e-12, patience=3, min_rel_delta=0.01,
                        evals_per_epoch=2, holdout_fraction=0.2, schedule="step_on_plateau", warmup_epochs=warmup_epochs,
                        lr_decay=0.3, lr_decays=2)
    with Live(str(tmp_path / "live"), dvcyaml=False, save_dvc_exp=False, report=None) as live:
        train_dual_encoder(cfg, c["train_images"], c["train"]["family"].to_numpy(), ids, view_keys, emb, seed=1, live=live)
    assert len(live_curve(tmp_path / "live/plots/metrics/val/loss.tsv")) == 10  # 1 + 3 + 3 + 3
    lr = np.array(live_curve(tmp_path / "live/plots/metrics/train/lr.tsv"))
    np.testing.assert_allclose(lr, first_rates + [1e-12] * (4 - len(first_rates)) + [3e-13] * 3 + [9e-14] * 3, rtol=1e-6)
    with pytest.raises(ValueError, match="not one of"):
        train_dual_encoder(dataclasses.replace(cfg, schedule="cosine"), c["train_images"], c["train"]["family"].to_numpy(),
                           ids, view_keys, emb, seed=1, live=None)


def test_expert_trains_to_its_cap_while_the_held_out_loss_falls(corpus, tmp_path):
    c, _, _ = corpus
    cfg = ExpertConfig(epochs=3, families_per_batch=2, width=8, patience=50, evals_per_epoch=2)
    with Live(str(tmp_path / "live"), dvcyaml=False, save_dvc_exp=False, report=None) as live:
        train_cloze(cfg, c["train_images"], c["train"], seed=2, live=live)
    assert len(live_curve(tmp_path / "live/plots/metrics/val/loss.tsv")) == 6  # 2 evaluations × 3 epochs


def test_units_are_queries_inside_training_runs_and_gate_needs_every_run():
    ap = {0: {"fusion": np.array([1.0, 0.5]), "view_full": np.array([0.5, 0.5])},
          1: {"fusion": np.array([0.2, 0.0]), "view_full": np.array([0.1, 0.0])}}
    t = query_units(ap, np.array([7, 9]))
    assert len(t) == 8 and set(t["cluster"]) == {"seed 0", "seed 1"}
    assert t[(t["arm"] == "fusion") & (t["cluster"] == "seed 1") & (t["unit"] == "7")]["value"].item() == 0.2
    ev = EvidenceParams(alpha=0.05, confidence=0.95, bootstrap_resamples=200, convergence_tail=0.2,
                        convergence_rel_tol=0.05, convergence_min_points=10)
    flat = [1.0] * 12
    falling = list(np.linspace(2.0, 1.0, 12))
    conv, gate = preconditions({"a": flat, "b": flat}, {0: 0.3, 1: 0.5}, ev)
    assert conv["passed"] and gate["passed"]
    conv, gate = preconditions({"a": flat, "b": falling}, {0: 0.3, 1: 0.0}, ev)
    assert not conv["passed"] and not gate["passed"]  # one run's gate never keeps: not tested


def test_flips_sum_over_runs():
    run = {"gated": {"stage1_top1_correct": 4, "flipped_to_wrong": 1, "flip_rate": 0.25, "fixed": 2, "net_top1_gain": 1,
                     "flipped_among_confident": 0, "confident_and_correct": 3}}
    other = {"gated": dict(run["gated"], stage1_top1_correct=6, flipped_to_wrong=4, flip_rate=0.6667)}
    s = sum_flips([run, other])["gated"]
    assert s["stage1_top1_correct"] == 10 and s["flipped_to_wrong"] == 5 and s["flip_rate"] == 0.5


def test_rerank_flips_by_hand():
    stage1 = np.array([True, True, False, False, False, True])
    new = {"cloze": np.array([True, False, True, False, True, False])}
    in_pool = np.array([True, True, True, True, False, True])
    kept = np.array([False, True, False, False, False, False])
    top = np.array([True, True, True, False, False, False])
    twin = np.array([False, True, True, False, False, False])
    f = rerank_flips(stage1, new, in_pool, kept, top, twin)["cloze"]
    # flipped: queries 1 and 5; fixed: query 2 only (query 4's target is not in the pool)
    assert (f["stage1_top1_correct"], f["flipped_to_wrong"], f["fixed"], f["net_top1_gain"]) == (3, 2, 1, -1)
    assert f["flip_rate"] == round(2 / 3, 4) and f["flipped_among_confident"] == 1 and f["confident_and_correct"] == 1
    assert (f["top_quartile_queries"], f["top_quartile_stage1_correct"], f["top_quartile_flipped"], f["top_quartile_fixed"]) == (3, 2, 1, 1)
    assert (f["blind_twin_queries"], f["blind_twin_stage1_correct"], f["blind_twin_flipped"]) == (2, 1, 1)
    assert f["coarse_queries"] == 0  # no coarse mask given: none
    coarse = np.array([False, True, True, False, False, True])
    c = rerank_flips(stage1, new, in_pool, kept, top, twin, coarse)["cloze"]
    # coarse 1 (right, kept, flipped), 2 (wrong, fixed), 5 (right, not kept, flipped)
    assert (c["coarse_queries"], c["coarse_stage1_correct"], c["coarse_confident_and_correct"],
            c["coarse_flipped"], c["coarse_fixed"]) == (3, 2, 1, 2, 1)


def test_twin_order_by_hand():
    pool = np.array([[5, 7, 9], [1, 2, 3], [4, 6, 8], [10, 11, 12]])
    targets = np.array([7, 3, 4, 10])
    twins = np.array([9, -1, 99, 10 + 2])  # query 1: no twin; query 2: twin not in the pool
    scores = {"fusion": np.array([[0.0, 3.0, 1.0], [0, 0, 0], [0, 0, 0], [1.0, 0.0, 0.5]]),
              "cloze": np.array([[0.0, 1.0, 3.0], [0, 0, 0], [0, 0, 0], [1.0, 0.0, 1.0]])}
    out = twin_order(scores, pool, targets, twins)
    # pairs: queries 0 and 3; fusion puts the target first in both, cloze in neither (a tie is not "above")
    assert out["fusion"] == {"pairs_in_pool": 2, "target_above_twin": 2}
    assert out["cloze"] == {"pairs_in_pool": 2, "target_above_twin": 0}
