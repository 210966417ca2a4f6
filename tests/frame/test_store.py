"""`flows.store --glob` picks stages by name from dvc.lock (DVC's own `push --glob` matches file paths)."""
from pathlib import Path

import pytest
import yaml

from flows.store import locked_stages


def _lock(tmp_path: Path, *names: str) -> Path:
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump({"schema": "2.0", "stages": {n: {"cmd": "true"} for n in names}}, sort_keys=False))
    return tmp_path


def test_glob_picks_the_matching_locked_stages_matrix_items_included(tmp_path):
    repo = _lock(tmp_path, "params_check", "control_teacher@0", "control_evaluate", "mol_base")
    assert locked_stages(["control_*"], repo) == ["control_teacher@0", "control_evaluate"]
    assert locked_stages(["mol_*", "params_check"], repo) == ["params_check", "mol_base"]


def test_a_pattern_matching_no_locked_stage_fails_naming_it(tmp_path):
    repo = _lock(tmp_path, "control_evaluate")
    with pytest.raises(SystemExit, match=r"no stage of .*dvc.lock matches video_qa_\*"):
        locked_stages(["video_qa_*"], repo)
    with pytest.raises(SystemExit, match="matches control_"):
        locked_stages(["control_"], tmp_path / "missing")  # no lock at all
