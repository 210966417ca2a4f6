"""Optuna: SQLite storage, resumable studies, crashed trials marked failed, pruning, stale trials."""
from __future__ import annotations

import time

import optuna
from optuna.trial import TrialState

from paperworks.insurance import tuning

optuna.logging.set_verbosity(optuna.logging.WARNING)


def url(tmp_path):
    return f"sqlite:///{tmp_path / 'study.db'}"


def test_study_name_changes_with_search_space():
    a = tuning.study_name("p-", "cfg", {"lr": [1e-5, 1e-4]})
    assert a == tuning.study_name("p-", "cfg", {"lr": [1e-5, 1e-4]})
    assert a != tuning.study_name("p-", "cfg", {"lr": [1e-5, 2e-4]})


def test_crashed_trial_is_failed_and_study_resumes(tmp_path):
    calls = {"n": 0}

    def objective(trial):
        calls["n"] += 1
        x = trial.suggest_float("x", 0, 1)
        if calls["n"] == 2:
            raise RuntimeError("simulated crash (e.g. out of memory)")
        return x

    study = tuning.open_study("s", url(tmp_path), seed=0)
    tuning.run_study(study, objective, n_trials=3)
    states = [t.state for t in study.trials]
    assert states.count(TrialState.FAIL) == 1 and states.count(TrialState.COMPLETE) == 2

    # a new process opens the same study: it resumes and only runs what is missing
    again = tuning.open_study("s", url(tmp_path), seed=0)
    assert len(again.trials) == 3
    tuning.run_study(again, objective, n_trials=3)
    assert sum(t.state == TrialState.COMPLETE for t in again.trials) == 3
    n_before = len(again.trials)
    tuning.run_study(again, objective, n_trials=3)  # already done: no new trials
    assert len(again.trials) == n_before
    assert tuning.best_or_none(again)["value"] == max(t.value for t in again.trials if t.state == TrialState.COMPLETE)


def test_stale_running_trial_is_failed_on_resume(tmp_path):
    study = tuning.open_study("stale", url(tmp_path), seed=0, heartbeat_s=1, grace_s=1)
    trial = study.ask()  # a worker that dies mid-trial leaves this RUNNING
    study._storage.record_heartbeat(trial._trial_id)
    time.sleep(2.2)
    resumed = tuning.open_study("stale", url(tmp_path), seed=0, heartbeat_s=1, grace_s=1)
    assert resumed.trials[0].state == TrialState.FAIL


def test_pruning_stops_bad_trials(tmp_path):
    def objective(trial):
        good = trial.number == 0
        for step in range(3):
            trial.report(1.0 if good else 0.0, step)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return 1.0 if good else 0.0

    study = tuning.open_study("prune", url(tmp_path), seed=0)
    tuning.run_study(study, objective, n_trials=3)
    assert any(t.state == TrialState.PRUNED for t in study.trials)


def test_clamp_defaults_into_ranges():
    from types import SimpleNamespace

    train = SimpleNamespace(lr=1.0, epochs=9, warmup_ratio=0.1, train_list_size=2)
    tune = SimpleNamespace(lr_range=(1e-5, 1e-4), epochs_range=(1, 2), warmup_range=(0.0, 0.2), list_size_range=(4, 8))
    assert tuning.clamp_defaults(train, tune) == {"lr": 1e-4, "epochs": 2, "warmup_ratio": 0.1, "train_list_size": 4}
