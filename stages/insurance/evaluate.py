"""insurance_evaluate: claims, summary, headroom and tables for the insurance track."""
from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from paperworks.core.io import ArtifactError, atomic_path, read_json, read_parquet, write_json
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.claims import claim_summary, evaluate_claims, evidence_block, load_evidence, write_unit_tables
from paperworks.core.stage import stage_main
from paperworks.core.ranking import ndcg_at_k
from paperworks.insurance import crossencoder as ce
from paperworks.insurance import first_stage as fs
from paperworks.insurance import paths
from paperworks.insurance import report as rp
from paperworks.insurance.params import Params

log = logging.getLogger("paperworks.insurance")


def write_csv(path, df: pd.DataFrame) -> None:
    with atomic_path(path) as tmp:
        df.to_csv(tmp, index=False, float_format="%.5f")


@stage_main
def main() -> None:
    p = load_section("insurance", Params)
    ev = load_evidence()
    raw = read_params_file()
    schema = ce.metrics_schema(p.eval.ks)
    read = lambda path: read_parquet(path, schema)  # noqa: E731
    methods: dict[str, pd.DataFrame] = {
        "random": read(paths.LISTS / "random_test.parquet"),
        "first_stage": read(paths.LISTS / "first_stage_test.parquet"),
        "bi_encoder_cosine": read(paths.ZEROSHOT / "bi_encoder_test.parquet"),
        "zeroshot_initial": read(paths.ZEROSHOT / "initial_test.parquet"),
        "zeroshot_optimized": read(paths.ZEROSHOT / "optimized_test.parquet"),
    }
    grid = {}
    for d in sorted(paths.GRID.iterdir()):
        if d.is_dir():
            grid[d.name] = (read(d / "base_test.parquet"), read(d / "ft_test.parquet"), read_json(d / "record.json"))
    if not grid:
        raise ArtifactError(f"{paths.GRID}: no grid results")
    seeds = read_json(paths.SEEDS / "summary.json")
    test_lists = fs.read_lists(paths.lists_file("test"), p.first_stage.relevant_grade)
    tuned = {}
    for c in seeds["configs"]:
        frames = [read(paths.SEEDS / c["config"] / f"seed{i}_test.parquet") for i in range(seeds["n_seeds"])]
        tuned[c["config"]] = rp.seed_mean(frames)
    best_name = seeds["best_config"]
    best_grid = max(grid, key=lambda n: grid[n][2]["val_ndcg@3"])

    best_frames = [read(paths.SEEDS / best_name / f"seed{i}_test.parquet") for i in range(seeds["n_seeds"])]
    units = {f"queries_{m.replace('@', '')}": rp.query_units("tuned cross-encoder", best_frames,
                                                             "zero-shot (optimised instruction)", methods["zeroshot_optimized"], m)
             for m in ("ndcg@3", "spearman")}
    # every trained model: the grid and every seed of the tuned configurations
    records = {f"grid:{n}": rec for n, (_b, _f, rec) in grid.items()}
    seed_records = {c["config"]: [read_json(paths.SEEDS / c["config"] / f"seed{i}_record.json") for i in range(seeds["n_seeds"])]
                    for c in seeds["configs"]}
    records.update({f"seeds:{n}#{i}": r for n, rs in seed_records.items() for i, r in enumerate(rs)})
    claims = evaluate_claims(rp.claim_specs(p), units, rp.training_preconditions(records, p, ev), ev,
                             seed=global_seed(raw), track="insurance")
    write_unit_tables("insurance", units)
    grid_table = rp.grid_table(grid)

    all_methods = dict(methods)
    all_methods.update({f"tuned:{k}": v for k, v in tuned.items()})
    all_methods.update({f"grid_ft:{k}": ft for k, (_b, ft, _r) in grid.items()})
    all_methods.update({f"grid_floor:{k}": b for k, (b, _f, _r) in grid.items()})
    write_csv(paths.PLOTS / "results_by_intent.csv", rp.by_intent(all_methods))
    write_csv(paths.PLOTS / "grid.csv", grid_table)
    seeds_tab = rp.seeds_table(seeds)
    write_csv(paths.PLOTS / "tuned_seeds.csv", seeds_tab)
    method_table = pd.DataFrame([{"method": k, **rp.summarise(v)} for k, v in all_methods.items()])
    write_csv(paths.PLOTS / "methods.csv", method_table)

    best_summary = rp.summarise(tuned[best_name])
    std = seeds_tab[seeds_tab["config"] == best_name].set_index("metric")["std"].to_dict()
    first = read_json(paths.FIRST_STAGE)
    zs = read_json(paths.ZEROSHOT / "result.json")
    ft_ndcg3 = [rp.summarise(ft)["ndcg@3"] for _b, ft, _r in grid.values()]
    curve = learning_curve(best_name, seed_records[best_name])
    oracle = [float(np.mean([ndcg_at_k(sorted(r.labels, reverse=True), 3, all_rels=r.ideal_labels)
                             for r in test_lists.itertuples(index=False)]))]
    metrics = {
        "claims": claims,
        "claim_summary": claim_summary(claims),
        "evidence": evidence_block(ev, global_seed(raw)),
        "summary": {
            "random": rp.summarise(methods["random"]),
            "first_stage": rp.summarise(methods["first_stage"]),
            "zeroshot_initial": rp.summarise(methods["zeroshot_initial"]),
            "zeroshot_optimized": rp.summarise(methods["zeroshot_optimized"]),
            "bi_encoder_cosine": rp.summarise(methods["bi_encoder_cosine"]),
            "best_grid_finetuned": {"config": best_grid, **rp.summarise(grid[best_grid][1])},
            "best_tuned": {"config": best_name, **best_summary, "std_over_seeds": std},
        },
        "best_tuned_config": best_name,
        "headroom": {
            "oracle_ndcg@3": oracle[0],  # the best reordering of each list (first-stage misses inside it stay)
            "random_ndcg@3": rp.summarise(methods["random"])["ndcg@3"],
            "first_stage_ndcg@3": rp.summarise(methods["first_stage"])["ndcg@3"],
            "zeroshot_optimized_ndcg@3": rp.summarise(methods["zeroshot_optimized"])["ndcg@3"],
            "best_tuned_ndcg@3": best_summary["ndcg@3"],
            "headroom_above_best": oracle[0] - best_summary["ndcg@3"],
            "grid_finetuned_ndcg@3_range": [min(ft_ndcg3), max(ft_ndcg3)],
        },
        "zeroshot_optimisation": {k: zs[k] for k in ("initial_instruction", "best_instruction", "initial_score",
                                                     "best_score", "iterations", "val_lists", "bi_encoder_val_ndcg@3")},
        "training": {"grid": {n: {k: rec[k] for k in ("steps", "epochs_run", "best_step", "stopped_early", "best_val_ndcg@3")}
                              for n, (_b, _f, rec) in grid.items()},
                     "seeds": {n: [{k: r[k] for k in ("steps", "epochs_run", "best_step", "stopped_early", "best_val_ndcg@3")}
                                   for r in rs] for n, rs in seed_records.items()},
                     "tuning": {c["config"]: {"best": c["best"], "trial_states": c["trial_states"]}
                                for c in read_json(paths.TUNE / "best.json")["configs"]},
                     "n_seeds": seeds["n_seeds"], "learning_curve_config": best_name},
        "first_stage_recall": first["recall"],
        "first_stage": {k: first[k] for k in ("fusion", "list_size", "share_without_relevant", "share_without_relevant_rrf_equal_k60")},
        "data_card": first["data_card"],
        "label_audit": {k: v for k, v in read_json(paths.AUDIT).items() if k != "disagreement_examples"},
        "profile": raw.get("profile"),
    }
    write_json(paths.METRICS, metrics)
    with atomic_path(paths.PLOTS / "learning_curve.csv") as tmp:
        curve.to_csv(tmp, index=False, float_format="%.5f")
    plot_learning_curve(curve, best_name)
    for c in claims:
        log.info("%s: %s", c["id"], c["verdict"])


