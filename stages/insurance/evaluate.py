"""insurance_evaluate: claims, summary, headroom and tables for the insurance track."""
from __future__ import annotations

import logging

import pandas as pd

from paperworks.core.io import ArtifactError, atomic_path, read_json, read_parquet, write_json
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.claims import claim_summary, evaluate_claims, evidence_block, live_curve, load_evidence, write_unit_tables
from paperworks.core.stage import stage_main
from paperworks.insurance import crossencoder as ce
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
        "zeroshot_initial": read(paths.ZEROSHOT / "initial_test.parquet"),
        "zeroshot_optimized": read(paths.ZEROSHOT / "optimized_test.parquet"),
    }
    grid = {}
    for d in sorted(paths.GRID.iterdir()):
        if d.is_dir():
            grid[d.name] = (read(d / "base_test.parquet"), read(d / "ft_test.parquet"))
    if not grid:
        raise ArtifactError(f"{paths.GRID}: no grid results")
    seeds = read_json(paths.SEEDS / "summary.json")
    tuned = {}
    for c in seeds["configs"]:
        frames = [read(paths.SEEDS / c["config"] / f"seed{i}_test.parquet") for i in range(seeds["n_seeds"])]
        tuned[c["config"]] = rp.seed_mean(frames)
    best_name = seeds["best_config"]
    best_grid = max(grid, key=lambda n: read_json(paths.GRID / n / "record.json")["val_ndcg@3"])

    best_frames = [read(paths.SEEDS / best_name / f"seed{i}_test.parquet") for i in range(seeds["n_seeds"])]
    units = {f"queries_{m.replace('@', '')}": rp.query_units("tuned cross-encoder", best_frames,
                                                             "zero-shot (optimised instruction)", methods["zeroshot_optimized"], m)
             for m in ("ndcg@3", "spearman")}
    curves = {n: live_curve(paths.PLOTS / "live_train" / n / "plots/metrics/train/loss.tsv") for n in grid}
    claims = evaluate_claims(rp.claim_specs(p), units, rp.training_preconditions(curves, p, ev), ev,
                             seed=global_seed(raw), track="insurance")
    write_unit_tables("insurance", units)
    grid_table = rp.grid_table(grid)

    all_methods = dict(methods)
    all_methods.update({f"tuned:{k}": v for k, v in tuned.items()})
    all_methods.update({f"grid_ft:{k}": ft for k, (_b, ft) in grid.items()})
    all_methods.update({f"grid_base:{k}": b for k, (b, _f) in grid.items()})
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
    ft_ndcg3 = [rp.summarise(ft)["ndcg@3"] for _b, ft in grid.values()]
    metrics = {
        "claims": claims,
        "claim_summary": claim_summary(claims),
        "evidence": evidence_block(ev, global_seed(raw)),
        "summary": {
            "random": rp.summarise(methods["random"]),
            "first_stage": rp.summarise(methods["first_stage"]),
            "zeroshot_initial": rp.summarise(methods["zeroshot_initial"]),
            "zeroshot_optimized": rp.summarise(methods["zeroshot_optimized"]),
            "best_grid_finetuned": {"config": best_grid, **rp.summarise(grid[best_grid][1])},
            "best_tuned": {"config": best_name, **best_summary, "std_over_seeds": std},
        },
        "best_tuned_config": best_name,
        "headroom": {
            "oracle_ndcg@3": 1.0,
            "random_ndcg@3": rp.summarise(methods["random"])["ndcg@3"],
            "first_stage_ndcg@3": rp.summarise(methods["first_stage"])["ndcg@3"],
            "zeroshot_optimized_ndcg@3": rp.summarise(methods["zeroshot_optimized"])["ndcg@3"],
            "best_tuned_ndcg@3": best_summary["ndcg@3"],
            "headroom_above_best": 1.0 - best_summary["ndcg@3"],
            "grid_finetuned_ndcg@3_range": [min(ft_ndcg3), max(ft_ndcg3)],
        },
        "zeroshot_optimisation": {k: zs[k] for k in ("initial_instruction", "best_instruction", "initial_score",
                                                     "best_score", "iterations")},
        "first_stage_recall": first["recall"],
        "data_card": first["data_card"],
        "label_audit": {k: v for k, v in read_json(paths.AUDIT).items() if k != "disagreement_examples"},
        "profile": raw.get("profile"),
    }
    write_json(paths.METRICS, metrics)
    for c in claims:
        log.info("%s: %s", c["id"], c["verdict"])


if __name__ == "__main__":
    main()
