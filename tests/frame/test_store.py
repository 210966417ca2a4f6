"""`flows.store --glob` picks stages by name, with their upstream stages, as the flow's `--targets` do
(DVC's own `push --glob` matches file paths)."""
import pytest

from flows.store import selected_stages
from tests.conftest import REPO


def test_glob_picks_the_tracks_stages_and_what_they_depend_on():
    stages = selected_stages(["control_*"], REPO)
    assert "params_check" in stages and any(s.startswith("control_evaluate") for s in stages)
    assert all(s == "params_check" or s.startswith("control_") for s in stages)


def test_a_pattern_matching_no_stage_fails_naming_it():
    with pytest.raises(SystemExit, match=r"target 'video_qa_nope_\*' matches no stage"):
        selected_stages(["video_qa_nope_*"], REPO)
