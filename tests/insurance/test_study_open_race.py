"""Two workers opening a fresh shared study at once: the one that loses Optuna's table-creation
race (an IntegrityError from the database) retries and joins the study instead of crashing."""
from __future__ import annotations

import optuna
import pytest
from sqlalchemy.exc import IntegrityError

from paperworks.insurance import tuning


def test_losing_the_table_creation_race_retries_then_opens(monkeypatch, tmp_path):
    real = optuna.storages.RDBStorage
    calls = []

    class RacingStorage(real):
        def __init__(self, url, **kwargs):
            calls.append(url)
            if len(calls) == 1:  # the other worker created the catalogue type first
                raise IntegrityError("CREATE TYPE", {}, Exception("duplicate key value violates unique constraint"))
            super().__init__(url, **kwargs)

    monkeypatch.setattr(optuna.storages, "RDBStorage", RacingStorage)
    monkeypatch.setattr(tuning.time, "sleep", lambda s: None)
    study = tuning.open_study("s", f"sqlite:///{tmp_path / 'study.db'}", seed=0)
    assert len(calls) == 2 and study.study_name == "s"


def test_a_persistent_integrity_error_is_not_swallowed(monkeypatch, tmp_path):
    class AlwaysRacing(optuna.storages.RDBStorage):
        def __init__(self, url, **kwargs):
            raise IntegrityError("CREATE TYPE", {}, Exception("duplicate key"))

    monkeypatch.setattr(optuna.storages, "RDBStorage", AlwaysRacing)
    monkeypatch.setattr(tuning.time, "sleep", lambda s: None)
    with pytest.raises(IntegrityError):
        tuning.open_study("s", f"sqlite:///{tmp_path / 'study.db'}", seed=0)


def test_losing_a_create_table_race_retries_too(monkeypatch, tmp_path):
    from sqlalchemy.exc import ProgrammingError

    real, calls = optuna.storages.RDBStorage, []

    class DuplicateTableOnce(real):
        def __init__(self, url, **kwargs):
            calls.append(url)
            if len(calls) == 1:
                raise ProgrammingError("CREATE TABLE studies", {}, Exception('relation "studies" already exists'))
            super().__init__(url, **kwargs)

    monkeypatch.setattr(optuna.storages, "RDBStorage", DuplicateTableOnce)
    monkeypatch.setattr(tuning.time, "sleep", lambda s: None)
    assert tuning.open_study("s", f"sqlite:///{tmp_path / 'study.db'}", seed=0).study_name == "s" and len(calls) == 2
