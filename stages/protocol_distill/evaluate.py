"""Stage protocol_distill_evaluate: every run's test results → summary table, claims, plots."""
from __future__ import annotations

import logging

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from paperworks.core.io import ArtifactError, atomic_path, read_json, read_parquet, write_json, write_text  # noqa: E402
from paperworks.core.claims import (  # noqa: E402
    claim_summary, evaluate_claims, evidence_block, live_curve, load_evidence, write_unit_tables,
)
from paperworks.core.params import global_seed, load_section, read_params_file  # noqa: E402
from paperworks.core.stage import stage_main  # noqa: E402
from paperworks.core.stats import mean_ci  # noqa: E402
from paperworks.protocol_distill import artifacts as A  # noqa: E402
from paperworks.protocol_distill.params import Params  # noqa: E402
from paperworks.protocol_distill.report import (  # noqa: E402
    affected_gap_table, claim_specs, preconditions, privileged_gap_table, question_units, summary_table,
)
from paperworks.protocol_distill.world import MULTI_HOP_SETS  # noqa: E402

log = logging.getLogger("paperworks.protocol_distill")


def em_figure(df: pd.DataFrame, confidence: float):
    """EM per run on single- and multi-hop sets: the mean over seeds with its t interval over seeds
    (each seed is one online training run, the cluster the claims use)."""
    sizes = sorted(df["size"].unique())
    fig, axes = plt.subplots(1, len(sizes), figsize=(6 * len(sizes), 4.5), squeeze=False)
    multi = df["qset"].isin(MULTI_HOP_SETS)
    for ax, size in zip(axes[0], sizes):
        d = df[df["size"] == size]
        runs = sorted(d["run"].unique())
        for offset, (label, part) in zip((-0.2, 0.2), (("single-hop EM", d[~multi.loc[d.index]]), ("multi-hop EM", d[multi.loc[d.index]]))):
            cis = [mean_ci(part[part["run"] == r].groupby("seed")["em"].mean().values, confidence) for r in runs]
            means = np.array([c["mean"] for c in cis])
            # one seed has no interval: no bar drawn rather than an infinite one
            err = np.array([[c["mean"] - c["ci_low"], c["ci_high"] - c["mean"]] if c["n"] > 1 else [0.0, 0.0] for c in cis]).T
            ax.bar(np.arange(len(runs)) + offset, means, width=0.4, yerr=err, capsize=3, label=label)
        ax.set_xticks(range(len(runs)), runs, rotation=45, ha="right")
        ax.set_title(f"student size: {size} (bars: mean over {d['seed'].nunique()} seeds, {confidence:.0%} t interval)")
        ax.set_ylim(0, 1)
        ax.legend()
    fig.tight_layout()
    return fig


def plot_em(df: pd.DataFrame, path, confidence: float) -> None:
    fig = em_figure(df, confidence)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)