def learning_curve(config: str, seed_records: list[dict]) -> pd.DataFrame:
    """Validation NDCG@3 (early-stopping subset) vs optimizer step for every seed of one configuration."""
    rows = [{"config": config, "seed_index": i, "step": s, "val_ndcg@3": v, "best_step": r["best_step"],
             "steps_per_epoch": r["steps_per_epoch"]}
            for i, r in enumerate(seed_records) for s, v in r["val_curve"]]
    return pd.DataFrame(rows)


def plot_learning_curve(curve: pd.DataFrame, config: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for i, part in curve.groupby("seed_index"):
        line, = ax.plot(part["step"], part["val_ndcg@3"], marker=".", label=f"seed {i}")
        best = part[part["step"] == part["best_step"].iloc[0]]
        ax.scatter(best["step"], best["val_ndcg@3"], marker="*", s=120, color=line.get_color(), zorder=3)
        ax.axvline(part["step"].max(), color=line.get_color(), ls=":", lw=0.8)
    spe = int(curve["steps_per_epoch"].iloc[0])
    for e in range(1, int(curve["step"].max() // spe) + 1):
        ax.axvline(e * spe, color="grey", lw=0.5)
    ax.set_xlabel(f"optimizer step (grey lines: epochs of {spe} steps; dotted: where early stopping ended)")
    ax.set_ylabel("validation NDCG@3")
    ax.set_title(f"Learning curve of {config} (★ kept checkpoint)", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    with atomic_path(paths.PLOTS / "learning_curve.png") as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
