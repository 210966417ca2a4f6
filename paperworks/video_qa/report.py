"""From per-question logits to policies, claims, summaries and figures (pure functions on loaded tables).

Everything the gate needs is fitted on **dev** only (temperature, τ); **test** gives every number
the claims rest on. The routers compared with the margin exit the same number of test questions
as the margin at its dev-chosen τ (the k most confident by their own signal; random: k at random).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from paperworks.core.adaptive import (
    choose_threshold,
    confidence_signals,
    expected_calibration_error,
    fit_temperature,
    random_exit_mask,
    reliability_bins,
    threshold_sweep,
)
from paperworks.core.claims import ClaimSpec, EvidenceParams, combine, convergence, learned, precondition, unit_table
from paperworks.video_qa.params import Params
from paperworks.video_qa.pipeline import VARIANTS, Stage2Trace, cpu_ms
from paperworks.video_qa.world import N_OPTIONS, Question

RESULT_SCHEMA = pa.schema([
    ("split", pa.string()), ("video", pa.string()), ("qid", pa.string()), ("qtype", pa.string()), ("answer", pa.int64()),
    ("variant", pa.string()), *[(f"logit_{k}", pa.float64()) for k in range(N_OPTIONS)], ("frames", pa.int64()),
    ("calls", pa.int64()), ("win_start", pa.int64()), ("win_end", pa.int64()), ("passed", pa.bool_()), ("rounds", pa.int64()),
    ("hit", pa.bool_()),
])
LOGITS = [f"logit_{k}" for k in range(N_OPTIONS)]
POLICIES = ("global", "always_stage2", "cader", "cader_no_rgr", "cader_1_round", "router_max_prob", "router_entropy",
            "router_random")
CONVERGED = "every trained model converged"
ORACLE = "oracle window gains on local questions"
CROP = "cropping costs on global questions"
SPLITS_GATE = "the gate exits some test questions and routes others"
ENCODER_CURVE = "plots/video_qa/live_encoder/plots/metrics/heldout_loss.tsv"   # held-out scenes: memorising is not progress


def training_curves(seeds) -> dict[str, str]:
    """The curve the plateau check reads of every trained model: the encoder and each draw's answerer and scorer."""
    out = {"encoder": ENCODER_CURVE}
    for s in seeds:
        out[f"answerer (seed {s})"] = f"plots/video_qa/seed_{s}/live_answerer/plots/metrics/loss.tsv"
        out[f"scorer (seed {s})"] = f"plots/video_qa/seed_{s}/live_scorer/plots/metrics/loss.tsv"
    return out


def results_frame(records: list[dict]) -> pd.DataFrame:
    df = pd.DataFrame(records, columns=RESULT_SCHEMA.names)
    return df.sort_values(["split", "qid", "variant"], kind="stable").reset_index(drop=True)


# ---------------------------------------------------------------- per-split views
@dataclass(frozen=True)
class Split:
    """One split's questions (sorted by qid) and each variant's logits, frames and calls, row-aligned."""

    qid: np.ndarray
    video: np.ndarray
    qtype: np.ndarray
    answer: np.ndarray
    logits: dict[str, np.ndarray]
    frames: dict[str, np.ndarray]
    calls: dict[str, np.ndarray]
    hit: dict[str, np.ndarray]
    passed: dict[str, np.ndarray]

    def correct(self, variant: str, temperature: float = 1.0) -> np.ndarray:
        return confidence_signals(self.logits[variant], temperature).prediction == self.answer


def split_view(df: pd.DataFrame, split: str) -> Split:
    d = df[df["split"] == split]
    if d.empty:
        raise ValueError(f"no {split} questions in the inference results")
    by = {v: g.sort_values("qid", kind="stable") for v, g in d.groupby("variant")}
    missing = [v for v in VARIANTS if v not in by]
    if missing:
        raise ValueError(f"inference results lack variants {missing}")
    first = by["stage1"]
    for v, g in by.items():
        if not np.array_equal(g["qid"].to_numpy(), first["qid"].to_numpy()):
            raise ValueError(f"variant {v} does not cover the same {split} questions as stage1")
    return Split(first["qid"].to_numpy(), first["video"].to_numpy(), first["qtype"].to_numpy(), first["answer"].to_numpy(),
                 {v: g[LOGITS].to_numpy() for v, g in by.items()}, {v: g["frames"].to_numpy() for v, g in by.items()},
                 {v: g["calls"].to_numpy() for v, g in by.items()}, {v: g["hit"].to_numpy() for v, g in by.items()},
                 {v: g["passed"].to_numpy() for v, g in by.items()})


