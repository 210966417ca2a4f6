"""Aggregation of every run into the summary table and the headline claims (pure functions)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from paperworks.core.claims import ClaimSpec, EvidenceParams, combine, convergence, precondition, unit_table
from paperworks.core.stats import compare_clustered, mean_ci
from paperworks.protocol_distill.params import Params
from paperworks.protocol_distill.world import MULTI_HOP_SETS


def summary_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (size, run): EM per set and averaged, plus length, drift, unsupported, no-answer."""
    rows = []
    for (size, run), g in df.groupby(["size", "run"], sort=True):
        row = {"size": size, "run": run, "method": g.method.iloc[0], "teacher": g.teacher.iloc[0],
               "kl_coef": float(g.kl_coef.iloc[0]), "seeds": int(g.seed.nunique())}
        sets = sorted(g.qset.unique())
        for s in sets:
            row[f"em_{s}"] = float(g[g.qset == s].em.mean())
        row["em_avg"] = float(np.mean([row[f"em_{s}"] for s in sets]))
        row["em_single_hop"] = float(g[~g.qset.isin(MULTI_HOP_SETS)].em.mean())
        row["em_multi_hop"] = float(g[g.qset.isin(MULTI_HOP_SETS)].em.mean())
        seed_em = g.groupby("seed").em.mean()
        ci = mean_ci(seed_em.values) if len(seed_em) > 1 else {"ci_low": float("nan"), "ci_high": float("nan")}
        row["em_seed_ci_low"], row["em_seed_ci_high"] = ci["ci_low"], ci["ci_high"]
        row["mean_length"] = float(g.length.mean())
        row["style_drift"] = float(g.style_drift.mean())
        row["unsupported"] = float(g.unsupported.mean())
        row["no_answer"] = int((g.answered == 0).sum())
        row["mean_searches"] = float(g.n_searches.mean())
        rows.append(row)
    return pd.DataFrame(rows)


def question_units(df: pd.DataFrame, warm_reports: dict[str, dict]) -> dict[str, pd.DataFrame]:
    """Per-unit tables of every claim: one row per (run[size], seed, test question).

    Each seed is one online training run (the cluster); test questions sit inside it. Seeds are
    paired across methods (same warm start, same question order). The warm-start student is one
    model per size: its per-question EM stands beside each seed's, so "online vs warm start" is
    paired by seed and question too.
    """
    frame = df.assign(arm=df["run"] + "[" + df["size"] + "]", cluster=df["seed"].astype(int), unit=df["qid"])
    tables = {}
    for metric in ("em", "unsupported", "style_drift", "length"):
        tables[metric] = frame.assign(value=frame[metric].astype(float))
    multi = frame[frame["qset"].isin(MULTI_HOP_SETS)]
    tables["em_multi_hop"] = multi.assign(value=multi["em"].astype(float))
    warm_rows = [{"arm": f"warm_start[{size}]", "cluster": int(seed), "unit": q, "value": float(em)}
                 for size, rep in warm_reports.items() for seed in sorted(df.loc[df["size"] == size, "seed"].unique())
                 for q, em in rep["branches"]["student"]["em_per_question"].items()]
    tables["em"] = pd.concat([tables["em"][["arm", "cluster", "unit", "value"]], pd.DataFrame(warm_rows)], ignore_index=True)
    return {k: unit_table(v[["arm", "cluster", "unit", "value"]]) for k, v in tables.items()}


def gap_name(teacher: str, size: str, points: float) -> str:
    return f"protocol of {teacher} lifts the privileged branch ≥ {points:g} EM points on multi-hop ({size})"


def preconditions(p: Params, gap_table: dict, warm_curves: dict[str, list[float]], trace_curves: dict[str, list[list[float]]],
                  style_outside_trace: float, ev: EvidenceParams) -> list[dict]:
    """What the claims rest on, measured: the privileged gap before online training (per teacher and
    size), converged warm starts and trace-imitation SFT, and a style measure that can fire."""
    need = p.claims.min_privileged_gap_points
    out = []
    for size in p.sizes:
        for t in p.teachers:
            g = gap_table[f"{size}/{t}"]
            out.append(precondition(gap_name(t, size, need), g["gap_points"] >= need, value=round(g["gap_points"], 2),
                                    threshold=need, detail=f"{g['privileged_em_multi_hop']:.3f} vs {g['student_em_multi_hop']:.3f} "
                                    f"({g['gap_points']:+.1f} points, 95 % interval over questions [{g['gap_ci_low_points']:+.1f}, "
                                    f"{g['gap_ci_high_points']:+.1f}])"))
        out.append(convergence(f"warm start converged ({size})", warm_curves[size], ev))
        out.append(combine(f"trace imitation's SFT converged ({size})",
                           [convergence(f"seed {i}", c, ev) for i, c in enumerate(trace_curves.get(size, []))], "seeds"))
    out.append(precondition("the style measure fires outside trace imitation", style_outside_trace > 0,
                            value=round(float(style_outside_trace), 4), threshold="> 0",
                            detail=f"largest style-drift share of any non-trace run: {style_outside_trace:.3f} (0 means the tic words "
                            "occur in no training target of those methods, so the measure cannot tell them apart)"))
    return out


