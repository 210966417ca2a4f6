"""control_distill@T-D — fit the headline tree, the arms of the claims and the ablation sweeps on one
(teacher, draw) pair, plus VIPER and β-DAgger; score every tree on the fixed held-out episodes
(nominal starts), the claimed arms also on the hard set (10× start noise + observation noise),
and the headline tree under bounded torque pulses."""
from __future__ import annotations

import argparse

from tqdm import tqdm

from paperworks.control.distill import (IterConfig, Recipe, behaviour, bootstrap_candidates, dagger, disturbed_response,
                                        fit_tree, pick_best, run_episodes, short_behaviour, trace, viper)
from paperworks.control.env import control_dt
from paperworks.control.layout import (distill_dir, distill_validation_seeds, disturbance_seeds, heldout_seeds,
                                       robust_seeds, rollouts_path, teacher_dir)
from paperworks.control.params import Params
from paperworks.control.policies import Actor, Critic
from paperworks.control.tree import feature_names
from paperworks.control.rollouts import SCHEMA, arrays
from paperworks.core.io import atomic_path, read_parquet, write_json, write_text
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed
from paperworks.core.stage import stage_main

# the arms the claims compare (all picked with the same budget); the rest are plain-fit sweeps
CLAIMED = ("headline", "clean_rollouts", "no_urgency", "viper", "dagger")


def recipes(p: Params) -> dict:
    """Every tree this pair fits, grouped by the ablation it belongs to (keys shared when equal)."""
    t, r = p.tree, p.rollouts
    kd = t.kd if t.pole_urgency else None
    n = t.selection_candidates
    groups = {"headline": Recipe(r.sigma, kd, t.max_depth, candidates=n)}
    if r.sigma != 0 and 0.0 in r.sigma_sweep:
        groups["clean_rollouts"] = Recipe(0.0, kd, t.max_depth, candidates=n)
    if kd is not None:
        groups["no_urgency"] = Recipe(r.sigma, None, t.max_depth, candidates=n)
    groups["viper"] = Recipe(r.sigma, kd, t.max_depth, "viper")
    groups["dagger"] = Recipe(r.sigma, kd, t.max_depth, "dagger")
    groups["sigma"] = {f"{s:g}": Recipe(s, kd, t.max_depth) for s in r.sigma_sweep}
    groups["kd"] = {"none": Recipe(r.sigma, None, t.max_depth), **{f"{k:g}": Recipe(r.sigma, k, t.max_depth) for k in t.kd_sweep}}
    groups["depth"] = {str(d): Recipe(r.sigma, kd, d) for d in t.depth_sweep}
    return groups


def flatten(groups: dict) -> list[Recipe]:
    out = []
    for v in groups.values():
        for r in (v.values() if isinstance(v, dict) else [v]):
            if r not in out:
                out.append(r)
    return out


def keys(groups: dict) -> dict:
    return {k: ({kk: r.key for kk, r in v.items()} if isinstance(v, dict) else v.key) for k, v in groups.items()}


@stage_main
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--teacher", type=int, required=True)
    ap.add_argument("--draw", type=int, required=True)
    args = ap.parse_args()
    p = load_section("control", Params)
    g = global_seed(read_params_file())
    T, D = args.teacher, args.draw
    actor = Actor.load(teacher_dir(T) / "actor.safetensors", p.teacher.net_arch)
    critic = Critic.load(teacher_dir(T) / "critic.safetensors", p.teacher.net_arch)
    df = read_parquet(rollouts_path(T, D), SCHEMA)
    e, env_id, max_steps = p.eval, p.env.id, p.env.max_steps
    dt = control_dt(env_id)
    seed = derive_seed(g, "control", "distill", T, D)
    held, hard = heldout_seeds(g, e.episodes), robust_seeds(g, e.episodes)
    it_cfg = IterConfig(
        iterations=0, episodes_per_iteration=0, env_id=env_id, max_steps=max_steps,
        validation_seeds=tuple(distill_validation_seeds(g, T, D, e.validation_episodes)),
        min_samples_leaf=p.tree.min_samples_leaf, action_grid=p.viper.action_grid,
    )

    groups = recipes(p)
    claimed = {groups[name]: name for name in CLAIMED if name in groups}
    trees, variants, histories = {}, {}, {}
    for rec in tqdm(flatten(groups), desc=f"distill t{T} d{D}", unit="tree"):
        try:
            S, Y, W = arrays(df, rec.sigma)
        except KeyError as err:
            raise SystemExit(f"error: {rollouts_path(T, D)}: {err}") from None
        if rec.method == "bc" and rec.candidates > 1:
            cands = bootstrap_candidates(S, Y, W, rec.kd, rec.depth, p.tree.min_samples_leaf, rec.candidates, seed)
            tree, histories[rec.key] = pick_best(cands, it_cfg)
        elif rec.method == "bc":
            tree = fit_tree(S, Y, W, rec.kd, rec.depth, p.tree.min_samples_leaf, seed)
        elif rec.method == "viper":
            cfg = IterConfig(**{**it_cfg.__dict__, "iterations": p.viper.iterations,
                                "episodes_per_iteration": p.viper.episodes_per_iteration})
            tree, histories["viper"] = viper(actor, critic, S, Y, W, rec.kd, rec.depth, cfg, seed)
        else:
            cfg = IterConfig(**{**it_cfg.__dict__, "iterations": p.dagger.iterations,
                                "episodes_per_iteration": p.dagger.episodes_per_iteration,
                                "beta0": p.dagger.beta0, "beta_decay": p.dagger.beta_decay})
            # DAgger starts from the plain full-data fit: its own iterates are its whole pick
            start = trees.get(Recipe(rec.sigma, rec.kd, rec.depth)) or fit_tree(S, Y, W, rec.kd, rec.depth, p.tree.min_samples_leaf, seed)
            tree, histories["dagger"] = dagger(actor, start, S, Y, W, rec.kd, rec.depth, cfg, seed)
        trees[rec] = tree
        eps = run_episodes(tree, env_id, held, max_steps)
        variants[rec.key] = {**behaviour(eps, actor, dt, e.deadband, e.steady_from, max_steps),
                             "n_leaves": tree.n_leaves, "depth": tree.depth, "rows": int(len(S)),
                             "max_abs_leaf_torque": float(abs(tree.value[tree.left == -1]).max())}
        if rec in claimed:
            variants[rec.key]["hard"] = short_behaviour(
                run_episodes(tree, env_id, hard, max_steps, reset_noise_scale=e.reset_noise_scale, obs_noise=e.obs_noise))
        if rec == groups["headline"]:
            head_trace = trace(eps[0])

    head = trees[groups["headline"]]
    disturbed = disturbed_response(head, env_id, held, disturbance_seeds(g, e.episodes), max_steps, e.disturbance)
    with atomic_path(distill_dir(T, D)) as tmp:
        tmp.mkdir()
        for name in ("headline", "viper", "dagger"):
            trees[groups[name]].save(tmp / f"tree_{name}.json")
        write_text(tmp / "rules.md", f"# Headline tree, teacher {T}, draw {D} ({groups['headline'].key})\n\n"
                   f"```\n{head.rules(feature_names(head.kd))}\n```\n")
        write_json(tmp / "results.json", {
            "teacher": T, "draw": D, "recipes": keys(groups), "variants": variants, "disturbed": disturbed,
            "trace": head_trace, "histories": histories,
        })


if __name__ == "__main__":
    main()
