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


def test_a_slice_session_reads_only_the_slices_prompts_and_returns_evidence_and_cost():
    from paperworks.eval_agent.queries import parse_query
    from paperworks.eval_agent.service import evaluate_slice

    zoo = ZooParams(prompts_per_dim=30, samples_per_prompt=2, dims=["colour"])
    prompts = build_prompts(zoo, 0)
    q = parse_query("does it keep blue objects blue?")
    assert (q.dim, q.colour) == ("colour", "blue")
    slice_ = {b.index for b in prompts if q.matches(b)}
    assert 0 < len(slice_) < 30
    out = evaluate_slice(_gen(colour_swap=0.45), q, prompts, EDGES, AGENT, zoo, seed=1, reader="renderer")
    assert out["slice"] == "colour:blue" and out["cost"]["slice_samples"] == 2 * len(slice_)
    assert out["cost"]["samples"] == out["samples"] <= min(48, 2 * len(slice_)) and out["cost"]["cpu_seconds"] >= 0
    assert out["evidence"] and all(e["prompt_index"] in slice_ and "blue" in e["prompt"] for e in out["evidence"])
    assert out["failing_total"] >= len(out["evidence"]) and all(e["read"] for e in out["evidence"])  # what the reader saw
    assert out["level"] in ("Very Low", "Low", "Medium")  # swaps colours on most two- and three-object prompts


def test_the_cli_and_the_http_server_refuse_what_they_cannot_answer(tmp_path, capsys):
    import json
    import threading
    import urllib.error
    import urllib.request

    from paperworks.eval_agent import service

    assert service.main(["how well does A0 count?", "--root", str(tmp_path)]) == 2  # no params.yaml, no artifacts
    assert "error:" in capsys.readouterr().err
    server = service.make_server(tmp_path, port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_port}"
        for path, code in (("/ask?q=how+well+does+A0+count%3F", 400), ("/ask", 400), ("/other", 404)):
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(base + path, timeout=30)
            assert e.value.code == code and "error" in json.loads(e.value.read())
    finally:
        server.shutdown()
        server.server_close()
