"""Aggregate the runs into claims, summaries, curve tables and the two figures (pure functions
that take the loaded run records)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from paperworks.core.stats import claim, mean_ci

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
        row["seconds_per_step"] = float(np.mean([r["cost"]["seconds_per_step"] for r in res["runs"]]))
        row["forward_passes_per_step"] = res["runs"][0]["cost"]["forward_passes_per_step"]
        out[method] = {k: round(float(v), 4) for k, v in row.items()}
    return out


def claims(runs: dict[str, dict], method: str = "sr_opsd", baseline: str = "reverse_kl") -> list[dict]:
    m, b = runs[method], runs[baseline]
    unit = "seed (paired: same base, same prompt order)"
    out = [
        claim(f"{method} (α<1) matches or beats reverse-KL OPSD on final held-out greedy accuracy", "pass1",
              method, per_seed(m, lambda r: r["final"]["pass1"]), baseline, per_seed(b, lambda r: r["final"]["pass1"]), unit=unit),
        claim(f"{method} loses less token entropy than reverse-KL OPSD over training (held-out samples)", "entropy_drop",
              method, per_seed(m, entropy_drop), baseline, per_seed(b, entropy_drop), higher_is_better=False, unit=unit),
        claim(f"{method} loses less entropy on the multi-solution family (sum)", "entropy_drop_sum",
              method, per_seed(m, lambda r: entropy_drop(r, "entropy_sum")), baseline,
              per_seed(b, lambda r: entropy_drop(r, "entropy_sum")), higher_is_better=False, unit=unit),
        claim(f"{method} degrades less from its peak held-out accuracy at the long budget", "peak_to_final_acc_drop",
              method, per_seed(m, peak_to_final_drop), baseline, per_seed(b, peak_to_final_drop), higher_is_better=False, unit=unit),
    ]
    if "grpo" in runs:
        g = runs["grpo"]
        step = min(g["runs"][0]["history"][-1]["step"], m["runs"][0]["history"][-1]["step"])  # equal budget
        out.append(claim(f"{method} vs the GRPO (RLVR) baseline on held-out greedy accuracy at step {step} (equal budget)",
                         f"acc@{step}", method, per_seed(m, lambda r: acc_at(r, step)), "grpo",
                         per_seed(g, lambda r: acc_at(r, step)), unit=unit))
    return out


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
             f"(plain prompt), {metrics['base']['teacher_acc']:.3f} with the privileged context (eval subset).", "",
             "| claim | metric | method | baseline | diff [95% CI] | verdict |", "| --- | --- | ---: | ---: | --- | --- |"]
    for c in metrics["claims"]:
        lo, hi = c["diff_ci95"]
        lines.append(f"| {c['statement']} | {c['metric']} | {c['method']} {c['method_mean']:.3f} | {c['baseline']} {c['baseline_mean']:.3f} "
                     f"| {c['diff']:+.3f} [{lo:+.3f}, {hi:+.3f}] | {c['verdict']} |")
    keys = ["pass1", "pass1_add", "pass1_sum", "pass1_prog", "pass4", "entropy", "entropy_drop", "distinct_correct_multi",
            "peak_to_final_acc_drop", "final_teacher_acc_privileged", "forward_passes_per_step", "seconds_per_step"]
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
