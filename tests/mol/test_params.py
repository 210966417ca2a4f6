"""The mol params section: every profile validates; bad keys and values fail naming the key."""
from pathlib import Path

import pytest
import yaml

from paperworks.core.params import ParamsError, validate_section
from paperworks.core.profile import compose
from paperworks.mol.params import Params

CONF = Path(__file__).resolve().parents[2] / "conf"


@pytest.mark.parametrize("profile", ["smoke", "default", "paper"])
def test_profiles_validate(profile):
    p = validate_section("mol", Params, compose(profile, CONF)["mol"])
    assert len(p.adapters.seeds) >= 2  # the headline's interval is over seeds
    assert p.router.headline in p.router.methods
    # the loop claims are over loop runs: versions.seed plus at least one replicate, each an adapter seed
    assert p.versions.replicate_seeds and set(p.versions.replicate_seeds) <= set(p.adapters.seeds) - {p.versions.seed}


def _default():
    return yaml.safe_load((CONF / "default" / "mol.yaml").read_text())


def _error(section) -> str:
    with pytest.raises(ParamsError) as e:
        validate_section("mol", Params, section)
    return str(e.value)


def test_unknown_key_is_named():
    s = _default()
    s["adapters"]["rnak"] = 8
    assert "mol.adapters.rnak" in _error(s)


def test_bad_values_name_key_and_allowed():
    s = _default()
    s["router"]["methods"] = ["rules", "bert"]
    msg = _error(s)
    assert "mol.router.methods" in msg and "minilm_lr" in msg  # the allowed names
    s = _default()
    s["router"]["methods"] = ["rules"]  # headline tfidf_lr no longer among the methods
    assert "headline" in _error(s)
    s = _default()
    s["world"]["turns"] = [1, 3]  # a one-turn conversation cannot switch capability
    assert "turns" in _error(s)
    s = _default()
    s["adapters"]["seeds"] = [0, 0]
    assert "mol.adapters.seeds" in _error(s)
    for bad in ([], [0], [1, 1], [7]):  # none, the serving loop's own seed, twice, not an adapter seed
        s = _default()
        s["versions"]["replicate_seeds"] = bad
        msg = _error(s)
        assert "versions.replicate_seeds" in msg and ("adapters.seeds" in msg or "distinct" in msg), msg