def claim_specs(p: Params, runs: set[str]) -> list[ClaimSpec]:
    """MAPD's claims (headline: the first size's comparisons with GRPO and OPSD); the rest exploratory."""
    need, main = p.claims.min_privileged_gap_points, f"mapd_{p.teachers[0]}"
    specs: list[ClaimSpec] = []

    def add(cid: str, statement: str, table: str, method: str, baseline: str, size: str, pre: tuple[str, ...],
            headline: bool = False, higher_is_better: bool = True, metric: str = "EM") -> None:
        if method in runs and (baseline in runs or baseline == "warm_start"):
            specs.append(ClaimSpec(id=f"{cid}_{size}", statement=f"{statement} ({size})", table=table, metric=metric,
                                   method=f"{method}[{size}]", baseline=f"{baseline}[{size}]", unit="question", cluster="seed",
                                   role="headline" if headline else "exploratory", higher_is_better=higher_is_better,
                                   preconditions=pre))

    for i, size in enumerate(p.sizes):
        base = (gap_name(p.teachers[0], size, need), f"warm start converged ({size})")
        trace = (*base, f"trace imitation's SFT converged ({size})")
        add("mapd_vs_grpo", "MAPD beats GRPO-only (all seven sets)", "em", main, "grpo", size, base, headline=i == 0)
        add("mapd_vs_opsd", "MAPD beats OPSD (all seven sets)", "em", main, "opsd", size, base, headline=i == 0)
        add("mapd_vs_grpo_multi_hop", "MAPD beats GRPO-only on the multi-hop sets", "em_multi_hop", main, "grpo", size, base,
            headline=i == 0, metric="EM, multi-hop sets")
        add("mapd_vs_opsd_multi_hop", "MAPD beats OPSD on the multi-hop sets", "em_multi_hop", main, "opsd", size, base,
            metric="EM, multi-hop sets")
        add("mapd_vs_trace", "MAPD beats trace imitation", "em", main, "trace", size, trace)
        add("mapd_less_style_than_trace", "MAPD outputs carry fewer teacher tics than trace imitation", "style_drift", main,
            "trace", size, (*trace, "the style measure fires outside trace imitation"), higher_is_better=False,
            metric="share of outputs with a tic word")
        add("mapd_shorter_than_trace", "MAPD outputs are shorter than trace imitation's", "length", main, "trace", size, trace,
            higher_is_better=False, metric="model-written tokens")
        add("mapd_fewer_unsupported", "MAPD gives fewer answers unsupported by any retrieved document than GRPO-only",
            "unsupported", main, "grpo", size, base, higher_is_better=False, metric="share of unsupported answers")
        for t in p.teachers[1:]:
            add(f"mapd_{t}_vs_grpo", f"MAPD with protocols from '{t}' beats GRPO-only", "em", f"mapd_{t}", "grpo", size,
                (gap_name(t, size, need), f"warm start converged ({size})"))
        for run in ("grpo", main):
            add(f"{run}_vs_warm_start", f"online training ({run}) improves on the warm-start student", "em", run, "warm_start",
                size, (f"warm start converged ({size})",))
    return specs


def privileged_gap_table(warm_reports: dict[str, dict], teachers: list[str], confidence: float = 0.95) -> dict:
    """Before online training: privileged branch (question + protocol, or reference answer) vs the
    student branch on multi-hop test questions, per size. One warm-start model per size, so the
    interval is over questions, conditional on that model (descriptive; the gap is a precondition)."""
    table = {}
    for size, rep in sorted(warm_reports.items()):
        qids = sorted(rep["branches"]["student"]["em_per_question"])
        multi = [q for q in qids if q.split("-")[0] in MULTI_HOP_SETS]
        stu = np.array([rep["branches"]["student"]["em_per_question"][q] for q in multi], dtype=float)
        for branch in [*teachers, "answer"]:
            priv = np.array([rep["branches"][branch]["em_per_question"][q] for q in multi], dtype=float)
            t = compare_clustered([np.array([v]) for v in priv], [np.array([v]) for v in stu], paired=True,
                                  confidence=confidence, seed=len(multi))
            table[f"{size}/{branch}"] = {"privileged_em_multi_hop": float(priv.mean()), "student_em_multi_hop": float(stu.mean()),
                                         "gap_points": 100 * t.diff, "gap_ci_low_points": 100 * t.ci_low,
                                         "gap_ci_high_points": 100 * t.ci_high, "questions": len(multi)}
    return table
