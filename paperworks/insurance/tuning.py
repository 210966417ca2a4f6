"""Optuna tuning of the top grid configurations (paper §5: 50 trials each).

SQLite by default; any SQLAlchemy URL (``postgresql://…``) lets several workers share
one study. Studies are resumable (``load_if_exists``): a rerun only runs the trials
still missing. A trial whose objective raises is marked FAIL and the study goes on;
a trial left RUNNING by a killed process is failed by the heartbeat check on resume.
Intermediate validation NDCG@3 per epoch feeds a median pruner.
"""
from __future__ import annotations

import hashlib
import json
import logging
import time
from typing import Callable

import optuna
from optuna.trial import TrialState

log = logging.getLogger("paperworks.insurance")
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


def study_name(prefix: str, config: str, search_space: dict) -> str:
    """Name a study by config and search space, so a changed space starts a fresh study."""
    digest = hashlib.sha256(json.dumps(search_space, sort_keys=True).encode()).hexdigest()[:8]
    return f"{prefix}{config}-{digest}"


def _rdb_storage(storage_url: str, heartbeat_s: int, grace_s: int, attempts: int = 5) -> optuna.storages.RDBStorage:
    """Optuna creates its tables on first open; two workers opening a fresh PostgreSQL database at
    once race on that (a UniqueViolation on the type catalogue, or DuplicateTable when both create the
    same table). The loser retries: by then the tables exist and opening is a no-op."""
    from sqlalchemy.exc import IntegrityError, ProgrammingError

    for attempt in range(attempts):
        try:
            return optuna.storages.RDBStorage(storage_url, heartbeat_interval=heartbeat_s, grace_period=grace_s)
        except (IntegrityError, ProgrammingError):
            if attempt == attempts - 1:
                raise
            time.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")


def open_study(name: str, storage_url: str, seed: int, heartbeat_s: int = 60, grace_s: int = 120) -> optuna.Study:
    storage = _rdb_storage(storage_url, heartbeat_s, grace_s)
    study = optuna.create_study(
        study_name=name, storage=storage, direction="maximize", load_if_exists=True,
        # sampler and pruner are not stored with the study: pass them on every open
        sampler=optuna.samplers.TPESampler(seed=seed, n_startup_trials=5),
        pruner=optuna.pruners.MedianPruner(n_startup_trials=1, n_warmup_steps=0),
    )
    optuna.storages.fail_stale_trials(study)
    return study


def run_study(study: optuna.Study, objective: Callable[[optuna.Trial], float], n_trials: int) -> optuna.Study:
    """Run until ``n_trials`` trials of the study have finished (complete or pruned); failed ones are
    retried. Several workers may share the study (PostgreSQL): each stops once the study as a whole
    has ``n_trials`` finished, so the total overshoots by at most one trial in flight per extra worker."""
    done = sum(t.state in FINISHED for t in study.trials)
    remaining = max(0, n_trials - done)
    if remaining:
        study.optimize(objective, n_trials=remaining, catch=(Exception,), gc_after_trial=True,
                       callbacks=[optuna.study.MaxTrialsCallback(n_trials, states=FINISHED)])
    return study


def best_or_none(study: optuna.Study) -> dict | None:
    complete = [t for t in study.trials if t.state == TrialState.COMPLETE]
    if not complete:
        return None
    best = max(complete, key=lambda t: t.value)
    return {"value": best.value, "params": best.params, "number": best.number}


def clamp_defaults(train, tune) -> dict:
    """The grid's training params as a first Optuna trial, clipped into the search ranges."""
    clip = lambda v, r: min(max(v, r[0]), r[1])  # noqa: E731
    return {"lr": clip(train.lr, tune.lr_range), "epochs": clip(train.epochs, tune.epochs_range),
            "warmup_ratio": clip(train.warmup_ratio, tune.warmup_range),
            "train_list_size": clip(train.train_list_size, tune.list_size_range)}
