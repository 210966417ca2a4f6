"""The RoI metric as a reusable scorer, on hand-labelled reports, and the baselines on hand-checked pairs."""
import numpy as np
import pytest

from paperworks.encoder_fusion.panel import agreement
from paperworks.encoder_fusion.reports import FindingTagger, annotated_sentences, bleu, entity_f1, label_f1, rouge_l, score
from paperworks.encoder_fusion.world import Finding


@pytest.fixture(scope="module")
def tagger():
    return FindingTagger().fit(*annotated_sentences(600, seed=3))


def keys(fs):
    return sorted((f.region, f.type) for f in fs)


# Written by hand (not by the generator): (report, reference, roi, matched, missed, hallucinated, score)
HAND_LABELLED = [
    ("Right upper lung: tiny nodular lesion. The left lower zone is clear.",
     "Small nodule in the right upper zone.", "right upper zone",
     [("right upper zone", "nodule")], [], [], 1.0),
    ("There is a sizeable airspace opacity in the left lower lung. Small nodule in the right upper zone.",
     "Small nodule in the right upper zone. No lesion in the left lower zone. Large opacity in the right lower zone.",
     "right upper zone",
     [("right upper zone", "nodule")], [("right lower zone", "opacity")], [("left lower zone", "opacity")], 3 / 5),
    ("No abnormality seen in the upper left field.",
     "The top left field shows a large necrotic focus.", "upper left field",
     [], [("upper left field", "necrosis")], [], 0.0),
    ("Tiny nuclear atypia in the bottom right field.", "Small atypical nuclei in the lower right field.", "upper left field",
     [("lower right field", "atypical nuclei")], [], [], 1.0),
]


@pytest.mark.parametrize("report,reference,roi,matched,missed,halluc,expected", HAND_LABELLED)
def test_roi_score_on_hand_labelled_reports(tagger, report, reference, roi, matched, missed, halluc, expected):
    s = score(report, reference, roi, tagger)
    assert keys(s.matched) == sorted(matched) and keys(s.missed) == sorted(missed) and keys(s.hallucinated) == sorted(halluc)
    assert s.score == pytest.approx(expected)


def test_roi_weight_decides_which_error_costs_more(tagger):
    ref = "Small nodule in the right upper zone. Large opacity in the left lower zone."
    miss_in_roi = score("Large opacity in the left lower zone.", ref, "right upper zone", tagger)
    miss_outside = score("Small nodule in the right upper zone.", ref, "right upper zone", tagger)
    assert miss_in_roi.score == pytest.approx(1 / 4) and miss_outside.score == pytest.approx(3 / 4)
    # entity-F1 cannot tell the two apart
    assert entity_f1(miss_in_roi.matched, miss_in_roi.matched + miss_in_roi.missed) == \
        entity_f1(miss_outside.matched, miss_outside.matched + miss_outside.missed)


def test_text_baselines_by_hand():
    assert bleu("small nodule in the right upper zone", "small nodule in the right upper zone") == pytest.approx(1.0)
    assert rouge_l("alpha beta gamma delta", "alpha gamma delta") == pytest.approx(2 * 0.75 * 1.0 / 1.75)
    assert rouge_l("alpha", "beta") == 0.0 and bleu("", "alpha") == 0.0
    a = [Finding("right upper zone", "nodule", "small", 0), Finding("left lower zone", "opacity", "large", 0)]
    b = [Finding("right upper zone", "nodule", "large", 0)]
    assert entity_f1(a, b) == 0.0 and label_f1(a, b) == pytest.approx(2 / 3)


def test_agreement_by_hand():
    utilities = [[-3.0, -2.5], [-1.0, -0.5], [0.0, 0.2]]  # 3 systems × 2 raters, both rank system 3 > 2 > 1
    assert agreement([0.1, 0.5, 0.9], utilities) == pytest.approx(1.0)
    assert agreement([0.9, 0.5, 0.1], utilities) == pytest.approx(-1.0)
    assert agreement([0.5, 0.5, 0.5], utilities) == 0.0
    assert np.isfinite(agreement([0.5, 0.5, 0.9], utilities))
