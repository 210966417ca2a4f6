"""Report-decoder and explore seed i read encoder draw ``head.seeds[i]`` (each seed sits on its own independent
draw of the frozen encoders), and more stage seeds than head seeds is a clear ``ParamsError`` before any work.

The stage tests run the decoder and explore stages in process, in a temporary folder, on the smoke world with
fake cached tokens whose values name their draw; the model training is stubbed to record which draw each seed's
models were given, so the tests check the stages' wiring, not the models."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import yaml

from paperworks.core.io import read_json, save_safetensors
from paperworks.core.params import ParamsError, validate_section
from paperworks.core.profile import compose
from paperworks.encoder_fusion.artifacts import DECODER, EXPLORE, encoder_dir, features_dir, read_world
from paperworks.encoder_fusion.params import Params, encoder_draws
from tests.encoder_fusion.test_params import CONF, _default, _error

DRAWS = [6, 1, 4]  # head.seeds in an order where "seed index i" and "head seed i" differ


def _params(**stage_seeds: int) -> Params:
    s = _default()
    s["head"]["seeds"] = list(DRAWS)
    for stage, n in stage_seeds.items():
        s[stage]["seeds"] = n
    return validate_section("encoder_fusion", Params, s)


def test_seed_i_reads_the_draw_of_head_seed_i():
    p = _params(decoder=3, explore=2)
    assert encoder_draws(p, "decoder") == [6, 1, 4]
    assert encoder_draws(p, "explore") == [6, 1]
    assert [features_dir(d).name for d in encoder_draws(p, "explore")] == ["seed_6", "seed_1"]
    assert encoder_draws(_params(decoder=1), "decoder") == [6]
    with pytest.raises(ValueError, match="allowed decoder, explore"):
        encoder_draws(p, "vqa")


def test_more_stage_seeds_than_head_seeds_is_a_clear_error():
    for stage, other in (("decoder", "explore"), ("explore", "decoder")):
        s = _default()
        s["head"]["seeds"] = list(DRAWS)
        s[stage]["seeds"] = 4
        s[other]["seeds"] = 1  # within the 3 draws: only `stage` is wrong, whatever the default's counts
        msg = _error(s)
        assert f"encoder_fusion.{stage}.seeds=4 exceeds len(encoder_fusion.head.seeds)=3" in msg and "[6, 1, 4]" in msg
    # the stage-side check, on params that skipped validation
    p = _params(decoder=3)
    bad = p.model_copy(update={"decoder": p.decoder.model_copy(update={"seeds": 5})})
    with pytest.raises(ParamsError, match=r"encoder_fusion.decoder.seeds=5 exceeds len\(encoder_fusion.head.seeds\)=3"):
        encoder_draws(bad, "decoder")
    assert encoder_draws(bad, "explore") == [6, 1, 4][:p.explore.seeds]


# ------------------------------------------------------------------ the stages, in process
@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """Smoke params with head.seeds = DRAWS, the smoke world, and per draw k fake tokens whose values are all k."""
    import stages.encoder_fusion.cases as cases_stage

    params = compose("smoke", CONF)
    params["encoder_fusion"]["head"]["seeds"] = list(DRAWS)
    params["encoder_fusion"]["decoder"]["seeds"] = 3
    params["encoder_fusion"]["explore"]["seeds"] = 2
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    monkeypatch.chdir(tmp_path)
    for var in ("DVC_STAGE", "PAPERWORKS_PARAMS_GUARD"):
        monkeypatch.delenv(var, raising=False)
    cases_stage.main()
    n = len(read_world()[0])
    for k in DRAWS:
        features_dir(k).mkdir(parents=True)
        save_safetensors(features_dir(k) / "tokens.safetensors",
                         {"foundation": torch.full((n, 4, 8), float(k)), "xray": torch.full((n, 16, 8), float(k)),
                          "path": torch.full((n, 16, 8), float(k)), "question_embeddings": torch.zeros(5, 12)})
    return tmp_path


def _draw(tokens: dict) -> int:
    values = torch.cat([tokens[k].flatten() for k in ("foundation", "xray", "path")]).unique()
    assert len(values) == 1, "one seed's models got tokens of several draws"
    return int(values.item())


def test_decoder_seed_i_trains_and_reports_on_draw_head_seeds_i(workdir, monkeypatch):
    import stages.encoder_fusion.decoder as stage

    trained, generated = [], []

    def train(model, tokens, *a, **k):
        trained.append(_draw(tokens))
        return [{"step": 0, "dev_loss": 1.0, "selected": True}]

    def generate(model, tokenizer, tokens, rows, *a, **k):
        generated.append(_draw(tokens))
        return ["No lesion."] * len(rows)

    monkeypatch.setattr(stage, "ReportDecoder", lambda *a, **k: None)
    monkeypatch.setattr(stage, "train_decoder", train)
    monkeypatch.setattr(stage, "generate_reports", generate)
    stage.main()
    fusions = len(Params.model_validate(yaml.safe_load((workdir / "params.yaml").read_text())["encoder_fusion"]).head.fusions)
    assert trained == generated == [d for d in DRAWS for _ in range(fusions)]
    assert read_json(DECODER / "decoder.json")["encoder_seeds"] == {"0": 6, "1": 1, "2": 4}


def test_explore_seed_i_uses_draw_head_seeds_i_for_tokens_and_tool(workdir, monkeypatch):
    import stages.encoder_fusion.explore as stage

    loaded, tool_tokens, trained, evaluated = [], [], [], []

    class Tool:
        def __init__(self, specialist, modality):
            self.modality = modality

        def from_tokens(self, tokens):
            k = int(tokens.unique().item())
            tool_tokens.append(k)
            return [SimpleNamespace(text=f"tool draw {k} {self.modality}", findings=()) for _ in range(len(tokens))]

    class Model:
        def state_dict(self):
            return {}

        def load_state_dict(self, state):
            pass

    def train(model, tokens, sources, *a, **k):
        trained.append(_draw(tokens))
        return [{"step": 0, "dev_loss": 1.0, "selected": True}]

    def comply(model, tokenizer, tokens, rows, ids, kinds, *a):
        evaluated.append(_draw(tokens))
        return [{"case_id": c, "kind": kind, "text": "", "complies": True} for c in ids for kind in kinds]

    def generate(model, tokenizer, tokens, rows, prompt, *a):
        evaluated.append(_draw(tokens))
        return ["No lesion."] * len(rows)

    tool_prompts, make_data = [], stage.make_data

    def data(tokenizer, rows, prompts, *a):
        tool_prompts.append({int(t.split()[2]) for t in prompts if t.startswith("tool draw")})
        return make_data(tokenizer, rows, prompts, *a)

    monkeypatch.setattr(stage, "make_data", data)
    monkeypatch.setattr(stage, "load_model", lambda path, model: loaded.append(path) or model)
    monkeypatch.setattr(stage, "SegmentationTool", Tool)
    monkeypatch.setattr(stage, "PromptedDecoder", lambda *a, **k: Model())
    monkeypatch.setattr(stage, "train_prompted", train)
    monkeypatch.setattr(stage, "compliance", comply)
    monkeypatch.setattr(stage, "generate_prompted", generate)
    stage.main()
    explore_draws = DRAWS[:2]
    assert loaded == [encoder_dir(d) / f"specialist_{m}.safetensors" for d in explore_draws for m in ("xray", "path")]
    assert tool_tokens == [d for d in explore_draws for _ in ("xray", "path")]
    # per seed: instruction tuning, domain_only, mixed, none, tool
    assert trained == [d for d in explore_draws for _ in range(5)]
    assert [d for d in tool_prompts if d] == [{6}, {6}, {1}, {1}]  # the tool arm's train and dev prompts, per seed
    assert set(evaluated) == set(explore_draws) and evaluated == sorted(evaluated, key=explore_draws.index)
    info = read_json(EXPLORE / "explore.json")
    assert info["encoder_seeds"] == {"0": 6, "1": 1} and set(info["tool_entity_f1_test_per_seed"]) == {"0", "1"}
    assert info["tool_examples"][0]["tool_text"].startswith("tool draw 6")


def test_a_stage_with_more_seeds_than_draws_stops_before_any_work(workdir, monkeypatch, capsys):
    import stages.encoder_fusion.decoder as stage

    params = yaml.safe_load((workdir / "params.yaml").read_text())
    params["encoder_fusion"]["decoder"]["seeds"] = 4
    (workdir / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    monkeypatch.setattr(stage, "read_world", lambda: pytest.fail("the stage started work"))
    with pytest.raises(SystemExit) as e:
        stage.main()
    assert e.value.code == 2
    assert "encoder_fusion.decoder.seeds=4 exceeds len(encoder_fusion.head.seeds)=3" in capsys.readouterr().err
    assert not DECODER.exists()
