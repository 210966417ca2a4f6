"""Print the control track's measured results as Markdown, straight from the files the
pipeline wrote (metrics/control.json, plots/control/*.csv), for docs/tracks/control.md.

    python -m paperworks.control.summary
"""
from __future__ import annotations

import json

import pandas as pd

from paperworks.control.layout import METRICS, PLOTS


def _f(v, digits=2):
    return "–" if v is None or (isinstance(v, float) and v != v) else f"{v:.{digits}f}"


def teacher_lines(metrics: dict) -> list[str]:
    t = metrics["teachers"]
    out = [f"Teachers: {t['solved']}/{t['slots']} slots passed their validation; {t['replaced_seeds']} seed(s) replaced by reserves.", "",
           "| slot | seed | passed validation | replaced seeds | env steps to first pass | kept checkpoint (step) | env steps trained |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    for slot, r in t["per_slot"].items():
        out.append(f"| {slot} | {r['seed']} | {'yes' if r['solved'] else '**no**'} | {r['replaced_seeds'] or '–'} | "
                   f"{r['steps_to_first_pass'] or '–'} | {r['kept_step']} | {r['env_steps']} |")
    return out


def recipe_lines(recipes: pd.DataFrame, full: bool = True) -> list[str]:
    if full:
        out = ["| recipe | pairs at n/n balanced | 95 % CI | episodes balanced | 95 % CI | mean return | sign switches/s | with dead-band | θ amplitude (ss) | distinct torques | mean abs e_q |",
               "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    else:
        out = ["| recipe | pairs at n/n balanced | 95 % CI | episodes balanced | 95 % CI | mean return |",
               "| --- | --- | --- | --- | --- | --- |"]
    for _, r in recipes.iterrows():
        row = (f"| {r.recipe} | {r.pairs_perfect}/{r.pairs} | [{_f(r.pairs_ci_low)}, {_f(r.pairs_ci_high)}] | "
               f"{r.episodes_balanced}/{r.episodes} | [{_f(r.balanced_ci_low)}, {_f(r.balanced_ci_high)}] | {_f(r.mean_return, 1)} |")
        if full:
            row += (f" {_f(r.switches_per_s)} | {_f(r.switches_per_s_deadband)} | {_f(r.theta_amplitude_ss, 4)} | "
                    f"{_f(r.distinct_torques, 1)} | {_f(r.eq_mean_abs, 3)} |")
        out.append(row)
    return out


def bounded_lines(metrics: dict) -> list[str]:
    b = metrics["bounded"]
    d = b["disturbance"]
    out = [f"Torque pulses of ±{d['pulse_amplitude']:g} for {d['pulse_steps']} steps every {d['pulse_every']} steps, "
           f"1000 steps from the nominal held-out starts; bounds |θ| ≤ {d['theta_bound']:g} rad, |x| ≤ {d['x_bound']:g}. "
           f"Largest |leaf torque| of any headline tree: {_f(b['max_abs_leaf_torque'])} (the tree's output is bounded by its leaves). "
           "Worst amplitudes are over the episodes that ran all 1000 steps.", "",
           "| policy | episodes within bounds | episodes stopped (\\|θ\\| > 0.2) | pairs with every episode within | worst \\|θ\\| | median worst \\|θ\\| per pair | worst \\|x\\| |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    for name in ("teacher", "headline"):
        r = b[name]
        out.append(f"| {name} | {_f(r['within_rate'])} | {_f(r['stopped_rate'])} | {r['pairs_all_within']}/{r['pairs']} | {_f(r['worst_theta'], 3)} | "
                   f"{_f(r['median_worst_theta'], 3)} | {_f(r['worst_x'], 3)} |")
    return out


def markdown(metrics: dict, recipes: pd.DataFrame, hard: pd.DataFrame, profile: str) -> str:
    g = metrics["grid"]
    out = [f"Profile `{profile}`: {g['teachers']} teacher slot(s) × {g['draws']} draw(s), "
           f"{g['heldout_episodes']} held-out episodes per policy and set.", ""]
    out += teacher_lines(metrics) + ["", "**Nominal held-out starts**", ""] + recipe_lines(recipes)
    out += ["", "**Hard held-out set** (10× start noise + observation noise)", ""] + recipe_lines(hard, full=False)
    out += ["", "**Bounded response under disturbance pulses**", ""] + bounded_lines(metrics)
    out += ["", f"Recipes reaching n/n on ≥ {metrics['target_pairs_perfect_rate']:.0%} of pairs (depth ≤ 7): "
            f"{metrics['recipes_reaching_target'] or 'none'}"]
    return "\n".join(out)


def main() -> None:
    import yaml

    profile = yaml.safe_load(open("params.yaml")).get("profile", "?")
    print(markdown(json.loads(METRICS.read_text()), pd.read_csv(PLOTS / "recipes.csv"),
                   pd.read_csv(PLOTS / "recipes_hard.csv"), profile))


if __name__ == "__main__":
    main()