def top_k_mask(score: np.ndarray, k: int) -> np.ndarray:
    """Exits for the ``k`` highest scores (ties by position: stable)."""
    mask = np.zeros(len(score), dtype=bool)
    mask[np.argsort(-score, kind="stable")[:k]] = True
    return mask


# ---------------------------------------------------------------- the gate and the policies
@dataclass(frozen=True)
class Evaluation:
    temperature: float
    tau: float
    correct: dict[str, np.ndarray]     # policy → test correctness
    frames: dict[str, np.ndarray]      # policy → test frames per question
    calls: dict[str, np.ndarray]
    exits: dict[str, np.ndarray]       # policy → exited at stage 1
    dev_sweep: pd.DataFrame
    test: Split
    dev: Split


def evaluate(df: pd.DataFrame, p: Params, seed: int) -> Evaluation:
    dev, test = split_view(df, "dev"), split_view(df, "test")
    temperature = fit_temperature(dev.logits["stage1"], dev.answer)
    c_dev = confidence_signals(dev.logits["stage1"], temperature)
    sweep = threshold_sweep(c_dev.margin, c_dev.prediction == dev.answer, dev.correct("stage2"))
    tau = choose_threshold(sweep, "accuracy")

    c = confidence_signals(test.logits["stage1"], temperature)
    c1 = c.prediction == test.answer
    exit_margin = c.margin >= tau
    k = int(exit_margin.sum())
    n = len(c1)
    exits = {"global": np.ones(n, bool), "always_stage2": np.zeros(n, bool), "cader": exit_margin,
             "cader_no_rgr": exit_margin, "cader_1_round": exit_margin,
             "router_max_prob": top_k_mask(c.max_prob, k), "router_entropy": top_k_mask(-c.entropy, k),
             "router_random": random_exit_mask(n, k / n, np.random.default_rng(seed))}
    fallback = {"cader_no_rgr": "stage2_no_rgr", "cader_1_round": "stage2_one_round"}
    correct, frames, calls = {}, {}, {}
    for pol, ex in exits.items():
        v2 = fallback.get(pol, "stage2")
        correct[pol] = np.where(ex, c1, test.correct(v2))
        frames[pol] = np.where(ex, test.frames["stage1"], test.frames[v2])
        calls[pol] = np.where(ex, test.calls["stage1"], test.calls[v2])
    return Evaluation(temperature, tau, correct, frames, calls, exits, sweep, test, dev)


def accuracy_vs_tau_all(evals: dict[int, Evaluation], p: Params) -> pd.DataFrame:
    """:func:`accuracy_vs_tau` of every training draw, with a ``seed`` column."""
    return pd.concat([accuracy_vs_tau(e, p).assign(seed=s) for s, e in sorted(evals.items())], ignore_index=True)


def accuracy_vs_tau(e: Evaluation, p: Params) -> pd.DataFrame:
    """Gated accuracy, exit share, frames and CPU-ms per question for a grid of τ, on dev and test."""
    taus = np.unique(np.append(np.linspace(0, 1, p.gate.sweep_points), [e.tau, p.gate.paper_tau]))
    rows = []
    for name, s in (("dev", e.dev), ("test", e.test)):
        margin = confidence_signals(s.logits["stage1"], e.temperature).margin
        c1, c2 = s.correct("stage1"), s.correct("stage2")
        for tau in taus:
            ex = margin >= tau
            f = np.where(ex, s.frames["stage1"], s.frames["stage2"])
            k = np.where(ex, s.calls["stage1"], s.calls["stage2"])
            rows.append({"split": name, "tau": float(tau), "exit_share": float(ex.mean()),
                         "accuracy": float(np.where(ex, c1, c2).mean()), "frames": float(f.mean()),
                         "cpu_ms": float(cpu_ms(f, k, p.cost).mean())})
    return pd.DataFrame(rows)


