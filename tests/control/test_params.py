"""Params validation: every profile composes and validates; wrong values fail with key path + allowed values."""
from __future__ import annotations

import copy

import pytest

from paperworks.control.params import Params
from paperworks.core.params import ParamsError, validate_section
from paperworks.core.profile import compose
from tests.conftest import REPO


@pytest.fixture(scope="module")
def default_section():
    return compose("default", REPO / "conf")["control"]


@pytest.mark.parametrize("profile", ["smoke", "default", "paper"])
def test_profiles_validate(profile):
    p = validate_section("control", Params, compose(profile, REPO / "conf")["control"])
    assert p.tree.max_depth >= 1


def test_default_is_the_papers_recipe(default_section):
    p = validate_section("control", Params, default_section)
    assert p.tree.max_depth == 7 and p.teacher.learning_rate == 3e-4 and p.teacher.net_arch == [256, 256]
    assert len(p.grid.teachers) >= 6 and len(p.grid.draws) >= 3 and p.eval.episodes >= 20
    assert p.teacher.validation_episodes >= 10 and p.teacher.validation_wide_episodes >= 1
    assert 100_000 <= p.teacher.total_timesteps <= 150_000 and p.teacher.reserve_attempts >= 1
    assert p.viper.iterations + 1 == p.tree.selection_candidates == p.dagger.iterations + 1
    assert 0.0 in p.rollouts.sigma_sweep and p.rollouts.sigma > 0


def _bad(section, path, value):
    s = copy.deepcopy(section)
    node = s
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return s


@pytest.mark.parametrize("path,value,expect", [
    (("env", "id"), "CartPole-v1", ["control.env.id", "InvertedPendulum-v5"]),
    (("tree", "max_depth"), 0, ["control.tree.max_depth", "greater than or equal to 1"]),
    (("tree", "max_depth"), "deep", ["control.tree.max_depth", "integer"]),
    (("rollouts", "sigma"), 2.5, ["control.rollouts", "sigma_sweep"]),
    (("eval", "episodes"), 0, ["control.eval.episodes"]),
    (("teacher", "learning_starts"), 10**7, ["control.teacher", "learning_starts"]),
    (("teacher", "validation_wide_episodes"), 11, ["control.teacher", "validation_wide_episodes"]),
    (("viper", "iterations"), 5, ["control", "selection_candidates"]),
    (("eval", "disturbance", "pulse_steps"), 100, ["control.eval.disturbance", "pulse_every"]),
    (("grid", "draws"), [0, 0], ["control.grid", "distinct"]),
    (("tree", "maxdepth"), 7, ["control.tree.maxdepth", "Extra inputs"]),
])
def test_wrong_values_fail_with_key_path(default_section, path, value, expect):
    with pytest.raises(ParamsError) as err:
        validate_section("control", Params, _bad(default_section, path, value))
    for piece in expect:
        assert piece in str(err.value)


@pytest.mark.parametrize("starts,ok", [(99_999, True), (100_000, False), (100_001, False)])
def test_learning_starts_must_leave_steps_to_learn(default_section, starts, ok):
    """learning_starts at or past the step budget would train nothing: refused at the boundary too."""
    s = _bad(_bad(default_section, ("teacher", "total_timesteps"), 100_000), ("teacher", "learning_starts"), starts)
    if ok:
        assert validate_section("control", Params, s).teacher.learning_starts == starts
    else:
        with pytest.raises(ParamsError, match="learning_starts"):
            validate_section("control", Params, s)
