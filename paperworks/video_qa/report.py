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
CURVES = {"encoder": "plots/video_qa/live_encoder/plots/metrics/heldout_loss.tsv",   # held-out scenes: memorising is not progress
          "answerer": "plots/video_qa/live_answerer/plots/metrics/loss.tsv",
          "scorer": "plots/video_qa/live_scorer/plots/metrics/loss.tsv"}


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


def reliability_frame(e: Evaluation, p: Params) -> pd.DataFrame:
    out = []
    for label, t in (("raw", 1.0), ("temperature", e.temperature)):
        c = confidence_signals(e.test.logits["stage1"], t)
        out.append(reliability_bins(c.max_prob, c.prediction == e.test.answer, p.gate.reliability_bins).to_frame().assign(scaling=label))
    return pd.concat(out, ignore_index=True)


# ---------------------------------------------------------------- evidence standard
def question_units(e: Evaluation) -> dict[str, pd.DataFrame]:
    """Test correctness per (policy, question), questions nested in their video: a video's questions
    share its script and rendering, so the interval is over videos (two-level bootstrap). One training
    run of each model: intervals are conditional on that run (the track page says so)."""
    rows = [{"arm": pol, "cluster": vid, "unit": q, "value": float(v)}
            for pol in POLICIES for q, vid, v in zip(e.test.qid, e.test.video, e.correct[pol])]
    return {"accuracy": unit_table(rows)}


def _acc(correct: np.ndarray, mask: np.ndarray) -> float | None:
    return float(correct[mask].mean()) if mask.any() else None


def preconditions(e: Evaluation, p: Params, curves: dict[str, list[float]], ev: EvidenceParams) -> list[dict]:
    t = e.test
    local, glob = t.qtype == "local", t.qtype == "global"
    s1, oracle, crop = t.correct("stage1"), t.correct("oracle_window"), t.correct("random_crop")
    out = []
    trained = []
    for name, curve in sorted(curves.items()):
        trained.append(convergence(f"{name} loss plateaued", curve, ev))
        trained.append(learned(f"{name} loss left its start", curve, p.claims.min_rel_improvement, ev))
    out.append(combine(CONVERGED, trained, "training checks"))
    a_s1, a_or = _acc(s1, local), _acc(oracle, local)
    gain = None if a_s1 is None else a_or - a_s1
    out.append(precondition(ORACLE, gain is not None and gain >= p.claims.min_local_gain,
                            value=None if gain is None else round(gain, 4), threshold=p.claims.min_local_gain,
                            detail=("no local test questions" if gain is None else
                                    f"local questions (n={int(local.sum())}): global pass {a_s1:.3f}, "
                                    f"oracle window of {p.pipeline.window_frames} frames {a_or:.3f}")))
    a_g, a_c = _acc(s1, glob), _acc(crop, glob)
    cost = None if a_g is None else a_g - a_c
    out.append(precondition(CROP, cost is not None and cost >= p.claims.min_crop_cost,
                            value=None if cost is None else round(cost, 4), threshold=p.claims.min_crop_cost,
                            detail=("no global test questions" if cost is None else
                                    f"global questions (n={int(glob.sum())}): global pass {a_g:.3f}, "
                                    f"random crop of {p.pipeline.window_frames} frames {a_c:.3f}")))
    share = float(e.exits["cader"].mean())
    out.append(precondition(SPLITS_GATE, 0.0 < share < 1.0, value=round(share, 4), threshold="strictly between 0 and 1",
                            detail=f"test exit share at the dev-chosen τ={e.tau:.4g}: {share:.3f}"))
    return out


def claim_specs(p: Params) -> list[ClaimSpec]:
    pp = p.pipeline
    common = dict(table="accuracy", metric="test accuracy", unit="question", cluster="video")
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


def summary(e: Evaluation, p: Params) -> dict:
    """Per policy: accuracy (all and by question type), exit share, frames and CPU-ms per question."""
    t = e.test
    out = {}
    for pol in POLICIES:
        row = {"accuracy": float(e.correct[pol].mean()), "exit_share": float(e.exits[pol].mean()),
               "frames": float(e.frames[pol].mean()), "cpu_ms": float(cpu_ms(e.frames[pol], e.calls[pol], p.cost).mean())}
        for qt in sorted(set(t.qtype)):
            row[f"accuracy_{qt}"] = float(e.correct[pol][t.qtype == qt].mean())
        out[pol] = {k: round(v, 4) for k, v in row.items()}
    for v in ("oracle_window", "random_crop"):
        out[v] = {"accuracy": round(float(t.correct(v).mean()), 4),
                  **{f"accuracy_{qt}": round(float(t.correct(v)[t.qtype == qt].mean()), 4) for qt in sorted(set(t.qtype))}}
    return out


def gate_block(e: Evaluation, p: Params) -> dict:
    t = e.test
    raw, scaled = (confidence_signals(t.logits["stage1"], T) for T in (1.0, e.temperature))
    c1 = scaled.prediction == t.answer
    paper = scaled.margin >= p.gate.paper_tau
    evid = np.isin(t.qtype, ["local", "counting"])
    return {
        "temperature": round(e.temperature, 4), "tau_dev": round(e.tau, 4), "tau_paper": p.gate.paper_tau,
        "exit_share_test": round(float(e.exits["cader"].mean()), 4),
        "exit_accuracy_test": None if not e.exits["cader"].any() else round(float(c1[e.exits["cader"]].mean()), 4),
        "accuracy_at_paper_tau": round(float(np.where(paper, c1, t.correct("stage2")).mean()), 4),
        "exit_share_at_paper_tau": round(float(paper.mean()), 4),
        "ece_raw": round(expected_calibration_error(raw.max_prob, raw.prediction == t.answer, p.gate.reliability_bins), 4),
        "ece_scaled": round(expected_calibration_error(scaled.max_prob, c1, p.gate.reliability_bins), 4),
        "grounding_hit_local_counting": None if not evid.any() else round(float(t.hit["stage2"][evid].mean()), 4),
        "check_passed_share": round(float(t.passed["stage2"].mean()), 4),
        "n_dev_questions": int(len(e.dev.qid)), "n_test_questions": int(len(t.qid)),
    }


# ---------------------------------------------------------------- figures
def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_accuracy_vs_tau(curve: pd.DataFrame, e: Evaluation, p: Params, path) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    ax2 = ax.twinx()
    for split, style in (("dev", "--"), ("test", "-")):
        g = curve[curve["split"] == split]
        ax.plot(g["tau"], g["accuracy"], style, color="tab:blue", label=f"gated accuracy ({split})")
        ax2.plot(g["tau"], g["exit_share"], style, color="tab:orange", label=f"exit share ({split})")
    ax.axvline(e.tau, color="tab:green", lw=1, label=f"τ chosen on dev ({e.tau:.3g})")
    ax.axvline(p.gate.paper_tau, color="grey", lw=1, ls=":", label=f"paper τ ({p.gate.paper_tau:g})")
    ax.set_xlabel("τ (exit when temperature-scaled margin p1 − p2 ≥ τ)")
    ax.set_ylabel("accuracy", color="tab:blue")
    ax2.set_ylabel("share answered by stage 1", color="tab:orange")
    ax2.set_ylim(0, 1)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="lower left")
    ax.set_title("Accuracy and exit share vs τ (τ = 1: always stage 2 … τ = 0: global only)", fontsize=9)
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
    ax.set_title("Reliability of the global pass (test)", fontsize=9)
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
