"""Aggregate the (teacher, draw) grid: success rates with Wilson intervals, claims, plots."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from paperworks.control.tree import TreePolicy, feature_names
from paperworks.control.params import Params
from paperworks.core.claims import ClaimSpec, precondition, unit_table
from paperworks.core.stats import wilson_interval

INTERPRETABLE_DEPTH = 7   # the target: a tree of depth <= 7 that balances n/n on >= 90 % of pairs (report only)


NAMED = ("headline", "clean_rollouts", "no_urgency", "viper", "dagger")   # the claimed arms, besides the teacher


def recipe_table(teacher_evals: dict[int, dict], pairs: dict[tuple[int, int], dict]) -> pd.DataFrame:
    """One row per (recipe, pair): nominal held-out episodes balanced, mean return, behaviour."""
    rows = []
    for (t, d), res in sorted(pairs.items()):
        rows.append(_row("teacher", t, d, teacher_evals[t]["nominal"]))
        named = {name: res["recipes"][name] for name in NAMED if name in res["recipes"]}
        for group in ("sigma", "kd", "depth"):
            for k, key in res["recipes"][group].items():
                named[f"{group}={k}"] = key
        for name, key in named.items():
            rows.append(_row(name, t, d, res["variants"][key]))
    return pd.DataFrame(rows)


def hard_table(teacher_evals: dict[int, dict], pairs: dict[tuple[int, int], dict]) -> pd.DataFrame:
    """The hard held-out set (10× start noise + observation noise): teacher and the claimed arms."""
    rows = []
    for (t, d), res in sorted(pairs.items()):
        rows.append({"recipe": "teacher", "teacher": t, "draw": d, **teacher_evals[t]["hard"]})
        for name in NAMED:
            if name in res["recipes"]:
                rows.append({"recipe": name, "teacher": t, "draw": d, **res["variants"][res["recipes"][name]]["hard"]})
    return pd.DataFrame(rows)


def _row(recipe: str, t: int, d: int, b: dict) -> dict:
    q = b.get("quantization_error") or {}
    return {
        "recipe": recipe, "teacher": t, "draw": d, "balanced": b["balanced"], "episodes": b["episodes"],
        "mean_return": b["mean_return"], "min_return": b["min_return"],
        "switches_per_s": b["switches_per_s"], "switches_per_s_deadband": b["switches_per_s_deadband"],
        "theta_amplitude_ss": b["theta_amplitude_ss"], "distinct_torques": b["distinct_torques"],
        "eq_mean_abs": q.get("mean_abs", np.nan), "n_leaves": b.get("n_leaves", np.nan),
        "tree_depth": b.get("depth", np.nan),
    }


def _mean(g: pd.DataFrame, col: str) -> float:
    return float(np.nanmean(g[col])) if col in g and g[col].notna().any() else np.nan


def success_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per recipe: pairs at n/n balanced and pooled episodes balanced, each with a Wilson 95 % interval
    (descriptive: the claims' intervals are over teachers)."""
    out = []
    for recipe, g in table.groupby("recipe", sort=False):
        perfect = int((g["balanced"] == g["episodes"]).sum())
        lo, hi = wilson_interval(perfect, len(g))
        eb, en = int(g["balanced"].sum()), int(g["episodes"].sum())
        elo, ehi = wilson_interval(eb, en)
        out.append({"recipe": recipe, "pairs_perfect": perfect, "pairs": len(g), "pairs_perfect_rate": perfect / len(g),
                    "pairs_ci_low": lo, "pairs_ci_high": hi, "episodes_balanced": eb, "episodes": en,
                    "balanced_rate": eb / en, "balanced_ci_low": elo, "balanced_ci_high": ehi,
                    "mean_return": float(g["mean_return"].mean()),
                    "max_tree_depth": float(g["tree_depth"].max()) if "tree_depth" in g and g["tree_depth"].notna().any() else np.nan,
                    "mean_leaves": _mean(g, "n_leaves"), "switches_per_s": _mean(g, "switches_per_s"),
                    "switches_per_s_deadband": _mean(g, "switches_per_s_deadband"),
                    "theta_amplitude_ss": _mean(g, "theta_amplitude_ss"), "distinct_torques": _mean(g, "distinct_torques"),
                    "eq_mean_abs": _mean(g, "eq_mean_abs")})
    return pd.DataFrame(out)


