"""The live ``evaluate`` call: samples are drawn only when the agent asks, and the answer carries its evidence."""
import pytest

from paperworks.eval_agent.params import AgentParams, ZooParams
from paperworks.eval_agent.service import evaluate
from paperworks.eval_agent.world import Generator, build_prompts

ZOO = ZooParams(prompts_per_dim=20, samples_per_prompt=4, dims=["presence"])
EDGES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
AGENT = AgentParams(batch_size=8, max_rounds=6)


def _gen(**kw):
    base = dict(name="g", family="A", role="in_family", colour_swap=0.0, omission=0.0, count_base=0.0, count_slope=0.0,
                relation_flip=0.0, vertical_factor=1.0, noise_mean=0.0, noise_spread=0.0)
    return Generator(**{**base, **kw})


def test_a_perfect_model_is_very_high_after_few_samples_and_a_forgetful_one_is_low_with_evidence():
    prompts = build_prompts(ZOO, 0)
    good = evaluate(_gen(), "presence", prompts, EDGES, AGENT, ZOO, seed=0, reader="renderer")
    assert good["level"] == "Very High" and good["stop"] == "interval inside one level"
    assert good["samples"] < 48 and good["failing_prompts"] == []  # fewer than the cap, and only what was read
    bad = evaluate(_gen(name="forgetful", omission=0.9), "presence", prompts, EDGES, AGENT, ZOO, seed=0, reader="renderer")
    assert bad["level"] in ("Very Low", "Low") and bad["failing_prompts"] and "forgetful" in bad["explanation"]
    with pytest.raises(ValueError, match="needs tool_model"):
        evaluate(_gen(), "presence", prompts, EDGES, AGENT, ZOO, seed=0)