def reliability_frame(evals: dict[int, Evaluation], p: Params) -> pd.DataFrame:
    """Reliability bins of the global pass on test, the draws' questions pooled (each draw scaled by its own
    dev-fitted temperature)."""
    out = []
    for label in ("raw", "temperature"):
        cs = [confidence_signals(e.test.logits["stage1"], 1.0 if label == "raw" else e.temperature) for e in evals.values()]
        conf = np.concatenate([c.max_prob for c in cs])
        right = np.concatenate([c.prediction == e.test.answer for c, e in zip(cs, evals.values())])
        out.append(reliability_bins(conf, right, p.gate.reliability_bins).to_frame().assign(scaling=label))
    return pd.concat(out, ignore_index=True)


# ---------------------------------------------------------------- evidence standard
def question_units(evals: dict[int, Evaluation]) -> dict[str, pd.DataFrame]:
    """Test correctness per (policy, training draw, question): the cluster is the draw (``seed_<s>``), the
    level at which the answerer and the scorer were trained independently; the test questions are nested in
    it (every draw answers the same questions, so the interval covers retraining, not new videos)."""
    rows = [{"arm": pol, "cluster": f"seed_{s}", "unit": q, "value": float(v)}
            for s, e in sorted(evals.items()) for pol in POLICIES for q, v in zip(e.test.qid, e.correct[pol])]
    return {"accuracy": unit_table(rows)}


def _acc(correct: np.ndarray, mask: np.ndarray) -> float | None:
    return float(correct[mask].mean()) if mask.any() else None


def _every_draw(name: str, values: dict[int, float | None], passes, threshold, what: str) -> dict:
    """One precondition over the training draws: met when every draw's value passes; the value is the worst draw's."""
    known = [v for v in values.values() if v is not None]
    passed = len(known) == len(values) and all(passes(v) for v in known)
    shown = ", ".join(f"seed {s} {'–' if v is None else f'{v:.3f}'}" for s, v in sorted(values.items()))
    worst = None if not known else round(min(known), 4)
    return precondition(name, passed, value=worst, threshold=threshold, detail=f"{what} per draw: {shown}")


def preconditions(evals: dict[int, Evaluation], p: Params, curves: dict[str, list[float]], ev: EvidenceParams) -> list[dict]:
    """The track's preconditions, each required of every training draw (a claim over draws rests on all of them)."""
    out = []
    trained = []
    for name, curve in sorted(curves.items()):
        trained.append(convergence(f"{name} loss plateaued", curve, ev))
        trained.append(learned(f"{name} loss left its start", curve, p.claims.min_rel_improvement, ev))
    out.append(combine(CONVERGED, trained, "training checks"))
    gain, cost, share = {}, {}, {}
    for s, e in evals.items():
        t = e.test
        local, glob = t.qtype == "local", t.qtype == "global"
        s1 = t.correct("stage1")
        a_s1, a_or = _acc(s1, local), _acc(t.correct("oracle_window"), local)
        gain[s] = None if a_s1 is None else a_or - a_s1
        a_g, a_c = _acc(s1, glob), _acc(t.correct("random_crop"), glob)
        cost[s] = None if a_g is None else a_g - a_c
        share[s] = float(e.exits["cader"].mean())
    t = next(iter(evals.values())).test
    n_local, n_global = int((t.qtype == "local").sum()), int((t.qtype == "global").sum())
    out.append(_every_draw(ORACLE, gain, lambda v: v >= p.claims.min_local_gain, p.claims.min_local_gain,
                           f"oracle window of {p.pipeline.window_frames} frames minus the global pass on local questions "
                           f"(n={n_local})"))
    out.append(_every_draw(CROP, cost, lambda v: v >= p.claims.min_crop_cost, p.claims.min_crop_cost,
                           f"global pass minus a random crop of {p.pipeline.window_frames} frames on global questions "
                           f"(n={n_global})"))
    out.append(_every_draw(SPLITS_GATE, share, lambda v: 0.0 < v < 1.0, "strictly between 0 and 1",
                           "test exit share at each draw's dev-chosen τ"))
    return out


