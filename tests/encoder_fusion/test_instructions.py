"""Format instructions: render always complies, the plain report never does, near misses fail, and the
count instruction counts the findings of the report grammar."""
import numpy as np
import pytest

from paperworks.core.seeding import derive_seed
from paperworks.encoder_fusion.instructions import KINDS, PROMPTS, complies, positive_count, render
from paperworks.encoder_fusion.params import WorldParams
from paperworks.encoder_fusion.reports import realise
from paperworks.encoder_fusion.world import render_case

WORLD = WorldParams(size=32, n_train=8, n_dev=4, n_test=4, max_lesions=3)


def _reports(n: int = 120):
    for i in range(n):
        modality = ("xray", "path")[i % 2]
        _, findings, _, _ = render_case(derive_seed(1, "instr", i), modality, WORLD)
        rng = np.random.default_rng(i)
        yield findings, realise(findings, modality, rng, (0.0, 0.5, 1.0)[i % 3], negations=int(rng.integers(0, 3)))


def test_render_complies_and_plain_does_not():
    for _, report in _reports():
        for kind in KINDS:
            assert complies(kind, render(kind, report)), (kind, render(kind, report))
            assert not complies(kind, report), (kind, report)
    assert set(PROMPTS) == set(KINDS) and len(set(PROMPTS.values())) == len(KINDS)


def test_count_counts_the_findings():
    for findings, report in _reports():
        assert positive_count(report) == len(findings), report
    assert positive_count("No abnormality seen.") == 0
    assert render("count", "No abnormality seen.") == "0 findings. No abnormality seen."


def test_near_misses_fail():
    r = "Small nodule in the right upper zone. The left upper lung is clear."
    assert complies("header", "FINDINGS: " + r)
    assert not complies("header", "Findings: " + r) and not complies("header", "FINDINGS:") and not complies("header", "")
    assert complies("bullets", "- Small nodule in the right upper zone. - The left upper lung is clear.")
    assert not complies("bullets", "- Small nodule in the right upper zone. The left upper lung is clear.")
    assert not complies("bullets", "- ")
    assert complies("count", "1 finding. " + r)
    assert not complies("count", "1 findings. " + r)             # grammar of the count sentence
    assert not complies("count", "2 findings. " + r)             # wrong number
    assert not complies("count", "1 finding.")                   # no report after it
    assert not complies("count", r + " 1 finding.")              # not first


def test_unknown_kind_is_an_error():
    with pytest.raises(ValueError, match="allowed"):
        render("uppercase", "No abnormality seen.")
    with pytest.raises(ValueError, match="allowed"):
        complies("uppercase", "NO ABNORMALITY SEEN.")
