"""Aggregate the runs into claims, summaries, curve tables and the two figures (pure functions
that take the loaded run records)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from paperworks.core.claims import ClaimSpec, EvidenceParams, convergence, precondition, unit_table
from paperworks.core.stats import mean_ci
from paperworks.selfdistill.params import Params
from paperworks.selfdistill.pipeline import pick_grpo_lr  # noqa: F401  (re-exported: the evaluate stage's table)

CURVE_KEYS = ("acc", "entropy", "teacher_acc", "kl_ref", "acc_add", "acc_sum", "acc_prog",
              "entropy_add", "entropy_sum", "entropy_prog", "teacher_acc_sum",
              "train_lr", "train_loss", "train_reward", "train_zero_reward_groups", "train_no_contrast_groups", "train_kl_k3")


def curves_table(runs: dict[str, list[dict]]) -> pd.DataFrame:
    """One row per (method, seed, probe step): the validation curves and the training diagnostics."""
    rows = []
    for method, records in runs.items():
        for r in records:
            for h in r["history"]:
                rows.append({"method": method, "seed": r["seed"], "step": h["step"],
                             **{k: h.get(k, np.nan) for k in CURVE_KEYS}})
    return pd.DataFrame(rows, columns=["method", "seed", "step", *CURVE_KEYS])


def entropy_drop(r: dict, key: str = "entropy") -> float:
    """Validation sample entropy at step 0 minus at the last step (positive = entropy lost)."""
    return r["history"][0][key] - r["history"][-1][key]


def peak_to_final_drop(r: dict) -> float:
    accs = [h["acc"] for h in r["history"]]
    return max(accs) - accs[-1]


def summary(runs: dict[str, list[dict]]) -> dict[str, dict]:
    out = {}
    for method, records in runs.items():
        records = sorted(records, key=lambda r: r["seed"])
        fin = [r["final"] for r in records]
        row = {k: mean_ci([f[k] for f in fin])["mean"] for k in fin[0]} if fin and fin[0] else {}
        row["val_acc_start"] = float(np.mean([r["history"][0]["acc"] for r in records]))
        row["val_acc_final"] = float(np.mean([r["history"][-1]["acc"] for r in records]))
        row["entropy_drop"] = float(np.mean([entropy_drop(r) for r in records]))
        row["peak_to_final_acc_drop"] = float(np.mean([peak_to_final_drop(r) for r in records]))
        if "teacher_acc" in records[0]["history"][-1]:
            row["final_teacher_acc_privileged"] = float(np.mean([r["history"][-1]["teacher_acc"] for r in records]))
        if "kl_ref" in records[0]["history"][-1]:
            row["final_kl_ref"] = float(np.mean([r["history"][-1]["kl_ref"] for r in records]))
        row["forward_passes_per_step"] = records[0]["cost"]["forward_passes_per_step"]
        row["lr"] = records[0]["config"]["lr"]
        row["steps"] = records[0]["steps"]
        out[method] = {k: round(float(v), 6 if k == "lr" else 4) for k, v in row.items()}
    return out


def seed_units(runs: dict[str, list[dict]]) -> dict[str, pd.DataFrame]:
    """Per-seed values of every claim. Seeds are paired across methods (same base, same derived
    seed, same prompt order) and each seed is one independent training run, so the seed is both
    the unit and the cluster. Every method ran the same steps with the same probe steps, so the
    curve values compared here are read at identical step indices (checked: a mismatch raises).

    final_accuracy: greedy pass@1 on the whole test set after the last step; entropy values and
    the peak-to-final drop come from the validation curves.
    """
    step_lists = {tuple(h["step"] for h in r["history"]) for rs in runs.values() for r in rs}
    if len(step_lists) > 1:
        raise ValueError(f"methods were probed at different steps: {sorted(step_lists)[:2]} …; compare at identical steps")
    rows: dict[str, list[dict]] = {k: [] for k in ("final_accuracy", "entropy_drop", "entropy_drop_sum", "peak_to_final_drop",
                                                   "entropy_start_end")}
    for method, records in sorted(runs.items()):
        for r in sorted(records, key=lambda r: r["seed"]):
            first, last = r["history"][0], r["history"][-1]
            values = {"final_accuracy": r["final"].get("pass1", np.nan), "entropy_drop": first["entropy"] - last["entropy"],
                      "entropy_drop_sum": first.get("entropy_sum", np.nan) - last.get("entropy_sum", np.nan),
                      "peak_to_final_drop": peak_to_final_drop(r)}
            for table, v in values.items():
                if np.isfinite(v):
                    rows[table].append({"arm": method, "cluster": int(r["seed"]), "unit": int(r["seed"]), "value": float(v)})
            if method == "reverse_kl":  # its own start vs its end: does reverse-KL lose entropy at all?
                for arm, h in (("reverse_kl_end", last), ("reverse_kl_start", first)):
                    rows["entropy_start_end"].append({"arm": arm, "cluster": int(r["seed"]), "unit": int(r["seed"]),
                                                      "value": float(h["entropy"])})
    return {k: unit_table(v) for k, v in rows.items() if v}


def preconditions(p: Params, runs: dict[str, list[dict]], base_loss: list[float], ev: EvidenceParams,
                  base_val_acc: list[float] | None = None) -> list[dict]:
    """What the claims rest on: a budget long enough to see collapse, enough paired seeds, a base
    that stopped improving on validation, and a GRPO baseline that ran the same budget and learns
    (on validation). The SFT *training* loss is reported too but no claim rests on it: on a finite
    SFT set it keeps falling (memorisation) long after held-out accuracy has levelled off."""
    steps = {m: sorted({r["steps"] for r in rs}) for m, rs in runs.items()}
    seeds = {m: sorted(r["seed"] for r in rs) for m, rs in runs.items()}
    n_seeds = min(len(v) for v in seeds.values())
    out = [precondition("long budget reaches the collapse regime", p.opsd.steps >= p.claims.min_long_steps,
                        value=p.opsd.steps, threshold=p.claims.min_long_steps,
                        detail=f"{p.opsd.steps} update steps for every method; reverse-KL collapse was seen within {p.claims.min_long_steps}"),
           precondition("enough paired seeds", n_seeds >= p.claims.min_seeds and len({tuple(v) for v in seeds.values()}) == 1,
                        value=n_seeds, threshold=p.claims.min_seeds,
                        detail=f"{n_seeds} seeds in every method, the same seeds in each: {len({tuple(v) for v in seeds.values()}) == 1}"),
           convergence("base model's SFT loss converged", base_loss, ev),
           convergence("base model's validation accuracy plateaued", base_val_acc or [], ev, lower_is_better=False)]
    if "grpo" in runs:
        same = all(v == steps["grpo"] for v in steps.values())
        out.append(precondition("GRPO ran the same budget", same, value=steps["grpo"][0], threshold=p.opsd.steps,
                                detail="steps per method: " + ", ".join(f"{m} {v[0]}" for m, v in sorted(steps.items()))))
        start = float(np.mean([r["history"][0]["acc"] for r in runs["grpo"]]))
        end = float(np.mean([r["history"][-1]["acc"] for r in runs["grpo"]]))
        out.append(precondition("GRPO does not end below its starting validation accuracy", end >= start,
                                value=round(end, 4), threshold=round(start, 4),
                                detail=f"validation accuracy {start:.3f} at step 0 → {end:.3f} at step {steps['grpo'][0]} (mean over seeds)"))
    return out


BASE_PRECONDITIONS = ("long budget reaches the collapse regime", "enough paired seeds", "base model's validation accuracy plateaued")


def claim_specs(p: Params, method: str = "sr_opsd", baseline: str = "reverse_kl") -> list[ClaimSpec]:
    """The self-distillation claims, stated from the params they test (headline first)."""
    alpha = p.methods[method].alpha if method in p.methods else float("nan")
    rho = p.methods[method].rho if method in p.methods else float("nan")
    common = dict(method=method, baseline=baseline, unit="seed", cluster="seed", preconditions=BASE_PRECONDITIONS)
    steps = p.opsd.steps
    return [
        ClaimSpec(id="reverse_kl_loses_entropy", table="entropy_start_end", metric="validation sample entropy (nats)",
                  method="reverse_kl_end", baseline="reverse_kl_start", unit="seed", cluster="seed", higher_is_better=False,
                  preconditions=BASE_PRECONDITIONS,
                  statement=f"reverse-KL OPSD ends {steps} steps with lower entropy than it started with"),
        ClaimSpec(id="sr_opsd_keeps_entropy", role="headline", table="entropy_drop", metric="entropy drop (nats)",
                  higher_is_better=False,
                  statement=f"SR-OPSD (α={alpha:g}, ρ={rho:g}) loses less entropy than reverse-KL OPSD over {steps} steps", **common),
        ClaimSpec(id="sr_opsd_degrades_less", role="headline", table="peak_to_final_drop", metric="peak-to-final validation accuracy drop",
                  higher_is_better=False, statement=f"SR-OPSD degrades less from its peak accuracy than reverse-KL OPSD over {steps} steps",
                  **common),
        ClaimSpec(id="sr_opsd_matches_accuracy", role="headline", table="final_accuracy", metric="test accuracy (greedy pass@1)",
                  kind="non_inferiority", margin=p.claims.accuracy_margin,
                  statement=f"SR-OPSD matches or beats reverse-KL OPSD on final test accuracy (non-inferior by {p.claims.accuracy_margin:g})",
                  **common),
        ClaimSpec(id="sr_opsd_keeps_entropy_sum", table="entropy_drop_sum", metric="entropy drop, multi-solution family (nats)",
                  higher_is_better=False, statement="SR-OPSD loses less entropy on the multi-solution family", **common),
        ClaimSpec(id="sr_opsd_vs_grpo", table="final_accuracy", metric="test accuracy (greedy pass@1)",
                  method=method, baseline="grpo", unit="seed", cluster="seed",
                  statement=f"SR-OPSD beats the GRPO (RLVR) baseline on final test accuracy at the same {steps}-step budget",
                  preconditions=(*BASE_PRECONDITIONS, "GRPO ran the same budget", "GRPO does not end below its starting validation accuracy")),
    ]


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
             f"Profile **{profile}**: {metrics['seeds']} paired seeds, every method {metrics['profile_steps']} update steps. "
             f"Base model: {metrics['base']['n_params']:,} parameters, validation greedy accuracy {metrics['base']['acc']:.3f} "
             f"(plain prompt), {metrics['base']['teacher_acc']:.3f} with the privileged context."]
    if "grpo_tuning" in metrics:
        t = metrics["grpo_tuning"]
        lines += ["", f"GRPO peak learning rate chosen on validation: **{t['chosen_lr']:g}** (tuning seed, same budget). Tried:", "",
                  "| lr | validation acc at step 0 | at the end | share of all-zero reward groups |", "| ---: | ---: | ---: | ---: |"]
        lines += [f"| {r['lr']:g} | {r['start_acc']:.3f} | {r['final_acc']:.3f} | {r['zero_reward_groups']:.3f} |" for r in t["table"]]
    keys = ["pass1", "pass1_add", "pass1_sum", "pass1_prog", "pass4", "val_acc_start", "val_acc_final", "entropy_drop",
            "distinct_correct_multi", "peak_to_final_acc_drop", "final_teacher_acc_privileged", "final_kl_ref", "forward_passes_per_step"]
    lines += ["", "Per method, mean over seeds (`pass*`, `distinct_correct_multi`: whole test set after the last step; "
                  "`val_*`, entropy, peak-to-final, teacher and KL: validation curves):", "",
              "| method | lr | " + " | ".join(keys) + " |", "| --- | ---: |" + " ---: |" * len(keys)]
    for method, row in metrics["summary"].items():
        lines.append(f"| {method} | {row['lr']:g} | " + " | ".join("" if row.get(k) is None else f"{row[k]:.3f}" for k in keys) + " |")
    if "sweep_best" in metrics:
        b = metrics["sweep_best"]
        lines += ["", f"Sweep ({b['steps']} steps per point, validation): best accuracy {b['acc']:.3f} at α = {b['alpha']}, ρ = {b['rho']} "
                      "(full grid in `plots/selfdistill/sweep.csv`)."]
    return "\n".join(lines)


if __name__ == "__main__":
    import json
    import sys

    import yaml

    m = json.load(open("metrics/selfdistill.json"))
    prof = yaml.safe_load(open("params.yaml")).get("profile", "?") if len(sys.argv) < 2 else sys.argv[1]
    print(markdown_results(m, prof))
