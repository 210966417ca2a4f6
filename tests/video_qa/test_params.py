"""The video_qa params section: every profile validates; bad values fail naming the key and the allowed range."""
from pathlib import Path

import pytest
import yaml

from paperworks.core.params import ParamsError, validate_section
from paperworks.core.profile import compose
from paperworks.video_qa.params import Params

CONF = Path(__file__).resolve().parents[2] / "conf"


@pytest.mark.parametrize("profile", ["smoke", "default", "paper"])
def test_profiles_validate(profile):
    p = validate_section("video_qa", Params, compose(profile, CONF)["video_qa"])
    assert p.pipeline.global_frames <= p.world.n_frames
    if profile == "paper":  # Video-MME long: 300 test videos × 3 questions, 30-minute videos at 1 fps
        assert p.world.n_test_videos == 300 and p.world.questions_per_video == 3 and p.world.n_frames / p.world.fps == 1800


def _default():
    return yaml.safe_load((CONF / "default" / "video_qa.yaml").read_text())


def _error(section) -> str:
    with pytest.raises(ParamsError) as e:
        validate_section("video_qa", Params, section)
    return str(e.value)


def test_out_of_range_names_key_and_bound():
    s = _default()
    s["world"]["n_frames"] = 50
    msg = _error(s)
    assert "video_qa.world.n_frames" in msg and "120" in msg
    s = _default()
    s["pipeline"]["relevance_threshold"] = 1.5
    msg = _error(s)
    assert "video_qa.pipeline.relevance_threshold" in msg and "less than 1" in msg
    s = _default()
    s["gate"]["paper_tau"] = -0.1
    msg = _error(s)
    assert "video_qa.gate.paper_tau" in msg and "greater than or equal to 0" in msg


def test_wrong_choice_names_allowed_values():
    s = _default()
    s["world"]["sizes"] = ["huge"]
    msg = _error(s)
    assert "video_qa.world.sizes.0" in msg and "'small', 'medium' or 'large'" in msg


def test_cross_field_rules():
    s = _default()
    s["world"]["mix"] = {"global": 0.5, "local": 0.5, "temporal": 0.5, "counting": 0.0}
    assert "shares must sum to 1" in _error(s)
    s = _default()
    s["world"]["n_frames"], s["world"]["n_events"] = 200, 10
    s["pipeline"]["window_frames"] = 300
    assert "must be ≤ world.n_frames (200)" in _error(s)
    s = _default()
    s["world"]["size"] = 66
    assert "multiple of 4" in _error(s)
    s = _default()
    s["answerer"]["hidden"] = 0
    msg = _error(s)
    assert "video_qa.answerer.hidden" in msg and "greater than or equal to 1" in msg


def test_typos_and_types_fail():
    s = _default()
    s["pipeline"]["max_round"] = 3
    assert "video_qa.pipeline.max_round" in _error(s)
    s = _default()
    s["world"]["n_test_videos"] = True  # a bool is not an int
    assert "video_qa.world.n_test_videos" in _error(s)


def test_training_seeds_are_distinct_and_present():
    s = _default()
    s["seeds"] = [0, 1, 1]
    msg = _error(s)
    assert "video_qa.seeds" in msg and "distinct" in msg
    s["seeds"] = []
    assert "video_qa.seeds" in _error(s)
    del s["seeds"]
    assert "video_qa.seeds" in _error(s)
