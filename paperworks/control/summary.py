"""Print the control track's measured results as Markdown, straight from the files the
pipeline wrote (metrics/control.json, plots/control/recipes.csv), for docs/tracks/control.md.

    python -m paperworks.control.summary
"""
from __future__ import annotations

import json

import pandas as pd

from paperworks.control.layout import METRICS, PLOTS
from paperworks.core.report import claims_markdown, precondition_lines


def _f(v, digits=2):
    return "–" if v is None or (isinstance(v, float) and v != v) else f"{v:.{digits}f}"


def markdown(metrics: dict, recipes: pd.DataFrame, profile: str) -> str:
    g = metrics["grid"]
    out = [f"Profile `{profile}`: {g['teachers']} teacher seed(s) × {g['draws']} draw(s), "
           f"{g['heldout_episodes']} held-out episodes per policy.", "",
           "| recipe | pairs at n/n balanced | 95 % CI | episodes balanced | 95 % CI | mean return | sign switches/s | with dead-band | θ amplitude (ss) | distinct torques | mean abs e_q |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for _, r in recipes.iterrows():
        out.append(
            f"| {r.recipe} | {r.pairs_perfect}/{r.pairs} | [{_f(r.pairs_ci_low)}, {_f(r.pairs_ci_high)}] | "
            f"{r.episodes_balanced}/{r.episodes} | [{_f(r.balanced_ci_low)}, {_f(r.balanced_ci_high)}] | "
            f"{_f(r.mean_return, 1)} | {_f(r.switches_per_s)} | {_f(r.switches_per_s_deadband)} | "
            f"{_f(r.theta_amplitude_ss, 4)} | {_f(r.distinct_torques, 1)} | {_f(r.eq_mean_abs, 3)} |")
    out += ["", claims_markdown(metrics["claims"]), "Preconditions:", *precondition_lines(metrics)]
    rob = metrics["robustness"]
    out += ["", "| robustness (share of episodes balanced) | teacher | headline tree |", "| --- | --- | --- |",
            f"| initial-state noise (reset_noise_scale) | {_f(rob['teacher_reset_noise_balanced_rate'])} | {_f(rob['headline_reset_noise_balanced_rate'])} |",
            f"| observation noise | {_f(rob['teacher_obs_noise_balanced_rate'])} | {_f(rob['headline_obs_noise_balanced_rate'])} |",
            "", f"TD3 env steps to the first deterministic evaluation of 1000, per teacher: {metrics['teacher_steps_to_1000']}",
            f"Recipes reaching n/n on ≥ {metrics['target_pairs_perfect_rate']:.0%} of pairs (depth ≤ 7): {metrics['recipes_reaching_target'] or 'none'}"]
    ex = metrics.get("expert_teacher_pairs")
    if ex:
        out += ["", f"On the {ex['pairs']} pair(s) whose teacher balanced every held-out episode: share of pairs at n/n "
                f"{ {k: round(v, 3) for k, v in ex['pairs_perfect_rate'].items()} }; recipes reaching the target there: "
                f"{ex['recipes_reaching_target'] or 'none'}"]
    return "\n".join(out)


def main() -> None:
    import yaml

    profile = yaml.safe_load(open("params.yaml")).get("profile", "?")
    print(markdown(json.loads(METRICS.read_text()), pd.read_csv(PLOTS / "recipes.csv"), profile))


if __name__ == "__main__":
    main()
