"""The generator zoo: deterministic, generators' errors show in what they draw, checks read a parse right."""
import numpy as np

from paperworks.core.render.scene import SHAPES, PromptItem, Relation, ScenePrompt
from paperworks.eval_agent.params import ZooParams
from paperworks.eval_agent.world import STRATA, Generator, Parse, build_prompts, build_zoo, check, draw

P = ZooParams(n_per_family=2, n_held_out=1, n_population=5, prompts_per_dim=8, samples_per_prompt=2)


def _gen(**kw) -> Generator:
    base = dict(name="g", family="A", role="in_family", colour_swap=0.0, omission=0.0, count_base=0.0, count_slope=0.0,
                relation_flip=0.0, vertical_factor=1.0, noise_mean=0.0, noise_spread=0.0)
    return Generator(**{**base, **kw})


def test_zoo_and_prompts_are_deterministic_and_seeded():
    assert build_zoo(P, 3) == build_zoo(P, 3) and build_zoo(P, 3) != build_zoo(P, 4)
    a, b = build_prompts(P, 3), build_prompts(P, 3)
    assert [x.prompt.text() for x in a] == [x.prompt.text() for x in b]
    assert [x.prompt.text() for x in a] != [x.prompt.text() for x in build_prompts(P, 4)]
    zoo = build_zoo(P, 3)
    assert [g.role for g in zoo].count("held_out") == 1 and {g.family for g in zoo if g.role == "held_out"} == {"C"}
    for dim in P.dims:  # every sub-aspect of every dimension is in the pool
        assert {x.stratum for x in a if x.dim == dim} == set(range(len(STRATA[dim])))
    g = zoo[0]
    img1, t1 = draw(g, a[0].dim, a[0].prompt, 11, P.noise_max)
    img2, t2 = draw(g, a[0].dim, a[0].prompt, 11, P.noise_max)
    assert img1.tobytes() == img2.tobytes() and t1.noise == t2.noise
    assert draw(g, a[0].dim, a[0].prompt, 12, P.noise_max)[0].tobytes() != img1.tobytes()


def test_perfect_generator_passes_and_a_flipping_one_fails():
    prompts = build_prompts(P, 0)
    perfect = _gen()
    for bp in prompts:
        _, truth = draw(perfect, bp.dim, bp.prompt, bp.index, P.noise_max)
        assert check(bp.dim, bp.prompt, truth, P.quality_threshold), (bp.dim, bp.prompt.text())
    flipper = _gen(relation_flip=1.0, vertical_factor=1.0)
    spatial = [bp for bp in prompts if bp.dim == "spatial"]
    assert not any(check("spatial", bp.prompt, draw(flipper, "spatial", bp.prompt, bp.index, P.noise_max)[1], P.quality_threshold)
                   for bp in spatial)
    miscount = _gen(count_base=1.0)
    for bp in [b for b in prompts if b.dim == "count"]:
        truth = draw(miscount, "count", bp.prompt, bp.index, P.noise_max)[1]
        assert abs(int(truth.count[SHAPES.index(bp.prompt.items[0].shape)]) - bp.prompt.items[0].count) == 1


def test_checks_on_a_hand_made_parse():
    prompt = ScenePrompt(items=(PromptItem(shape="circle", colour="red"), PromptItem(shape="square", colour="blue")),
                         relations=(Relation(subject=0, relation="left of", object=1),))
    count = np.array([1, 1, 0, 0, 0])
    colour = np.array([0, 1, -1, -1, -1])  # red, blue
    nan = np.nan
    left = Parse(count, colour, np.array([0.2, 0.7, nan, nan, nan]), np.array([0.5, 0.5, nan, nan, nan]), 3.0)
    right = Parse(count, colour, np.array([0.8, 0.3, nan, nan, nan]), np.array([0.5, 0.5, nan, nan, nan]), 30.0)
    assert check("spatial", prompt, left, 12.0) and not check("spatial", prompt, right, 12.0)
    assert check("colour", prompt, left, 12.0)
    swapped = Parse(count, np.array([1, 0, -1, -1, -1]), left.x, left.y, 3.0)
    assert not check("colour", prompt, swapped, 12.0)
    assert check("quality", prompt, left, 12.0) and not check("quality", prompt, right, 12.0)
    missing = Parse(np.array([1, 0, 0, 0, 0]), colour, left.x, left.y, 3.0)
    assert not check("presence", prompt, missing, 12.0) and check("presence", prompt, left, 12.0)
