"""Aggregate the runs into claims, summaries, curve tables and the two figures (pure functions
that take the loaded run records)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from paperworks.core.claims import ClaimSpec, EvidenceParams, convergence, precondition, unit_table
from paperworks.core.stats import mean_ci
from paperworks.selfdistill.params import Params

CURVE_KEYS = ("acc", "entropy", "teacher_acc", "acc_add", "acc_sum", "acc_prog",
              "entropy_add", "entropy_sum", "entropy_prog", "teacher_acc_sum")


def curves_table(runs: dict[str, dict]) -> pd.DataFrame:
    rows = []
    for method, res in runs.items():
        for r in res["runs"]:
            for h in r["history"]:
                rows.append({"method": method, "seed": r["seed"], "step": h["step"],
                             **{k: h.get(k, np.nan) for k in CURVE_KEYS}})
    return pd.DataFrame(rows)


def per_seed(res: dict, fn) -> list[float]:
    return [float(fn(r)) for r in sorted(res["runs"], key=lambda r: r["seed"])]


def entropy_drop(r: dict, key: str = "entropy") -> float:
    """Held-out sample entropy at step 0 minus at the last step (positive = entropy lost)."""
    return r["history"][0][key] - r["history"][-1][key]


def acc_at(r: dict, step: int) -> float:
    """Held-out (eval subset) greedy accuracy at the last logged step ≤ ``step``."""
    return [h["acc"] for h in r["history"] if h["step"] <= step][-1]


def peak_to_final_drop(r: dict) -> float:
    accs = [h["acc"] for h in r["history"]]
    return max(accs) - accs[-1]


def summary(runs: dict[str, dict]) -> dict[str, dict]:
    out = {}
    for method, res in runs.items():
        fin = [r["final"] for r in res["runs"]]
        row = {k: mean_ci([f[k] for f in fin])["mean"] for k in fin[0]} if fin and fin[0] else {}
        row["entropy_drop"] = float(np.mean(per_seed(res, entropy_drop)))
        row["peak_to_final_acc_drop"] = float(np.mean(per_seed(res, peak_to_final_drop)))
        if "teacher_acc" in res["runs"][0]["history"][-1]:
            row["final_teacher_acc_privileged"] = float(np.mean(per_seed(res, lambda r: r["history"][-1]["teacher_acc"])))
        row["forward_passes_per_step"] = res["runs"][0]["cost"]["forward_passes_per_step"]
        out[method] = {k: round(float(v), 4) for k, v in row.items()}
    return out


def seed_units(curves: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Per-seed values of every claim, read from the curves table (held-out eval subset).

    Seeds are paired across methods (same base, same prompt order) and each seed is one
    independent training run, so the seed is both the unit and the cluster. "Common step" is
    the last step every method logged: accuracies compared there are read at identical steps
    (none when the methods share no logged step after 0).
    """
    shared = set.intersection(*(set(g) for _, g in curves.groupby("method")["step"]))
    common = max(shared) if shared else 0   # step 0 is the shared base: nothing to compare there
    rows: dict[str, list[dict]] = {k: [] for k in ("final_accuracy", "entropy_drop", "entropy_drop_sum",
                                                   "peak_to_final_drop", "accuracy_at_common_step")}
    for (method, seed), g in curves.groupby(["method", "seed"], sort=True):
        g = g.sort_values("step")
        first, last = g.iloc[0], g.iloc[-1]
        at = g[g["step"] == common]
        values = {"final_accuracy": last["acc"], "entropy_drop": first["entropy"] - last["entropy"],
                  "entropy_drop_sum": first["entropy_sum"] - last["entropy_sum"],
                  "peak_to_final_drop": g["acc"].max() - last["acc"],
                  "accuracy_at_common_step": at["acc"].iloc[0] if len(at) and common > 0 else np.nan}
        for table, v in values.items():
            if np.isfinite(v):
                rows[table].append({"arm": method, "cluster": int(seed), "unit": int(seed), "value": float(v)})
    return {k: unit_table(v) for k, v in rows.items() if v}


def preconditions(p: Params, curves: pd.DataFrame, base_loss: list[float], ev: EvidenceParams) -> list[dict]:
    """What the claims rest on: a budget long enough to see collapse, a base that converged,
    and a GRPO baseline that learns and ran the same budget."""
    steps = curves.groupby("method")["step"].max()
    start = curves[curves["step"] == 0].groupby("method")["acc"].mean()
    end = curves.loc[curves.groupby(["method", "seed"])["step"].idxmax()].groupby("method")["acc"].mean()
    out = [precondition("long budget reaches the collapse regime", p.opsd.steps >= p.claims.min_long_steps,
                        value=p.opsd.steps, threshold=p.claims.min_long_steps,
                        detail=f"{p.opsd.steps} update steps; reverse-KL collapse was seen within {p.claims.min_long_steps}"),
           convergence("base model's SFT loss converged", base_loss, ev)]
    if "grpo" in steps.index and "sr_opsd" in steps.index:
        out.append(precondition("GRPO ran the same budget", steps["grpo"] == steps["sr_opsd"], value=int(steps["grpo"]),
                                threshold=int(steps["sr_opsd"]),
                                detail=f"GRPO {int(steps['grpo'])} steps vs SR-OPSD {int(steps['sr_opsd'])}"))
        out.append(precondition("GRPO does not end below its starting accuracy", end["grpo"] >= start["grpo"],
                                value=round(float(end["grpo"]), 4), threshold=round(float(start["grpo"]), 4),
                                detail=f"held-out accuracy {start['grpo']:.3f} at step 0 → {end['grpo']:.3f} at the end (mean over seeds)"))
    return out


