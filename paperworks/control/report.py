"""Aggregate the (teacher, draw) grid: success rates with Wilson intervals, claims, plots."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from paperworks.control.tree import TreePolicy, feature_names
from paperworks.control.params import Params
from paperworks.core.claims import ClaimSpec, precondition, unit_table
from paperworks.core.stats import wilson_interval

INTERPRETABLE_DEPTH = 7   # the target: a tree of depth <= 7 that balances n/n on >= 90 % of pairs


def recipe_table(teacher_evals: dict[int, dict], pairs: dict[tuple[int, int], dict]) -> pd.DataFrame:
    """One row per (recipe, pair): held-out episodes balanced, mean return, behaviour."""
    rows = []
    for (t, d), res in sorted(pairs.items()):
        te = teacher_evals[t]["nominal"]
        rows.append(_row("teacher", t, d, te))
        named = {"headline": res["recipes"]["headline"], "viper": res["recipes"]["viper"], "dagger": res["recipes"]["dagger"]}
        for group in ("sigma", "kd", "depth"):
            for k, key in res["recipes"][group].items():
                named[f"{group}={k}"] = key
        for name, key in named.items():
            rows.append(_row(name, t, d, res["variants"][key]))
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


def success_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per recipe: pairs at n/n balanced and pooled episodes balanced, each with a Wilson 95 % interval."""
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
                    "max_tree_depth": float(g["tree_depth"].max()) if g["tree_depth"].notna().any() else np.nan,
                    "mean_leaves": float(g["n_leaves"].mean()) if g["n_leaves"].notna().any() else np.nan,
                    "switches_per_s": float(g["switches_per_s"].mean()),
                    "switches_per_s_deadband": float(g["switches_per_s_deadband"].mean()),
                    "theta_amplitude_ss": float(np.nanmean(g["theta_amplitude_ss"])) if g["theta_amplitude_ss"].notna().any() else np.nan,
                    "distinct_torques": float(g["distinct_torques"].mean()),
                    "eq_mean_abs": float(np.nanmean(g["eq_mean_abs"])) if g["eq_mean_abs"].notna().any() else np.nan})
    return pd.DataFrame(out)


def balanced_units(table: pd.DataFrame) -> pd.DataFrame:
    """The per-unit table of every claim: one row per (recipe, teacher, draw), value = share balanced.

    Draws sit inside the teacher they were rolled out from: the teacher is what was trained
    independently, so it is the cluster and intervals are taken over teachers.
    """
    return unit_table({"arm": table["recipe"], "cluster": table["teacher"].astype(int), "unit": table["draw"].astype(int),
                       "value": table["balanced"] / table["episodes"]})


def teacher_preconditions(table: pd.DataFrame) -> list[dict]:
    """Every pair's teacher must balance n/n on its held-out episodes: a tree distilled from a
    teacher that cannot balance says nothing about distillation."""
    teach = table[table["recipe"] == "teacher"].drop_duplicates("teacher").sort_values("teacher")
    failed = [f"teacher {int(r.teacher)} balanced {int(r.balanced)}/{int(r.episodes)}" for r in teach.itertuples()
              if r.balanced != r.episodes]
    solved = len(teach) - len(failed)
    detail = f"{solved}/{len(teach)} teachers balance every held-out episode" + (f" ({'; '.join(failed)})" if failed else "")
    return [precondition("every teacher solves its task", not failed, value=solved, threshold=len(teach), detail=detail)]


def claim_specs(p: Params, recipes: set[str]) -> list[ClaimSpec]:
    """The control claims, stated from the params they test (headline first)."""
    rests_on = ("every teacher solves its task",)
    common = dict(table="balanced", metric="share of held-out episodes balanced", unit="draw", cluster="teacher",
                  preconditions=rests_on)
    depth, m = p.tree.max_depth, p.claims.tree_vs_teacher_margin
    specs = [ClaimSpec(id="tree_vs_teacher", role="headline", kind="non_inferiority", margin=m,
                       statement=f"Depth-{depth} tree balances as well as the TD3 teacher (non-inferior by {m:g})",
                       method="headline", baseline="teacher", **common)]
    if "sigma=0" in recipes and p.rollouts.sigma != 0:
        specs.append(ClaimSpec(id="noisy_vs_clean_rollouts", role="headline",
                               statement=f"Noisy oracle rollouts (σ={p.rollouts.sigma:g}) beat clean rollouts",
                               method="headline", baseline="sigma=0", **common))
    if "kd=none" in recipes and p.tree.pole_urgency:
        specs.append(ClaimSpec(id="urgency_vs_raw_state", role="headline",
                               statement=f"Pole Urgency (kd={p.tree.kd:g}) beats the raw state alone",
                               method="headline", baseline="kd=none", **common))
    specs += [ClaimSpec(id="viper_vs_tree", statement="VIPER (Q-gap resampling, iterated) beats the behaviour-cloned tree",
                        method="viper", baseline="headline", **common),
              ClaimSpec(id="dagger_vs_tree", statement="DAgger with β-mixing beats the behaviour-cloned tree",
                        method="dagger", baseline="headline", **common)]
    return specs


# ---------------------------------------------------------------- pictures
def plot_trace(teacher: dict, tree: dict, dt: float, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    for name, tr, style in (("teacher (TD3)", teacher, "-"), ("tree (headline)", tree, "-")):
        t = np.arange(len(tr["theta"])) * dt
        axes[0].plot(t, tr["theta"], style, lw=1, label=name)
        axes[1].plot(t, tr["action"], style, lw=0.8, label=name)
    axes[0].set_ylabel("pole angle θ [rad]")
    axes[1].set_ylabel("torque")
    axes[1].set_xlabel("time [s]")
    axes[0].legend(loc="upper right")
    axes[0].set_title("First held-out episode: continuous teacher vs bang-bang tree")
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
    """Draw the tree from its arrays (leaves left to right, splits above their children)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = feature_names(tree.kd)
    pos: dict[int, tuple[float, int]] = {}
    counter = [0]

    def place(node: int, depth: int) -> float:
        if tree.left[node] == -1:
            x = counter[0]
            counter[0] += 1
        else:
            x = (place(int(tree.left[node]), depth + 1) + place(int(tree.right[node]), depth + 1)) / 2
        pos[node] = (x, depth)
        return x

    place(0, 0)
    n_leaves = max(counter[0], 1)
    fig, ax = plt.subplots(figsize=(max(8, n_leaves * 0.75), (tree.depth + 1) * 1.3))
    for node, (x, y) in pos.items():
        for child in (tree.left[node], tree.right[node]):
            if child != -1:
                cx, cy = pos[int(child)]
                ax.plot([x, cx], [-y, -cy], "-", color="0.6", lw=0.6)
    for node, (x, y) in pos.items():
        if tree.left[node] == -1:
            v = tree.value[node]
            text, colour = f"{v:+.2f}", plt.cm.coolwarm((v + 3) / 6)
        else:
            text, colour = f"{names[tree.feature[node]]}\n≤ {tree.threshold[node]:.3f}", "white"
        ax.text(x, -y, text, ha="center", va="center", fontsize=6,
                bbox={"boxstyle": "round,pad=0.2", "fc": colour, "ec": "0.4", "lw": 0.5})
    ax.set_axis_off()
    ax.set_title(f"Headline tree (depth {tree.depth}, {tree.n_leaves} leaves); left branch = condition true, leaf = torque")
    fig.tight_layout()
    fig.savefig(path, dpi=70, format="png")
    plt.close(fig)
