"""The eval_agent params section: every profile validates; bad keys and values fail naming the key."""
from pathlib import Path

import pytest
import yaml

from paperworks.core.params import ParamsError, validate_section
from paperworks.core.profile import compose
from paperworks.eval_agent.params import Params

CONF = Path(__file__).resolve().parents[2] / "conf"


@pytest.mark.parametrize("profile", ["smoke", "default", "paper"])
def test_profiles_validate(profile):
    p = validate_section("eval_agent", Params, compose(profile, CONF)["eval_agent"])
    assert p.agent.batch_size * p.agent.max_rounds <= p.zoo.prompts_per_dim * p.zoo.samples_per_prompt
    if profile == "paper":  # T2I-CompBench: 300 prompts × 10 samples per dimension
        assert p.zoo.prompts_per_dim * p.zoo.samples_per_prompt == 3000 and p.agent.repeats == 10


def _default():
    return yaml.safe_load((CONF / "default" / "eval_agent.yaml").read_text())


def _error(section) -> str:
    with pytest.raises(ParamsError) as e:
        validate_section("eval_agent", Params, section)
    return str(e.value)


def test_unknown_key_and_choice_name_the_key():
    s = _default()
    s["agent"]["rounds"] = 3
    assert "eval_agent.agent.rounds" in _error(s)
    s = _default()
    s["agent"]["allocation"] = "greedy"
    msg = _error(s)
    assert "eval_agent.agent.allocation" in msg and "neyman" in msg and "proportional" in msg
    s = _default()
    s["zoo"]["dims"] = ["colour", "style"]
    assert "eval_agent.zoo.dims" in _error(s)


def test_agent_cap_must_fit_the_benchmark():
    s = _default()
    s["agent"]["max_rounds"] = 100  # 800 samples > 80 prompts × 5
    msg = _error(s)
    assert "agent.batch_size × agent.max_rounds = 800" in msg and "400" in msg


def test_planner_needs_training_generators_and_whole_heads():
    s = _default()
    s["planner"]["heldout_generators"] = s["zoo"]["n_population"]
    msg = _error(s)
    assert "planner.heldout_generators = 20" in msg and "zoo.n_population" in msg
    s = _default()
    s["planner"]["hidden"] = 90  # 4 heads
    assert "planner.hidden = 90" in _error(s)
    s = _default()
    s["claims"]["min_valid_action_rate"] = 1.5
    assert "eval_agent.claims.min_valid_action_rate" in _error(s)
