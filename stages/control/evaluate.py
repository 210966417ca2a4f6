"""control_evaluate — aggregate the (teacher, draw) grid into metrics/control.json, per-unit tables and plots."""
from __future__ import annotations

import numpy as np
import pandas as pd

from paperworks.control.env import control_dt
from paperworks.control.layout import METRICS, PLOTS, distill_dir, teacher_eval_path
from paperworks.control.params import Params
from paperworks.control.report import (
    INTERPRETABLE_DEPTH, balanced_units, bounded_table, claim_specs, hard_table, plot_bounded, plot_depth, plot_trace,
    plot_tree, recipe_table, success_summary, teacher_preconditions,
)
from paperworks.control.tree import TreePolicy
from paperworks.core.claims import claim_summary, evaluate_claims, evidence_block, load_evidence, write_unit_tables
from paperworks.core.io import ArtifactError, atomic_path, read_json, write_json, write_text
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.stage import stage_main

SUMMARY_RECIPES = ("teacher", "headline", "clean_rollouts", "no_urgency", "viper", "dagger")


def write_csv(path, df: pd.DataFrame) -> None:
    write_text(path, df.to_csv(index=False, float_format="%.6g"))


def _plain(row: pd.Series, cols) -> dict:
    return {k: (None if isinstance(row[k], float) and np.isnan(row[k]) else float(row[k])) for k in cols}


