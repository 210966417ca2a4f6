from pathlib import Path

import pytest
import yaml

from paperworks.core.params import ParamsError, validate_section
from paperworks.core.profile import compose
from paperworks.person_search.params import Params

CONF = Path(__file__).resolve().parents[2] / "conf"


@pytest.mark.parametrize("profile", ["smoke", "default", "paper"])
def test_profiles_validate(profile):
    section = compose(profile, CONF)["person_search"]
    p = validate_section("person_search", Params, section)
    if profile == "paper":  # the paper's gallery size: 1,978 targets + 34,795 distractors
        assert p.data.n_targets == 1978 and round(p.data.n_targets * p.data.distractor_ratio) == 34795


@pytest.mark.parametrize("profile", ["smoke", "default", "paper"])
def test_training_stops_on_the_evidence_standards_own_plateau(profile):
    """The stopping rule's plateau check uses the values the convergence precondition reads."""
    from paperworks.core.claims import EvidenceParams

    composed = compose(profile, CONF)
    p = validate_section("person_search", Params, composed["person_search"])
    ev = EvidenceParams(**composed.get("evidence", {}))
    for st in (p.encoder.stopping, p.experts.stopping):
        assert (st.plateau_tail, st.plateau_rel_tol, st.min_evals) == (
            ev.convergence_tail, ev.convergence_rel_tol, ev.convergence_min_points)


def _default():
    return yaml.safe_load((CONF / "default" / "person_search.yaml").read_text())


def _error(section) -> str:
    with pytest.raises(ParamsError) as e:
        validate_section("person_search", Params, section)
    return str(e.value)


def test_wrong_backbone_names_allowed_values():
    s = _default()
    s["encoder"]["backbones"] = ["cnn", "resnet50"]
    msg = _error(s)
    assert "person_search.encoder.backbones.1" in msg and "'cnn', 'resnet' or 'vit'" in msg


def test_text_precision_names_allowed_values():
    """Every precision embed.encode_texts runs is a valid text.precision, and a wrong one lists them all."""
    from paperworks.person_search.embed import PRECISIONS

    for precision in PRECISIONS:
        s = _default()
        s["text"]["precision"] = precision
        assert validate_section("person_search", Params, s).text.precision == precision
    s = _default()
    s["text"]["precision"] = "int8"
    msg = _error(s)
    assert "person_search.text.precision" in msg
    assert "'float32', 'bfloat16', 'bfloat16_weights', 'int8_dynamic' or 'int8_smooth'" in msg


def test_out_of_range_and_typos_fail_with_key_path():
    s = _default()
    s["data"]["n_targets"] = 5000
    assert "person_search.data.n_targets" in _error(s)
    s = _default()
    s["fusion"]["clipp"] = 3
    assert "person_search.fusion.clipp" in _error(s)
    s = _default()
    s["retrieval"]["engine"] = "annoy"
    assert "person_search.retrieval.engine" in _error(s) and "'faiss', 'torch' or 'numpy'" in _error(s)


def test_fusion_cross_field_checks():
    s = _default()
    s["fusion"]["anchor_views"] = ["action"]
    assert "anchor_views" in _error(s)
    s = _default()
    s["fusion"]["percentiles"] = [50, 10, 90]
    assert "percentiles" in _error(s)


def test_edit_weights_checked():
    s = _default()
    s["data"]["edit_weights"]["mood"] = 0.5
    assert "person_search.data.edit_weights" in _error(s)
    s = _default()
    s["data"]["edit_weights"] = {"scene": -1.0, "light": 0.5}
    assert "edit_weights" in _error(s)


def test_encoder_schedule_and_cap_for_all_or_per_backbone():
    s = _default()
    s["encoder"]["schedule"] = "one_cycle"
    p = validate_section("person_search", Params, s)
    assert [p.encoder.schedule_of(b) for b in ("cnn", "resnet", "vit")] == ["one_cycle"] * 3
    s["encoder"]["schedule"] = {"cnn": "one_cycle", "resnet": "one_cycle", "vit": "step_on_plateau"}
    p = validate_section("person_search", Params, s)
    assert [p.encoder.schedule_of(b) for b in ("cnn", "resnet", "vit")] == ["one_cycle", "one_cycle", "step_on_plateau"]
    s["encoder"]["schedule"] = {"cnn": "one_cycle", "resnet": "one_cycle"}  # vit is listed in backbones
    assert "no schedule for backbone(s) ['vit']" in _error(s)
    s["encoder"]["schedule"] = "cosine"
    assert "person_search.encoder.schedule" in _error(s)
    s["encoder"]["schedule"] = "one_cycle"
    s["encoder"]["epochs"] = {"cnn": 30, "resnet": 30, "vit": 50}
    p = validate_section("person_search", Params, s)
    assert [p.encoder.epochs_of(b) for b in ("cnn", "resnet", "vit")] == [30, 30, 50]
    s["encoder"]["epochs"] = {"cnn": 30, "vit": 50}
    assert "no epochs for backbone(s) ['resnet']" in _error(s)
    s["encoder"]["epochs"] = {"cnn": 0, "resnet": 30, "vit": 50}
    assert "person_search.encoder.epochs" in _error(s)
