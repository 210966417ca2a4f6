"""insurance_seeds: the tuned configurations retrained with n seeds; the best one is saved."""
from __future__ import annotations

import logging

import numpy as np

from paperworks.core.io import atomic_path, read_json, write_json, write_parquet
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed, seed_everything
from paperworks.core.stage import stage_main
from paperworks.insurance import crossencoder as ce
from paperworks.insurance import first_stage as fs
from paperworks.insurance import paths, runs
from paperworks.insurance.params import Params

log = logging.getLogger("paperworks.insurance")


@stage_main
def main() -> None:
    p = load_section("insurance", Params)
    g = global_seed(read_params_file())
    rg = p.first_stage.relevant_grade
    train, val, test = (fs.read_lists(paths.lists_file(s), rg) for s in ("train", "val", "test"))
    tuned = read_json(paths.TUNE / "best.json")["configs"]
    ks = p.eval.ks
    schema = ce.metrics_schema(ks)
    summary, first_models = [], {}
    for entry in tuned:
        overrides = (entry["best"] or {}).get("params", {})
        val_scores, test_scores = [], []
        for i in range(p.seeds.n_seeds):
            seed = derive_seed(g, "insurance", "seeds", i)
            seed_everything(seed)
            cfg = runs.train_config(p, entry["loss"], entry["freeze"], seed, **overrides)
            stop_val = runs.early_stop_lists(val, p.train.early_stop_lists, seed)
            model, record = runs.fine_tune(paths.BACKBONE[entry["backbone"]], train, cfg, stop_val)
            v, te = runs.evaluate(model, val, ks), runs.evaluate(model, test, ks)
            write_parquet(paths.SEEDS / entry["config"] / f"seed{i}_test.parquet", te, schema)
            # the curves feed the convergence preconditions of the claims
            write_json(paths.SEEDS / entry["config"] / f"seed{i}_record.json", {"config": entry["config"], "seed_index": i, **record})
            val_scores.append(float(v["ndcg@3"].mean()))
            test_scores.append({m: float(te[m].mean()) for m in te.columns if m not in ("query_id", "intent")})
            if i == 0:
                first_models[entry["config"]] = model
            log.info("%s seed %d: val NDCG@3 %.4f test NDCG@3 %.4f", entry["config"], i, val_scores[-1], test_scores[-1]["ndcg@3"])
        summary.append({"config": entry["config"], "backbone": entry["backbone"], "loss": entry["loss"],
                        "freeze": entry["freeze"], "params": overrides, "val_ndcg@3": val_scores,
                        "val_ndcg@3_mean": float(np.mean(val_scores)), "test": test_scores})
    # the headline model is chosen on validation, never on test
    best = max(summary, key=lambda s: (s["val_ndcg@3_mean"], s["config"]))
    with atomic_path(paths.BEST_MODEL) as tmp:
        first_models[best["config"]].save_pretrained(str(tmp))
    write_json(paths.SEEDS / "summary.json", {"n_seeds": p.seeds.n_seeds, "best_config": best["config"], "configs": summary})


if __name__ == "__main__":
    main()