@stage_main
def main() -> None:
    p = load_section("control", Params)
    ev = load_evidence()
    raw = read_params_file()
    g = global_seed(raw)
    teacher_evals = {}
    for t in p.grid.teachers:
        te = read_json(teacher_eval_path(t))
        if not {"training", "nominal", "hard", "disturbed", "trace"} <= set(te):
            raise ArtifactError(f"{teacher_eval_path(t)}: missing training/nominal/hard/disturbed/trace")
        teacher_evals[t] = te
    pairs = {}
    for t in p.grid.teachers:
        for d in p.grid.draws:
            res = read_json(distill_dir(t, d) / "results.json")
            if not {"variants", "recipes", "disturbed", "trace"} <= set(res):
                raise ArtifactError(f"{distill_dir(t, d)}/results.json: missing variants/recipes/disturbed/trace")
            pairs[(t, d)] = res

    table, hard = recipe_table(teacher_evals, pairs), hard_table(teacher_evals, pairs)
    summary, hard_summary = success_summary(table), success_summary(hard)
    s, hs = summary.set_index("recipe"), hard_summary.set_index("recipe")
    target = p.eval.success_pairs
    reaching = [r for r in summary["recipe"] if r != "teacher" and s.loc[r, "pairs_perfect_rate"] >= target
                and s.loc[r, "max_tree_depth"] <= INTERPRETABLE_DEPTH]

    units = {"balanced": balanced_units(table), "balanced_hard": balanced_units(hard)}
    all_claims = evaluate_claims(claim_specs(p, set(table["recipe"])), units, teacher_preconditions(teacher_evals), ev,
                                 seed=g, track="control")

    bounded = bounded_table(teacher_evals, pairs)
    bsum = {}
    for name, gb in bounded.groupby("recipe", sort=False):
        ran = gb["worst_theta"].notna().any()
        bsum[name] = {"within_rate": float(gb["within"].sum() / gb["episodes"].sum()),
                      "stopped_rate": float(gb["stopped"].sum() / gb["episodes"].sum()),
                      "pairs_all_within": int((gb["within"] == gb["episodes"]).sum()), "pairs": len(gb),
                      "worst_theta": float(gb["worst_theta"].max()) if ran else None,
                      "worst_x": float(gb["worst_x"].max()) if ran else None,
                      "median_worst_theta": float(gb["worst_theta"].median()) if ran else None}
    dist = p.eval.disturbance
    training = {str(t): {k: te["training"][k] for k in ("solved", "seed", "replaced_seeds", "steps_to_first_pass",
                                                          "kept_step", "env_steps")}
                for t, te in teacher_evals.items()}
    metrics = {
        "profile": raw.get("profile"),
        "claims": all_claims,
        "claim_summary": claim_summary(all_claims),
        "evidence": evidence_block(ev, g),
        "summary": {r: _plain(s.loc[r], ("pairs_perfect_rate", "balanced_rate", "mean_return", "switches_per_s",
                                         "switches_per_s_deadband", "theta_amplitude_ss", "distinct_torques", "eq_mean_abs"))
                    for r in SUMMARY_RECIPES if r in s.index},
        "hard_set": {r: _plain(hs.loc[r], ("pairs_perfect_rate", "balanced_rate", "mean_return")) for r in hs.index},
        "bounded": {"disturbance": {"pulse_amplitude": dist.pulse_amplitude, "pulse_steps": dist.pulse_steps,
                                    "pulse_every": dist.pulse_every, "theta_bound": dist.theta_bound, "x_bound": dist.x_bound},
                    "max_abs_leaf_torque": max(res["variants"][res["recipes"]["headline"]]["max_abs_leaf_torque"]
                                               for res in pairs.values()),
                    **bsum},
        "teachers": {"slots": len(teacher_evals), "solved": sum(te["training"]["solved"] for te in teacher_evals.values()),
                     "replaced_seeds": sum(len(te["training"]["replaced_seeds"]) for te in teacher_evals.values()),
                     "per_slot": training},
        "grid": {"teachers": len(p.grid.teachers), "draws": len(p.grid.draws), "heldout_episodes": p.eval.episodes},
        "recipes_reaching_target": reaching,   # depth <= 7 and n/n balanced on >= success_pairs of pairs (report only)
        "target_pairs_perfect_rate": target,
    }
    write_unit_tables("control", units)
    write_json(METRICS, metrics)
    write_csv(PLOTS / "recipes.csv", summary)
    write_csv(PLOTS / "recipes_hard.csv", hard_summary)
    write_csv(PLOTS / "pairs.csv", table)
    write_csv(PLOTS / "bounded.csv", bounded)
    write_csv(PLOTS / "teachers.csv", pd.DataFrame([{"slot": int(t), **v, "replaced_seeds": " ".join(map(str, v["replaced_seeds"]))}
                                                     for t, v in training.items()]))
    depth = summary[summary["recipe"].str.startswith("depth=")].copy()
    depth.insert(0, "depth", depth["recipe"].str.split("=").str[1].astype(int))
    write_csv(PLOTS / "depth_sweep.csv", depth[["depth", "balanced_rate", "pairs_perfect_rate", "mean_return"]].sort_values("depth"))

    t0, d0 = p.grid.teachers[0], p.grid.draws[0]
    dt = control_dt(p.env.id)
    te, tr = teacher_evals[t0]["trace"], pairs[(t0, d0)]["trace"]
    n = max(len(te["theta"]), len(tr["theta"]))
    pad = lambda v: list(v) + [np.nan] * (n - len(v))  # noqa: E731 — an episode may end early
    write_csv(PLOTS / "trace.csv", pd.DataFrame({
        "t": np.arange(n) * dt, "teacher_theta": pad(te["theta"]), "tree_theta": pad(tr["theta"]),
        "teacher_action": pad(te["action"]), "tree_action": pad(tr["action"])}))
    # the window starts in steady state when both episodes got there, else at the start
    start = p.eval.steady_from if min(len(te["theta"]), len(tr["theta"])) > p.eval.steady_from + 2 else 0
    with atomic_path(PLOTS / "bangbang.png") as tmp:
        plot_trace(te, tr, dt, start, p.eval.trace_window_s, tmp)
    with atomic_path(PLOTS / "bounded.png") as tmp:
        plot_bounded(bounded, dist.theta_bound, tmp)
    with atomic_path(PLOTS / "balanced_vs_depth.png") as tmp:
        plot_depth(table, tmp)
    head = TreePolicy.load(distill_dir(t0, d0) / "tree_headline.json")
    with atomic_path(PLOTS / "tree.png") as tmp:
        plot_tree(head, tmp)
    write_text(PLOTS / "rules.md", (distill_dir(t0, d0) / "rules.md").read_text())


if __name__ == "__main__":
    main()
