"""insurance_tune: Optuna on the top-k grid configurations by validation NDCG@3.

Every trial trains like a grid model (all training lists, early stopping on the validation
subset); a median pruner ends trials whose validation curve falls below the median of the
earlier trials at the same step.
"""
from __future__ import annotations

import logging
from pathlib import Path

import optuna

from paperworks.core.io import ArtifactError, read_json, write_json, write_text
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed, seed_everything
from paperworks.core.stage import stage_main
from paperworks.insurance import first_stage as fs
from paperworks.insurance import paths, runs, tuning
from paperworks.insurance.params import Params

log = logging.getLogger("paperworks.insurance")


def grid_records(grid_dir: Path) -> list[dict]:
    records = [read_json(f) for f in sorted(grid_dir.glob("*/record.json"))]
    if not records:
        raise ArtifactError(f"{grid_dir}: no grid results (run insurance_train first)")
    return records


@stage_main
def main() -> None:
    p = load_section("insurance", Params)
    t = p.tune
    seed = derive_seed(global_seed(read_params_file()), "insurance", "tune")
    seed_everything(seed)
    rg = p.first_stage.relevant_grade
    train, val = fs.read_lists(paths.lists_file("train"), rg), fs.read_lists(paths.lists_file("val"), rg)
    records = sorted(grid_records(paths.GRID), key=lambda r: (-r["val_ndcg@3"], r["config"]))
    top = records[: t.top_k]
    stop_val = runs.early_stop_lists(val, p.train.early_stop_lists, seed)
    if t.storage.startswith("sqlite:///"):
        Path(t.storage.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    write_text(paths.OPTUNA_DIR / "STORAGE.txt", f"studies live in {t.storage.split('@')[-1]}\n")  # never the password
    space = {"lr": t.lr_range, "epochs": t.epochs_range, "warmup": t.warmup_range, "list_size": t.list_size_range,
             "train_lists": len(train), "val_lists": len(stop_val), "base": p.train.model_dump(),
             "max_length": p.backbone.max_length}
    results = []
    for rank, rec in enumerate(top):
        backbone_dir = paths.BACKBONE[rec["backbone"]]

        def objective(trial: optuna.Trial, rec=rec, backbone_dir=backbone_dir) -> float:
            cfg = runs.train_config(
                p, rec["loss"], rec["freeze"], seed,
                lr=trial.suggest_float("lr", *t.lr_range, log=True),
                epochs=trial.suggest_int("epochs", *t.epochs_range),
                warmup_ratio=trial.suggest_float("warmup_ratio", *t.warmup_range),
                train_list_size=trial.suggest_int("train_list_size", *t.list_size_range),
            )

            def on_eval(step: int, value: float) -> None:
                trial.report(value, step)
                if trial.should_prune():
                    raise optuna.TrialPruned()

            # early-stopped like every other model; the objective is its best validation point
            _model, record = runs.fine_tune(backbone_dir, train, cfg, stop_val, on_eval=on_eval)
            trial.set_user_attr("steps", record["steps"])
            trial.set_user_attr("epochs_run", record["epochs_run"])
            return float(record["best_val_ndcg@3"])

        name = tuning.study_name(t.study_prefix, rec["config"], space)
        study = tuning.open_study(name, t.storage, seed, t.heartbeat_s, t.grace_s)
        if not study.trials:  # the grid's own setting is the first trial, so tuning never loses it
            study.enqueue_trial(tuning.clamp_defaults(p.train, t))
        tuning.run_study(study, objective, t.n_trials)
        best = tuning.best_or_none(study)
        states = {s.name: sum(tr.state == s for tr in study.trials) for s in optuna.trial.TrialState}
        results.append({"rank": rank, "config": rec["config"], "backbone": rec["backbone"], "loss": rec["loss"],
                        "freeze": rec["freeze"], "grid_val_ndcg@3": rec["val_ndcg@3"], "study": name,
                        "best": best, "trial_states": {k: v for k, v in states.items() if v}})
        log.info("tuned %s: %s", rec["config"], best)
    write_json(paths.TUNE / "best.json", {"top_k": t.top_k, "n_trials": t.n_trials, "configs": results})


if __name__ == "__main__":
    main()