@stage_main
def main() -> None:
    p = load_section("protocol_distill", Params)
    ev = load_evidence()
    raw = read_params_file()
    tables = [read_parquet(A.run_table_path(size, run, seed), A.RUN_SCHEMA)
              for size in p.sizes for run in p.online.runs for seed in p.seeds]
    df = pd.concat(tables, ignore_index=True)
    df = df.astype({"redirected": bool})
    if df.empty:
        raise ArtifactError(f"{A.RUNS_DIR}: no evaluation rows")
    warm = {(s, k): read_json(A.warm_report_path(s, k)) for s in p.sizes for k in p.seeds}
    synthesis = read_json(A.SYNTHESIS_REPORT)
    summary = summary_table(df)
    gap_table = privileged_gap_table(warm, p.branches(), ev.confidence)
    affected = affected_gap_table(warm, p.branches(), ev.confidence)
    # convergence is read on the HELD-OUT loss (examples of questions never trained on): the training
    # loss keeps falling while the model memorises which word each training fact's document uses
    warm_curves = {s: [live_curve(A.warm_live_dir(s, k) / "plots/metrics/heldout_loss.tsv") for k in p.seeds] for s in p.sizes}
    trace_curves = {s: [live_curve(A.online_live_dir(s, "trace", k) / "plots/metrics/heldout_loss.tsv") for k in p.seeds]
                    for s in p.sizes} if "trace" in p.online.runs else {}
    trace_fit = {f"{s}/{k}": read_json(A.run_history_path(s, "trace", k))["trace_fit"] for s in p.sizes for k in p.seeds} \
        if "trace" in p.online.runs else {}
    units = question_units(df, warm)
    absent: list[dict] = []
    empty = frozenset({"em_redirected", "em_transfer", "em_transfer_redirected"} - set(units))
    claims = evaluate_claims(claim_specs(p, set(df["run"]), absent, empty), units,
                             preconditions(p, gap_table, warm, warm_curves, trace_curves, ev, affected), ev,
                             seed=global_seed(raw), track="protocol_distill")
    write_unit_tables("protocol_distill", units)
    with atomic_path(A.PLOTS / "results.csv") as tmp:
        summary.to_csv(tmp, index=False, float_format="%.4f")
    sweep = summary[summary.run.str.match(rf"^mapd_{p.teachers[0]}(_lam.*)?$")][["size", "run", "kl_coef", "em_avg", "em_multi_hop", "seeds"]]
    with atomic_path(A.PLOTS / "lambda_sweep.csv") as tmp:
        sweep.sort_values(["size", "kl_coef"]).to_csv(tmp, index=False, float_format="%.4f")
    plot_em(df[df["pool"] == "test"], A.PLOTS / "em_by_method.png", ev.confidence)
    brief = {f"{r['size']}/{r['run']}": {"em_avg": r["em_avg"], "em_multi_hop": r["em_multi_hop"], "mean_length": r["mean_length"],
                                         "style_drift": r["style_drift"], "unsupported": r["unsupported"], "no_answer": r["no_answer"],
                                         "no_answer_rate": r["no_answer_rate"], "max_completion": r["max_completion"]}
             for r in summary.to_dict("records")}
    teachers = {t: {k: v for k, v in synthesis[t].items() if k != "reject_reasons"}
                for t in [*p.teachers, *(f"{x}_styled" for x in p.style_teachers)]}
    tics = sorted(set().union(*(set(r.get("tic_words", [])) for r in warm.values())))
    write_json(A.METRICS, {"profile": raw.get("profile"), "claims": claims, "claim_summary": claim_summary(claims),
                           "evidence": evidence_block(ev, global_seed(raw)), "summary": brief, "privileged_gap": gap_table,
                           "affected_gap": affected, "kl_protocol": p.online.kl_protocol,
                           "teachers": teachers, "seeds": len(p.seeds), "test_questions": int(df[df["pool"] == "test"].qid.nunique()),
                           "transfer_questions": int(df[df["pool"] != "test"].qid.nunique()),
                           "trace_fit": trace_fit, "tic_words": tics, "claims_not_in_grid": absent})
    lines = ["| size | run | EM avg | seed 95 % CI | EM multi-hop | length | style drift | unsupported | no answer (rate) | cap |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in summary.to_dict("records"):
        lines.append(f"| {r['size']} | {r['run']} | {r['em_avg']:.3f} | [{r['em_seed_ci_low']:.3f}, {r['em_seed_ci_high']:.3f}] | "
                     f"{r['em_multi_hop']:.3f} | {r['mean_length']:.1f} | {r['style_drift']:.3f} | {r['unsupported']:.3f} | "
                     f"{r['no_answer']} ({r['no_answer_rate']:.3f}) | {r['max_completion']} |")
    write_text(A.PLOTS / "results.md", "\n".join(lines) + "\n")
    for c in claims:
        log.info("%s: %s", c["id"], c["verdict"])


if __name__ == "__main__":
    main()
