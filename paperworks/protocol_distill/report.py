"""Aggregation of every run into the summary table and the headline claims (pure functions)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from paperworks.core.claims import ClaimSpec, EvidenceParams, combine, convergence, precondition, unit_table
from paperworks.core.stats import compare_clustered, mean_ci
from paperworks.protocol_distill.params import Params
from paperworks.protocol_distill.world import MULTI_HOP_SETS, TRANSFER_POOL


def test_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of the test questions proper (not the transfer questions of issue 15)."""
    return df[df["pool"] == "test"] if "pool" in df.columns else df


def summary_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (size, run): EM per set and averaged, plus length, drift, unsupported, no-answer
    (test questions), and EM on the questions that meet a redirect and on the transfer questions."""
    full, df = df, test_rows(df)
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
        row["no_answer_rate"] = float((g.answered == 0).mean())
        row["max_completion"] = int(g.max_completion.max())
        row["mean_searches"] = float(g.n_searches.mean())
        if "redirected" in g.columns:
            red = g[g.redirected.astype(bool)]
            row["em_redirected"] = float(red.em.mean()) if len(red) else float("nan")
            tr = full[(full["size"] == size) & (full["run"] == run) & (full["pool"] == TRANSFER_POOL)]
            row["em_transfer"] = float(tr.em.mean()) if len(tr) else float("nan")
            tr_red = tr[tr.redirected.astype(bool)]
            row["em_transfer_redirected"] = float(tr_red.em.mean()) if len(tr_red) else float("nan")
        rows.append(row)
    return pd.DataFrame(rows)


def question_units(df: pd.DataFrame, warm_reports: dict[tuple[str, int], dict]) -> dict[str, pd.DataFrame]:
    """Per-unit tables of every claim: one row per (run[size], seed, test question).

    Each seed is one warm start plus one online run of every method (the cluster); test questions
    sit inside it. Seeds are paired across methods (same warm start, same question order) and
    across sizes (same seed index, same test questions). The warm-start student of each seed
    stands beside that seed's online runs, so "online vs warm start" is paired by seed too.
    """
    full = df.assign(arm=df["run"] + "[" + df["size"] + "]", cluster=df["seed"].astype(int), unit=df["qid"])
    frame = test_rows(full)
    tables = {}
    for metric in ("em", "unsupported", "style_drift", "length"):
        tables[metric] = frame.assign(value=frame[metric].astype(float))
    multi = frame[frame["qset"].isin(MULTI_HOP_SETS)]
    tables["em_multi_hop"] = multi.assign(value=multi["em"].astype(float))
    warm_rows = [{"arm": f"warm_start[{size}]", "cluster": int(seed), "unit": q, "value": float(em)}
                 for (size, seed), rep in sorted(warm_reports.items())
                 for q, em in rep["branches"]["student"]["em_per_question"].items()]
    tables["em"] = pd.concat([tables["em"][["arm", "cluster", "unit", "value"]], pd.DataFrame(warm_rows)], ignore_index=True)
    # issue 15: the questions that meet a redirect (test), the transfer questions, and those of them that meet one
    if "redirected" in full.columns:
        red = full["redirected"].astype(bool)
        for name, part in (("em_redirected", frame[red.loc[frame.index]]), ("em_transfer", full[full["pool"] == TRANSFER_POOL]),
                           ("em_transfer_redirected", full[(full["pool"] == TRANSFER_POOL) & red])):
            if len(part):
                tables[name] = part.assign(value=part["em"].astype(float))
    return {k: unit_table(v[["arm", "cluster", "unit", "value"]]) for k, v in tables.items()}


def gap_name(teacher: str, size: str, points: float) -> str:
    return f"protocol of {teacher} lifts the privileged branch ≥ {points:g} EM points on multi-hop ({size})"


def style_reach_name(branch: str, size: str) -> str:
    return f"the {branch} protocols put teacher tics into the privileged branch's outputs ({size})"


def redirect_gap_name(teacher: str, size: str, points: float) -> str:
    return (f"protocols of {teacher} lift the privileged branch ≥ {points:g} EM points on the test questions that meet a "
            f"redirect ({size})")


def transfer_gap_name(teacher: str, size: str, points: float) -> str:
    return (f"strategy protocols of {teacher} (another question's) lift the privileged branch ≥ {points:g} EM points on the "
            f"transfer questions that meet a redirect ({size})")


SIZE_ORDER_NAME = "the larger student beats the smaller at warm start"


def affected_gap_table(warm_reports: dict[tuple[str, int], dict], branches: list[str], confidence: float = 0.95) -> dict:
    """Issue 15's gaps before online training: each privileged branch vs the student branch on the test
    questions that meet a redirect (``<size>/<branch>/redirected``), and the strategy branch vs the
    student on the transfer questions (``/transfer``) and on those of them that meet a redirect
    (``/transfer_redirected``). Interval over seeds (questions nested, paired); None where a subset
    has no question in this profile."""
    table: dict = {}
    for size in sorted({s for s, _ in warm_reports}):
        reps = [rep for (s, _), rep in sorted(warm_reports.items()) if s == size]
        flagged = set(reps[0].get("redirected", []))
        subsets = []
        for branch in branches:
            if branch == "student":
                continue
            subsets.append((branch, "redirected", "branches", sorted(q for q in reps[0]["branches"]["student"]["em_per_question"]
                                                                      if q in flagged)))
        for branch in (b for b in branches if b.endswith("_strategy")):
            t_qids = sorted(reps[0].get("transfer", {}).get("student", {}).get("em_per_question", {}))
            subsets.append((branch, "transfer", "transfer", t_qids))
            subsets.append((branch, "transfer_redirected", "transfer", [q for q in t_qids if q in flagged]))
        for branch, subset, source, qids in subsets:
            key = f"{size}/{branch}/{subset}"
            if not qids or any(branch not in r.get(source, {}) for r in reps):
                table[key] = None
                continue
            priv = [np.array([r[source][branch]["em_per_question"][q] for q in qids], dtype=float) for r in reps]
            stu = [np.array([r[source]["student"]["em_per_question"][q] for q in qids], dtype=float) for r in reps]
            if len(reps) == 1:
                priv, stu = [np.array([v]) for v in priv[0]], [np.array([v]) for v in stu[0]]
            t = compare_clustered(priv, stu, paired=True, confidence=confidence, seed=len(qids))
            table[key] = {"privileged_em": float(np.mean([x.mean() for x in priv])), "student_em": float(np.mean([x.mean() for x in stu])),
                          "gap_points": 100 * t.diff, "gap_ci_low_points": 100 * t.ci_low, "gap_ci_high_points": 100 * t.ci_high,
                          "questions": len(qids), "seeds": len(reps), "interval_over": "seeds" if len(reps) > 1 else "questions"}
    return table


def _gap_precondition(name: str, g: dict | None, need: float, what: str) -> dict:
    if g is None:
        return precondition(name, False, detail=f"no {what} in this profile: the gap cannot be measured")
    return precondition(name, g["gap_points"] >= need, value=round(g["gap_points"], 2), threshold=need,
                        detail=f"{g['privileged_em']:.3f} vs {g['student_em']:.3f} ({g['gap_points']:+.1f} points over {g['questions']} "
                        f"{what}, mean over {g['seeds']} seeds; 95 % interval over {g['interval_over']} "
                        f"[{g['gap_ci_low_points']:+.1f}, {g['gap_ci_high_points']:+.1f}])")


def _seed_mean(warm_reports: dict[tuple[str, int], dict], size: str, fn) -> float:
    return float(np.mean([fn(rep) for (s, _), rep in warm_reports.items() if s == size]))


def preconditions(p: Params, gap_table: dict, warm_reports: dict[tuple[str, int], dict], warm_curves: dict[str, list[list[float]]],
                  trace_curves: dict[str, list[list[float]]], ev: EvidenceParams, affected: dict | None = None) -> list[dict]:
    """What the claims rest on, measured: the privileged gap before online training (per teacher and
    size, mean over seeds), every seed's warm start and trace-imitation SFT converged, style that can
    reach the student through the styled protocols, and the size order at warm start."""
    need = p.claims.min_privileged_gap_points
    out = []
    for size in p.sizes:
        for t in [*p.teachers, *(f"{x}_styled" for x in p.style_teachers)]:
            g = gap_table[f"{size}/{t}"]
            out.append(precondition(gap_name(t, size, need), g["gap_points"] >= need, value=round(g["gap_points"], 2),
                                    threshold=need, detail=f"{g['privileged_em_multi_hop']:.3f} vs {g['student_em_multi_hop']:.3f} "
                                    f"({g['gap_points']:+.1f} points, mean over {g['seeds']} seeds; 95 % interval over {g['interval_over']} "
                                    f"[{g['gap_ci_low_points']:+.1f}, {g['gap_ci_high_points']:+.1f}])"))
        if p.world.redirects.enabled:
            # issue 15: the gap on the questions that meet a redirect, with the question's own protocol,
            # and with another question's (strategy) protocol on questions no protocol ever named
            affected = affected or {}
            for t in p.teachers:
                out.append(_gap_precondition(redirect_gap_name(t, size, need), affected.get(f"{size}/{t}/redirected"), need,
                                             "test questions that meet a redirect"))
            if p.world.transfer.enabled:
                for b in p.strategy_branches():
                    out.append(_gap_precondition(transfer_gap_name(b.removesuffix("_strategy"), size, need),
                                                 affected.get(f"{size}/{b}/transfer_redirected"), need,
                                                 "transfer questions that meet a redirect"))
        for t in p.style_teachers:
            share = _seed_mean(warm_reports, size, lambda rep: rep["branches"][f"{t}_styled"]["tic_share"])
            plain = _seed_mean(warm_reports, size, lambda rep: rep["branches"]["student"]["tic_share"])
            # above the student branch's own share: tics an under-trained model writes anyway (frequent
            # tokens) are not style carried by the protocol
            out.append(precondition(style_reach_name(f"{t}_styled", size), share > plain, value=round(share - plain, 4),
                                    threshold="> 0 (styled branch minus student branch)",
                                    detail=f"share of the privileged branch's greedy test outputs with a tic word, reading {t}_styled "
                                    f"protocols: {share:.3f} (student branch: {plain:.3f}); no more than the student branch means "
                                    "the KL target carries no tic of the protocol's, so the style test could not fail"))
        out.append(combine(f"warm start converged ({size})",
                           [convergence(f"seed {k}", c, ev, abs_tol=ev.convergence_abs_tol_nats) for k, c in zip(p.seeds, warm_curves[size])], "seeds"))
        if "trace" in p.online.runs:
            out.append(combine(f"trace imitation's SFT converged ({size})",
                               [convergence(f"seed {k}", c, ev, abs_tol=ev.convergence_abs_tol_nats) for k, c in zip(p.seeds, trace_curves.get(size, []))], "seeds"))
    if len(p.sizes) > 1:
        em = {s: _seed_mean(warm_reports, s, lambda rep: rep["branches"]["student"]["em_by_set"]["avg"]) for s in p.sizes}
        small, large = p.sizes[0], p.sizes[-1]
        out.append(precondition(SIZE_ORDER_NAME, em[large] > em[small], value=round(em[large] - em[small], 4), threshold="> 0",
                                detail=f"student-branch EM at warm start, mean over seeds: {large} {em[large]:.3f} vs {small} {em[small]:.3f}"))
    return out


def claim_specs(p: Params, runs: set[str], absent: list[dict] | None = None, empty_tables: frozenset[str] = frozenset()) -> list[ClaimSpec]:
    """MAPD's claims (headline: the first size's comparisons with GRPO and OPSD); the rest exploratory.

    A claim whose method or baseline run is not in this profile's grid is not declared (it has no
    arm to measure); when ``absent`` is given, each such claim is appended to it with the missing
    runs and the reason, which the evaluate stage writes to the metrics file."""
    need, main = p.claims.min_privileged_gap_points, f"mapd_{p.teachers[0]}"
    specs: list[ClaimSpec] = []

    def add(cid: str, statement: str, table: str, method: str, baseline: str, size: str, pre: tuple[str, ...],
            headline: bool = False, higher_is_better: bool = True, metric: str = "EM", kind: str = "superiority",
            margin: float | None = None, baseline_size: str | None = None) -> None:
        bsize = baseline_size or size
        missing = [r for r in (method, baseline) if r not in runs and r != "warm_start"]
        if table in empty_tables:
            if absent is not None:
                absent.append({"id": f"{cid}_{size}", "statement": f"{statement} ({size})", "missing_runs": [],
                               "reason": f"no question of table {table!r} in this profile"})
            return
        if missing and absent is not None:
            absent.append({"id": f"{cid}_{size}", "statement": f"{statement} ({size})", "missing_runs": sorted(set(missing)),
                           "reason": f"not in this profile's online.runs ({', '.join(sorted(set(missing)))}): dropped from the "
                                     "grid to fit the profile's budget; the paper profile runs it"})
        if not missing:
            specs.append(ClaimSpec(id=f"{cid}_{size}", statement=f"{statement} ({size})", table=table, metric=metric,
                                   method=f"{method}[{size}]", baseline=f"{baseline}[{bsize}]", unit="question", cluster="seed",
                                   role="headline" if headline else "exploratory", higher_is_better=higher_is_better,
                                   preconditions=pre, kind=kind, margin=margin))

    for i, size in enumerate(p.sizes):
        conv = f"warm start converged ({size})"
        base = (gap_name(p.teachers[0], size, need), conv)
        if p.world.redirects.enabled:
            # issue 15's world: the protocol's advantage is the repair of a redirect; the claims rest on the
            # gap where it applies, with the question's own protocol and (transfer region) another's
            base = (redirect_gap_name(p.teachers[0], size, need),
                    *((transfer_gap_name(p.teachers[0], size, need),) if p.world.transfer.enabled else ()), conv)
        trace = (*base, f"trace imitation's SFT converged ({size})")
        add("mapd_vs_grpo", "MAPD beats GRPO-only (all seven sets)", "em", main, "grpo", size, base, headline=i == 0)
        add("mapd_vs_opsd", "MAPD beats OPSD (all seven sets)", "em", main, "opsd", size, base, headline=i == 0)
        add("mapd_vs_grpo_multi_hop", "MAPD beats GRPO-only on the multi-hop sets", "em_multi_hop", main, "grpo", size, base,
            headline=i == 0, metric="EM, multi-hop sets")
        add("mapd_vs_opsd_multi_hop", "MAPD beats OPSD on the multi-hop sets", "em_multi_hop", main, "opsd", size, base,
            metric="EM, multi-hop sets")
        add("mapd_vs_trace", "MAPD beats trace imitation", "em", main, "trace", size, trace)
        add("mapd_less_style_than_trace", "MAPD outputs carry fewer teacher tics than trace imitation", "style_drift", main,
            "trace", size, trace, higher_is_better=False, metric="share of outputs with a tic word")
        add("mapd_shorter_than_trace", "MAPD outputs are shorter than trace imitation's", "length", main, "trace", size, trace,
            higher_is_better=False, metric="model-written tokens")
        add("mapd_fewer_unsupported", "MAPD gives fewer answers unsupported by any retrieved document than GRPO-only",
            "unsupported", main, "grpo", size, base, higher_is_better=False, metric="share of unsupported answers")
        for t in p.teachers[1:]:
            add(f"mapd_{t}_vs_grpo", f"MAPD with protocols from '{t}' beats GRPO-only", "em", f"mapd_{t}", "grpo", size,
                (gap_name(t, size, need), conv))
        # the style test: protocols whose free-form fields carry the teacher's narration
        for t in p.style_teachers:
            styled, reach = f"mapd_{t}_styled", style_reach_name(f"{t}_styled", size)
            add(f"{styled}_no_more_style_than_grpo", f"MAPD with '{t}' protocols carrying its style adds at most "
                f"{p.claims.style_margin:g} of outputs with a tic over GRPO-only (the schema strips the style)", "style_drift",
                styled, "grpo", size, (reach, conv), higher_is_better=False, metric="share of outputs with a tic word",
                kind="non_inferiority", margin=p.claims.style_margin)
            add(f"{styled}_less_style_than_trace", f"MAPD with '{t}' protocols carrying its style has fewer tics than trace "
                "imitation", "style_drift", styled, "trace", size, (reach, conv, f"trace imitation's SFT converged ({size})"),
                higher_is_better=False, metric="share of outputs with a tic word")
        if p.world.redirects.enabled:
            add("mapd_vs_grpo_redirected", "MAPD beats GRPO-only on the test questions that meet a redirect", "em_redirected",
                main, "grpo", size, base, metric="EM, questions that meet a redirect")
            add("mapd_vs_opsd_redirected", "MAPD beats OPSD on the test questions that meet a redirect", "em_redirected",
                main, "opsd", size, base, metric="EM, questions that meet a redirect")
        if p.world.transfer.enabled:
            add("mapd_vs_grpo_transfer", "MAPD beats GRPO-only on the transfer questions (entities in no training protocol)",
                "em_transfer", main, "grpo", size, base, metric="EM, transfer questions")
            if p.world.redirects.enabled:
                add("mapd_vs_grpo_transfer_redirected", "MAPD beats GRPO-only on the transfer questions that meet a redirect",
                    "em_transfer_redirected", main, "grpo", size, base, metric="EM, transfer questions that meet a redirect")
        for run in ("grpo", main):
            add(f"{run}_vs_warm_start", f"online training ({run}) improves on the warm-start student", "em", run, "warm_start",
                size, (conv,))
    if len(p.sizes) > 1:
        small, large = p.sizes[0], p.sizes[-1]
        add("mapd_larger_beats_smaller", f"MAPD on the larger student beats MAPD on the smaller, {small}", "em", main, main,
            large, (SIZE_ORDER_NAME, f"warm start converged ({large})", f"warm start converged ({small})"), baseline_size=small)
    return specs


def privileged_gap_table(warm_reports: dict[tuple[str, int], dict], branches: list[str], confidence: float = 0.95) -> dict:
    """Before online training: privileged branch (question + protocol, or reference answer) vs the
    student branch on multi-hop test questions, per size, averaged over the seeds' warm starts.
    With ≥ 2 seeds the interval is over seeds (questions nested, paired); with one seed it is over
    questions, conditional on that one warm start."""
    table = {}
    for size in sorted({s for s, _ in warm_reports}):
        reps = [rep for (s, _), rep in sorted(warm_reports.items()) if s == size]
        qids = sorted(reps[0]["branches"]["student"]["em_per_question"])
        multi = [q for q in qids if q.split("-")[0] in MULTI_HOP_SETS]

        def em(rep: dict, branch: str) -> np.ndarray:
            return np.array([rep["branches"][branch]["em_per_question"][q] for q in multi], dtype=float)

        for branch in branches:
            if branch == "student":
                continue
            priv, stu = [em(r, branch) for r in reps], [em(r, "student") for r in reps]
            if len(reps) == 1:  # each question its own cluster
                priv, stu = [np.array([v]) for v in priv[0]], [np.array([v]) for v in stu[0]]
            t = compare_clustered(priv, stu, paired=True, confidence=confidence, seed=len(multi))
            table[f"{size}/{branch}"] = {"privileged_em_multi_hop": float(np.mean([em(r, branch).mean() for r in reps])),
                                         "student_em_multi_hop": float(np.mean([em(r, "student").mean() for r in reps])),
                                         "gap_points": 100 * t.diff, "gap_ci_low_points": 100 * t.ci_low,
                                         "gap_ci_high_points": 100 * t.ci_high, "questions": len(multi), "seeds": len(reps),
                                         "interval_over": "seeds" if len(reps) > 1 else "questions",
                                         "tic_share": float(np.mean([r["branches"][branch].get("tic_share", 0.0) for r in reps]))}
    return table
