"""insurance_train@<backbone>-<loss>-<freeze>: one grid configuration, scored at base and fine-tuned."""
from __future__ import annotations

import argparse
import logging
import time

from dvclive import Live

from paperworks.core.io import write_json, write_parquet, write_run_log
from paperworks.core.params import ParamsError, global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed, seed_everything
from paperworks.core.stage import stage_main
from paperworks.insurance import crossencoder as ce
from paperworks.insurance import first_stage as fs
from paperworks.insurance import paths, runs
from paperworks.insurance.params import Params

log = logging.getLogger("paperworks.insurance")


@stage_main
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backbone", required=True)
    ap.add_argument("--loss", required=True)
    ap.add_argument("--freeze", required=True)
    args = ap.parse_args()
    p = load_section("insurance", Params)
    if args.backbone not in paths.BACKBONE:
        raise ParamsError(f"insurance.grid.backbones: unknown backbone '{args.backbone}' (allowed: general, domain)")
    if args.loss not in ce.LOSSES:
        raise ParamsError(f"insurance.grid.losses: unknown loss '{args.loss}' (allowed: {', '.join(ce.LOSSES)})")
    if args.freeze not in ce.FREEZES:
        raise ParamsError(f"insurance.grid.freezes: unknown freezing strategy '{args.freeze}' (allowed: {', '.join(ce.FREEZES)})")
    name = paths.config_name(args.backbone, args.loss, args.freeze)
    # one seed for every grid config: same head init and list order, so configs differ only by design
    seed = derive_seed(global_seed(read_params_file()), "insurance", "train")
    seed_everything(seed)
    rg = p.first_stage.relevant_grade
    train, val, test = (fs.read_lists(paths.lists_file(s), rg) for s in ("train", "val", "test"))
    ks = p.eval.ks
    backbone_dir = paths.BACKBONE[args.backbone]

    model = ce.load_cross_encoder(backbone_dir, p.backbone.max_length, seed)
    base_test = runs.evaluate(model, test, ks)  # the untrained base checkpoint (its head is random)

    cfg = runs.train_config(p, args.loss, args.freeze, seed)
    stop_val = runs.early_stop_lists(val, p.train.early_stop_lists, seed)
    t0 = time.perf_counter()
    with Live(str(paths.PLOTS / "live_train" / name), dvcyaml=False, save_dvc_exp=False) as live:
        def on_step(step: int, loss: float) -> None:
            live.log_metric("train/loss", loss)
            live.next_step()

        # the same model as the base above, now fine-tuned until validation NDCG@3 plateaus
        record = ce.train_listwise(model, train, cfg, validate=lambda m: float(runs.evaluate(m, stop_val, [3])["ndcg@3"].mean()),
                                   on_step=on_step)
    train_s = time.perf_counter() - t0
    ft_val = runs.evaluate(model, val, ks)
    ft_test = runs.evaluate(model, test, ks)
    out = paths.GRID / name
    schema = ce.metrics_schema(ks)
    write_parquet(out / "base_test.parquet", base_test, schema)
    write_parquet(out / "ft_val.parquet", ft_val, schema)
    write_parquet(out / "ft_test.parquet", ft_test, schema)
    write_json(out / "record.json", {
        "config": name, "backbone": args.backbone, "loss": args.loss, "freeze": args.freeze, **record,
        "train_lists": len(train), "early_stop_lists": len(stop_val),
        "train_pairs_seen": int(record["steps"] * cfg.batch_lists * cfg.train_list_size),
        "val_ndcg@3": float(ft_val["ndcg@3"].mean()),
        "test_ndcg@3": float(ft_test["ndcg@3"].mean()), "base_test_ndcg@3": float(base_test["ndcg@3"].mean()),
    })
    write_run_log(f"insurance/train_{name}", {"train_seconds": train_s})  # per-machine: kept out of record.json
    log.info("%s: %d steps (%.2f epochs, stopped early: %s), val NDCG@3 %.4f, test NDCG@3 %.4f (base %.4f)", name,
             record["steps"], record["epochs_run"], record["stopped_early"], ft_val["ndcg@3"].mean(),
             ft_test["ndcg@3"].mean(), base_test["ndcg@3"].mean())


if __name__ == "__main__":
    main()