def claim_specs(p: Params, method: str = "sr_opsd", baseline: str = "reverse_kl") -> list[ClaimSpec]:
    """The self-distillation claims, stated from the params they test (headline first)."""
    alpha = p.methods[method].alpha if method in p.methods else float("nan")
    base = ("long budget reaches the collapse regime", "base model's SFT loss converged")
    common = dict(method=method, baseline=baseline, unit="seed", cluster="seed", preconditions=base)
    specs = [
        ClaimSpec(id="sr_opsd_keeps_entropy", role="headline", table="entropy_drop", metric="entropy drop (nats)",
                  higher_is_better=False, statement=f"SR-OPSD (α={alpha:g}) loses less entropy than reverse-KL OPSD over {p.opsd.steps} steps",
                  **common),
        ClaimSpec(id="sr_opsd_matches_accuracy", role="headline", table="final_accuracy", metric="held-out accuracy",
                  kind="non_inferiority", margin=p.claims.accuracy_margin,
                  statement=f"SR-OPSD matches or beats reverse-KL OPSD on final accuracy (non-inferior by {p.claims.accuracy_margin:g})",
                  **common),
        ClaimSpec(id="sr_opsd_degrades_less", role="headline", table="peak_to_final_drop", metric="peak-to-final accuracy drop",
                  higher_is_better=False, statement="SR-OPSD degrades less from its peak accuracy than reverse-KL OPSD", **common),
        ClaimSpec(id="sr_opsd_keeps_entropy_sum", table="entropy_drop_sum", metric="entropy drop, multi-solution family (nats)",
                  higher_is_better=False, statement="SR-OPSD loses less entropy on the multi-solution family", **common),
    ]
    specs.append(ClaimSpec(id="sr_opsd_vs_grpo", table="accuracy_at_common_step", metric="held-out accuracy at a common step",
                           method=method, baseline="grpo", unit="seed", cluster="seed",
                           statement="SR-OPSD beats the GRPO (RLVR) baseline at an equal step",
                           preconditions=("base model's SFT loss converged", "GRPO ran the same budget",
                                          "GRPO does not end below its starting accuracy")))
    return specs


def sweep_table(sweep: list[dict]) -> pd.DataFrame:
    rows = []
    for res in sweep:
        for r in res["runs"]:
            last = r["history"][-1]
            rows.append({"alpha": res["spec"]["alpha"], "rho": res["spec"]["rho"], "seed": r["seed"], "steps": last["step"],
                         "acc": last["acc"], "acc_sum": last.get("acc_sum", np.nan), "entropy": last["entropy"],
                         "entropy_drop": entropy_drop(r), "teacher_acc": last.get("teacher_acc", np.nan)})
    return pd.DataFrame(rows).sort_values(["alpha", "rho", "seed"]).reset_index(drop=True)


def plot_curves(curves: pd.DataFrame, key: str, ylabel: str, path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for method, g in curves.groupby("method", sort=True):
        stats = g.groupby("step")[key].agg(["mean", "min", "max"]).dropna()
        if stats.empty:
            continue
        line, = ax.plot(stats.index, stats["mean"], label=method, marker="o", ms=3)
        ax.fill_between(stats.index, stats["min"], stats["max"], color=line.get_color(), alpha=0.15)
    ax.set_xlabel("update step")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)


def markdown_results(metrics: dict, profile: str) -> str:
    """The measured-results block of docs/tracks/selfdistill.md, rendered from metrics/selfdistill.json."""
    lines = [f"<!-- generated by `python -m paperworks.selfdistill.report` from metrics/selfdistill.json (profile: {profile}) -->",
             f"Profile **{profile}**: {metrics['seeds']} seeds, long budget {metrics['profile_steps']} update steps. "
             f"Base model: {metrics['base']['n_params']:,} parameters, held-out greedy accuracy {metrics['base']['acc']:.3f} "
             f"(plain prompt), {metrics['base']['teacher_acc']:.3f} with the privileged context (eval subset). "
             "Claims: the block generated by `make report` on the track page."]
    keys = ["pass1", "pass1_add", "pass1_sum", "pass1_prog", "pass4", "entropy", "entropy_drop", "distinct_correct_multi",
            "peak_to_final_acc_drop", "final_teacher_acc_privileged", "forward_passes_per_step"]
    lines += ["", "| method | " + " | ".join(keys) + " |", "| --- |" + " ---: |" * len(keys)]
    for method, row in metrics["summary"].items():
        lines.append(f"| {method} | " + " | ".join("" if row.get(k) is None else f"{row[k]:.3f}" for k in keys) + " |")
    if "sweep_best" in metrics:
        b = metrics["sweep_best"]
        lines += ["", f"Sweep ({b['steps']} steps per point): best held-out accuracy {b['acc']:.3f} at α = {b['alpha']}, ρ = {b['rho']} "
                      "(full grid in `plots/selfdistill/sweep.csv`)."]
    return "\n".join(lines)


if __name__ == "__main__":
    import json
    import sys

    import yaml

    m = json.load(open("metrics/selfdistill.json"))
    prof = yaml.safe_load(open("params.yaml")).get("profile", "?") if len(sys.argv) < 2 else sys.argv[1]
    print(markdown_results(m, prof))