def claim_specs(p: Params) -> list[ClaimSpec]:
    pp = p.pipeline
    common = dict(table="accuracy", metric="test accuracy", unit="question", cluster="seed")
    gate = f"margin gate (τ chosen on dev) in front of stage 2 (≤ {pp.max_rounds} windows of {pp.window_frames} frames)"
    router = (CONVERGED, SPLITS_GATE)
    return [
        ClaimSpec(id="cader_vs_global", role="headline", method="cader", baseline="global",
                  statement=f"The {gate} beats the global pass alone ({pp.global_frames} uniform frames)",
                  preconditions=(CONVERGED, ORACLE), **common),
        ClaimSpec(id="cader_vs_always_stage2", role="headline", method="cader", baseline="always_stage2",
                  statement="Gating beats running stage 2 on every question (fewer frames too; see summary)",
                  preconditions=(CONVERGED, CROP), **common),
        ClaimSpec(id="margin_vs_random_router", role="headline", method="cader", baseline="router_random",
                  statement="The logit margin routes better than random routing at the same exit share",
                  preconditions=router, **common),
        ClaimSpec(id="margin_vs_max_prob_router", method="cader", baseline="router_max_prob",
                  statement="The margin routes better than max-probability at the same exit share", preconditions=router, **common),
        ClaimSpec(id="margin_vs_entropy_router", method="cader", baseline="router_entropy",
                  statement="The margin routes better than entropy at the same exit share", preconditions=router, **common),
        ClaimSpec(id="rgr_vs_no_resampling", method="cader", baseline="cader_no_rgr",
                  statement=f"Relevance-guided resampling ({pp.resample_frames} frames per reflection) beats reflection without it",
                  preconditions=(CONVERGED, ORACLE), **common),
        ClaimSpec(id="reflection_vs_one_round", method="cader", baseline="cader_1_round",
                  statement=f"Up to {pp.max_rounds} grounding rounds (reflection) beat a single round",
                  preconditions=(CONVERGED, ORACLE), **common),
    ]


def _summary_one(e: Evaluation, p: Params) -> dict:
    t = e.test
    out = {}
    for pol in POLICIES:
        row = {"accuracy": float(e.correct[pol].mean()), "exit_share": float(e.exits[pol].mean()),
               "frames": float(e.frames[pol].mean()), "cpu_ms": float(cpu_ms(e.frames[pol], e.calls[pol], p.cost).mean())}
        for qt in sorted(set(t.qtype)):
            row[f"accuracy_{qt}"] = float(e.correct[pol][t.qtype == qt].mean())
        out[pol] = row
    for v in ("oracle_window", "random_crop"):
        out[v] = {"accuracy": float(t.correct(v).mean()),
                  **{f"accuracy_{qt}": float(t.correct(v)[t.qtype == qt].mean()) for qt in sorted(set(t.qtype))}}
    return out


def _mean_over_draws(blocks: list[dict]) -> dict:
    """Key by key, the mean over the draws' values (None where no draw has one), rounded to 4 places."""
    out = {}
    for k in blocks[0]:
        vals = [b[k] for b in blocks if b[k] is not None]
        out[k] = None if not vals else round(float(np.mean(vals)), 4)
    return out


def summary(evals: dict[int, Evaluation], p: Params) -> dict:
    """Per policy: test accuracy (all and by question type), exit share, frames and CPU-ms per question, each the
    mean over the training draws."""
    per = [_summary_one(e, p) for e in evals.values()]
    return {pol: _mean_over_draws([d[pol] for d in per]) for pol in per[0]}


def _gate_one(e: Evaluation, p: Params) -> dict:
    t = e.test
    raw, scaled = (confidence_signals(t.logits["stage1"], T) for T in (1.0, e.temperature))
    c1 = scaled.prediction == t.answer
    paper = scaled.margin >= p.gate.paper_tau
    evid = np.isin(t.qtype, ["local", "counting"])
    return {
        "temperature": e.temperature, "tau_dev": e.tau, "exit_share_test": float(e.exits["cader"].mean()),
        "exit_accuracy_test": None if not e.exits["cader"].any() else float(c1[e.exits["cader"]].mean()),
        "accuracy_at_paper_tau": float(np.where(paper, c1, t.correct("stage2")).mean()),
        "exit_share_at_paper_tau": float(paper.mean()),
        "ece_raw": expected_calibration_error(raw.max_prob, raw.prediction == t.answer, p.gate.reliability_bins),
        "ece_scaled": expected_calibration_error(scaled.max_prob, c1, p.gate.reliability_bins),
        "grounding_hit_local_counting": None if not evid.any() else float(t.hit["stage2"][evid].mean()),
        "check_passed_share": float(t.passed["stage2"].mean()),
    }