def balanced_units(table: pd.DataFrame) -> pd.DataFrame:
    """The per-unit table of every claim: one row per (recipe, teacher, draw), value = share balanced.

    Draws sit inside the teacher they were rolled out from: the teacher is what was trained
    independently, so it is the cluster and intervals are taken over teachers.
    """
    return unit_table({"arm": table["recipe"], "cluster": table["teacher"].astype(int), "unit": table["draw"].astype(int),
                       "value": table["balanced"] / table["episodes"]})


TEACHERS_SOLVED = "every pair's teacher balances n/n on its validation episodes"


def teacher_preconditions(teacher_evals: dict[int, dict]) -> list[dict]:
    """Every pair's teacher must have passed its own validation (all episodes balanced): a tree
    distilled from a teacher that cannot balance says nothing about distillation."""
    failed = [f"slot {t} (seeds {te['training']['failed_seeds']} hit the cap)" for t, te in sorted(teacher_evals.items())
              if not te["training"]["solved"]]
    replaced = [f"slot {t}: {te['training']['replaced_seeds']} → {te['training']['seed']}"
                for t, te in sorted(teacher_evals.items()) if te["training"]["solved"] and te["training"]["replaced_seeds"]]
    n = len(teacher_evals)
    detail = f"{n - len(failed)}/{n} teacher slots passed their validation"
    detail += f"; failed: {'; '.join(failed)}" if failed else ""
    detail += f"; replaced seeds: {'; '.join(replaced)}" if replaced else ""
    return [precondition(TEACHERS_SOLVED, not failed, value=n - len(failed), threshold=n, detail=detail)]


def claim_specs(p: Params, recipes: set[str]) -> list[ClaimSpec]:
    """The control claims, stated from the params they test (headline first)."""
    common = dict(metric="share of held-out episodes balanced", unit="draw", cluster="teacher",
                  preconditions=(TEACHERS_SOLVED,))
    depth, m, n = p.tree.max_depth, p.claims.tree_vs_teacher_margin, p.tree.selection_candidates
    tree = f"Depth-{depth} tree" + (f" (best of {n} on validation)" if n > 1 else "")
    specs = [ClaimSpec(id="tree_vs_teacher", role="headline", kind="non_inferiority", margin=m, table="balanced",
                       statement=f"{tree} balances as well as the TD3 teacher (non-inferior by {m:g}), nominal starts",
                       method="headline", baseline="teacher", **common)]
    if "clean_rollouts" in recipes:
        specs.append(ClaimSpec(id="noisy_vs_clean_rollouts", role="headline", table="balanced",
                               statement=f"Noisy oracle rollouts (σ={p.rollouts.sigma:g}) beat clean rollouts (σ=0)",
                               method="headline", baseline="clean_rollouts", **common))
    if "no_urgency" in recipes:
        specs.append(ClaimSpec(id="urgency_vs_raw_state", role="headline", table="balanced",
                               statement=f"Pole Urgency (kd={p.tree.kd:g}) beats the raw state alone",
                               method="headline", baseline="no_urgency", **common))
    hard = f"10× start noise + observation noise σ={p.eval.obs_noise:g}"
    specs += [ClaimSpec(id="tree_vs_teacher_hard", kind="non_inferiority", margin=m, table="balanced_hard",
                        statement=f"{tree} balances as well as the teacher on the hard set ({hard}; non-inferior by {m:g})",
                        method="headline", baseline="teacher", **{**common, "metric": "share of hard held-out episodes balanced"}),
              ClaimSpec(id="viper_vs_tree", table="balanced",
                        statement=f"VIPER (Q-gap resampling, best of {p.viper.iterations + 1} iterates) beats the behaviour-cloned tree",
                        method="viper", baseline="headline", **common),
              ClaimSpec(id="dagger_vs_tree", table="balanced",
                        statement=f"DAgger with β-mixing (best of {p.dagger.iterations + 1} iterates) beats the behaviour-cloned tree",
                        method="dagger", baseline="headline", **common)]
    return specs


def bounded_table(teacher_evals: dict[int, dict], pairs: dict[tuple[int, int], dict]) -> pd.DataFrame:
    """Disturbed closed loop, one row per (policy, pair): episodes within bounds, stopped episodes and
    the worst amplitudes of the episodes that ran to the end."""
    rows = []
    for (t, d), res in sorted(pairs.items()):
        for name, b in (("teacher", teacher_evals[t]["disturbed"]), ("headline", res["disturbed"])):
            rows.append({"recipe": name, "teacher": t, "draw": d, "within": b["within"], "stopped": b["stopped"],
                         "episodes": b["episodes"],
                         "worst_theta": np.nan if b["worst_theta"] is None else b["worst_theta"],
                         "worst_x": np.nan if b["worst_x"] is None else b["worst_x"]})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- pictures
