"""Every dvc.lock entry belongs to a stage dvc.yaml declares in that form: a plain stage by its name, a matrix
stage's item by ``<name>@<key>``. A stage renamed or turned into a matrix leaves its old entry behind (DVC does not
prune dvc.lock), and a reader of the lock (report_guard, ``dvc exp show``, a person) then sees a stage that no longer
runs. Items of a matrix that the current profile does not expand are kept: another profile's run wrote them."""
from __future__ import annotations

import yaml

from tests.conftest import REPO


def _kinds() -> dict[str, bool]:
    """stage name -> is it a matrix stage"""
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    return {name: "matrix" in body or "foreach" in body for name, body in stages.items()}


def lock_entries_of_no_declared_stage(lock: dict, kinds: dict[str, bool]) -> list[str]:
    bad = []
    for entry in lock.get("stages", {}):
        name, at, _ = entry.partition("@")
        if name not in kinds or kinds[name] != bool(at):
            bad.append(entry)
    return sorted(bad)


def test_the_committed_lock_holds_only_declared_stages():
    lock = yaml.safe_load((REPO / "dvc.lock").read_text())
    assert lock_entries_of_no_declared_stage(lock, _kinds()) == []


def test_a_renamed_or_rematrixed_stage_is_caught():
    kinds = {"a": False, "b": True}
    lock = {"stages": {"a": {}, "b@0": {}, "b": {}, "a@1": {}, "gone": {}, "gone@2": {}}}
    assert lock_entries_of_no_declared_stage(lock, kinds) == ["a@1", "b", "gone", "gone@2"]