def gate_block(evals: dict[int, Evaluation], p: Params) -> dict:
    """The gate of every training draw (``by_seed``) and, at the top level, the mean over the draws."""
    by_seed = {str(s): _gate_one(e, p) for s, e in sorted(evals.items())}
    e = next(iter(evals.values()))
    return {**_mean_over_draws(list(by_seed.values())), "tau_paper": p.gate.paper_tau, "draws": len(evals),
            "n_dev_questions": int(len(e.dev.qid)), "n_test_questions": int(len(e.test.qid)),
            "by_seed": {s: {k: None if v is None else round(float(v), 4) for k, v in b.items()} for s, b in by_seed.items()}}


def relevance_check_block(checks: dict[int, dict]) -> dict:
    """Each draw's fitted relevance-check threshold (its scorer's), and their mean."""
    thresholds = [c["relevance_threshold"] for c in checks.values()]
    return {"relevance_threshold_mean": round(float(np.mean(thresholds)), 4),
            "fitted_every_draw": all(c.get("fitted", False) for c in checks.values()),
            "base_rate": next((c["base_rate"] for c in checks.values() if "base_rate" in c), None),
            "by_seed": {str(s): c for s, c in sorted(checks.items())}}


# ---------------------------------------------------------------- figures
def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_accuracy_vs_tau(curve: pd.DataFrame, evals: dict[int, Evaluation], p: Params, path) -> None:
    """Every training draw's curves (dev dashed, test solid) and dev-chosen τ."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    ax2 = ax.twinx()
    for i, (seed, e) in enumerate(sorted(evals.items())):
        for split, style in (("dev", "--"), ("test", "-")):
            g = curve[(curve["split"] == split) & (curve["seed"] == seed)]
            first = i == 0
            ax.plot(g["tau"], g["accuracy"], style, color="tab:blue", alpha=0.6, lw=1,
                    label=f"gated accuracy ({split})" if first else None)
            ax2.plot(g["tau"], g["exit_share"], style, color="tab:orange", alpha=0.6, lw=1,
                     label=f"exit share ({split})" if first else None)
        ax.axvline(e.tau, color="tab:green", lw=1, alpha=0.6, label="τ chosen on dev (one line per draw)" if i == 0 else None)
    ax.axvline(p.gate.paper_tau, color="grey", lw=1, ls=":", label=f"paper τ ({p.gate.paper_tau:g})")
    ax.set_xlabel("τ (exit when temperature-scaled margin p1 − p2 ≥ τ)")
    ax.set_ylabel("accuracy", color="tab:blue")
    ax2.set_ylabel("share answered by stage 1", color="tab:orange")
    ax2.set_ylim(0, 1)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="lower left")
    ax.set_title(f"Accuracy and exit share vs τ, {len(evals)} training draws (τ = 1: always stage 2 … τ = 0: global only)",
                 fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)


def plot_reliability(rel: pd.DataFrame, path) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    ax.plot([0, 1], [0, 1], color="grey", lw=1, ls=":")
    for label, g in rel.groupby("scaling"):
        g = g[g["count"] > 0]
        ax.plot(g["confidence"], g["accuracy"], marker="o", label=label)
    ax.set_xlabel("stage-1 confidence (max probability)")
    ax.set_ylabel("accuracy")
    ax.set_title("Reliability of the global pass (test, the draws pooled)", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)


def relevance_map_frame(trace: Stage2Trace) -> pd.DataFrame:
    frames = sorted(trace.seen)
    return pd.DataFrame({"frame": frames, "relevance": [trace.seen[f] for f in frames]})


def plot_relevance_map(q: Question, trace: Stage2Trace, threshold: float, path) -> None:
    plt = _plt()
    df = relevance_map_frame(trace)
    fig, ax = plt.subplots(figsize=(8, 3))
    ax.axvspan(q.ev_start, q.ev_end, color="gold", alpha=0.5, label="evidence (truth)")
    for i, (a, b, peak) in enumerate(trace.windows):
        ok = peak >= threshold
        ax.axvspan(a, b, color="tab:green" if ok else "tab:red", alpha=0.2,
                   label=("accepted window" if ok else "rejected window") if i == 0 or ok else None)
    ax.scatter(df["frame"], df["relevance"], s=4, color="k", label="relevance of a seen frame")
    ax.axhline(threshold, color="grey", ls=":", lw=1)
    ax.set_xlabel("frame")
    ax.set_ylabel("relevance")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"{q.video}: {q.text}", fontsize=9)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)