def plot_trace(teacher: dict, tree: dict, dt: float, start_step: int, window_s: float, path: Path) -> None:
    """θ and torque of one held-out episode, teacher vs tree, over a short steady-state window."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stop = start_step + max(2, int(round(window_s / dt)))
    fig, axes = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True)
    for name, tr, style in (("teacher (TD3)", teacher, "o-"), ("tree (headline)", tree, "s-")):
        theta, action = np.asarray(tr["theta"])[start_step:stop], np.asarray(tr["action"])[start_step:stop]
        t = (start_step + np.arange(len(theta))) * dt
        axes[0].plot(t, theta, style, lw=1, ms=2.5, label=name)
        axes[1].step(t, action, where="post", lw=1, label=name)
    axes[0].set_ylabel("pole angle θ [rad]")
    axes[1].set_ylabel("torque")
    axes[1].set_xlabel("time [s]")
    axes[0].legend(loc="upper right")
    axes[0].set_title(f"First held-out episode, {window_s:g} s from t = {start_step * dt:g} s: continuous teacher vs bang-bang tree")
    fig.tight_layout()
    fig.savefig(path, dpi=90, format="png")
    plt.close(fig)


def plot_bounded(bounded: pd.DataFrame, theta_bound: float, path: Path) -> None:
    """Worst |θ| per pair under the torque pulses, teacher vs headline tree, with the bound."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    pairs = bounded[bounded["recipe"] == "teacher"][["teacher", "draw"]].apply(tuple, axis=1).tolist()
    x = np.arange(len(pairs))
    for off, name in ((-0.2, "teacher"), (0.2, "headline")):
        g = bounded[bounded["recipe"] == name]
        axes[0].bar(x + off, g["worst_theta"], width=0.4, label=name)
        axes[1].bar(x + off, g["within"] / g["episodes"], width=0.4, label=name)
    axes[0].axhline(theta_bound, color="k", lw=0.8, ls="--", label="bound")
    for ax in axes:
        ax.set_xticks(x, [f"{t}-{d}" for t, d in pairs], fontsize=6, rotation=90)
        ax.set_xlabel("pair (teacher-draw)")
    axes[0].set_ylabel("worst |θ| over the episodes [rad]")
    axes[1].set_ylabel("share of episodes within bounds")
    axes[1].set_ylim(0, 1.05)
    axes[0].legend(fontsize=7)
    fig.suptitle("Closed loop under bounded torque pulses (1000 steps, nominal held-out starts)")
    fig.tight_layout()
    fig.savefig(path, dpi=90, format="png")
    plt.close(fig)


def plot_depth(table: pd.DataFrame, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = table[table["recipe"].str.startswith("depth=")].copy()
    d["depth"] = d["recipe"].str.split("=").str[1].astype(int)
    d["frac"] = d["balanced"] / d["episodes"]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (t, dr), g in d.groupby(["teacher", "draw"]):
        g = g.sort_values("depth")
        ax.plot(g["depth"], g["balanced"], marker="o", lw=0.8, alpha=0.6, label=f"teacher {t}, draw {dr}")
    mean = d.groupby("depth")["balanced"].mean()
    ax.plot(mean.index, mean.values, "k-", lw=2.5, label="mean")
    ax.set_xlabel("tree max_depth")
    ax.set_ylabel(f"held-out episodes balanced (of {int(d['episodes'].max())})")
    ax.legend(fontsize=7, ncol=2)
    ax.set_title("Episodes balanced vs tree depth")
    fig.tight_layout()
    fig.savefig(path, dpi=90, format="png")
    plt.close(fig)


def plot_tree(tree: TreePolicy, path: Path) -> None:
    """Draw the tree readably (paperworks.core.tree_plot: sibling leaves with one torque merged,
    deep parts folded, text at a readable size)."""
    from paperworks.core.tree_plot import draw_tree

    draw_tree(tree.left, tree.right, tree.feature, tree.threshold, tree.value, feature_names(tree.kd), path,
              title=f"Headline tree (depth {tree.depth}, {tree.n_leaves} leaves); left branch = condition true, "
                    "leaf = torque")
