"""The encoder_fusion params section: every profile validates; bad keys and values fail naming the key."""
from pathlib import Path

import pytest
import yaml

from paperworks.core.params import ParamsError, validate_section
from paperworks.core.profile import compose
from paperworks.encoder_fusion.params import Params

CONF = Path(__file__).resolve().parents[2] / "conf"


@pytest.mark.parametrize("profile", ["smoke", "default", "paper"])
def test_profiles_validate(profile):
    p = validate_section("encoder_fusion", Params, compose(profile, CONF)["encoder_fusion"])
    assert p.world.size % 32 == 0 and "cascade" in p.head.fusions
    if profile == "paper":  # 6 raters ranking 3 systems on 300 cases
        assert p.panel.raters == 6 and p.panel.n_cases == 300


def _default():
    return yaml.safe_load((CONF / "default" / "encoder_fusion.yaml").read_text())


def _error(section) -> str:
    with pytest.raises(ParamsError) as e:
        validate_section("encoder_fusion", Params, section)
    return str(e.value)


def test_unknown_key_is_named():
    s = _default()
    s["head"]["seed_count"] = 3
    assert "seed_count" in _error(s)


def test_bad_values_name_key_and_allowed():
    s = _default()
    s["world"]["size"] = 48
    assert "size=48" in _error(s) and "multiple of 32" in _error(s)
    s = _default()
    s["head"]["fusions"] = ["foundation", "sva"]
    msg = _error(s)
    assert "encoder_fusion.head.fusions" in msg and "'cascade'" in msg
    s = _default()
    s["head"]["fusions"] = ["foundation", "parallel"]
    assert "need at least 'foundation' and 'cascade'" in _error(s)
    s = _default()
    s["head"]["heads"] = 3
    assert "divisible by heads=3" in _error(s)
    s = _default()
    s["panel"]["paraphrase_rate"] = 1.5
    assert "encoder_fusion.panel.paraphrase_rate" in _error(s)


def test_bad_decoder_params_name_the_key():
    s = _default()
    s["decoder"]["steps"] = 0
    assert "encoder_fusion.decoder.steps" in _error(s)
    s = _default()
    s["decoder"]["num_heads"] = 3
    assert "divisible by num_heads=3" in _error(s)
    s = _default()
    s["decoder"]["prefix_tokens"] = 4
    assert "prefix_tokens" in _error(s)
    s = _default()
    del s["decoder"]
    assert "encoder_fusion.decoder" in _error(s)


def test_bad_reliability_params_name_the_key():
    s = _default()
    s["reliability"]["coverage"] = 0
    assert "encoder_fusion.reliability.coverage" in _error(s)
    s = _default()
    s["reliability"]["degrade"] = {"blur": 0.0, "gain": 1.0, "offset": 0.0, "noise": 0.0}
    assert "changes nothing" in _error(s)
    s = _default()
    s["reliability"]["degrade"]["gain"] = 3
    assert "encoder_fusion.reliability.degrade.gain" in _error(s)
    s = _default()
    s["head"]["fusions"] = ["foundation", "parallel", "cascade"]
    s["reliability"]["abstention_fusions"] = ["parallel_query"]
    assert "abstention_fusions ['parallel_query']: not trained" in _error(s)
    s = _default()
    s["reliability"]["abstention_fusions"] = ["sva"]
    msg = _error(s)
    assert "encoder_fusion.reliability.abstention_fusions" in msg and "'parallel_query'" in msg


def test_head_seeds_are_a_list_of_distinct_seeds():
    s = _default()
    s["head"]["seeds"] = [0, 0, 1]
    assert "encoder_fusion.head.seeds" in _error(s) and "distinct" in _error(s)
    s = _default()
    s["head"]["seeds"] = 5  # the old count form: one stage per seed needs the seeds named
    assert "encoder_fusion.head.seeds" in _error(s)


def test_a_per_seed_stage_refuses_a_seed_the_params_do_not_list():
    from paperworks.encoder_fusion.params import stage_seed

    p = validate_section("encoder_fusion", Params, _default())
    assert stage_seed(p, ["--seed", str(p.head.seeds[-1])]) == p.head.seeds[-1]
    with pytest.raises(ParamsError, match=r"--seed 99 is not in encoder_fusion.head.seeds \[0, 1, 2, 3, 4\]"):
        stage_seed(p, ["--seed", "99"])
