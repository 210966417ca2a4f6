"""The segmentation tool: class ↔ finding mapping agrees with the world's dense labels, masks cover the right
regions, the cached-token path equals the image path, and the region text reads back through the tagger."""
import numpy as np
import pytest
import torch

from paperworks.core.seeding import derive_seed
from paperworks.encoder_fusion.models import Specialist, token_grid
from paperworks.encoder_fusion.params import SpecialistParams, WorldParams
from paperworks.encoder_fusion.reports import FindingTagger, annotated_sentences
from paperworks.encoder_fusion.tool import SegmentationTool, findings_from_probs, region_text
from paperworks.encoder_fusion.world import N_DENSE, render_case

WORLD = WorldParams(size=64, n_train=8, n_dev=4, n_test=4, small_share=0.5)


def _one_hot(dense: np.ndarray) -> np.ndarray:
    return np.eye(N_DENSE)[dense.reshape(-1)]


def test_perfect_dense_map_gives_back_the_world_findings():
    seen = 0
    for modality in ("xray", "path"):
        for i in range(40):
            _, findings, _, dense = render_case(derive_seed(7, "tool", modality, i), modality, WORLD)
            classes, masks, got = findings_from_probs(_one_hot(dense), modality)
            assert np.array_equal(classes, dense)
            assert got == findings, (modality, i)       # region, type, size and severity
            assert masks.sum(0).max() <= 1 and masks.any(0).sum() == (dense > 0).sum()
            seen += len(findings)
    assert seen > 40


def test_masks_are_per_quadrant_and_majority_class_wins():
    probs = np.zeros((16, N_DENSE))
    probs[:, 0] = 1.0                        # 4 × 4 grid, background everywhere …
    for cell, cls in ((0, 1), (1, 1), (4, 2), (15, 4)):   # … 3 cells in the upper-left quadrant (class 1 twice), 1 lower-right
        probs[cell] = np.eye(N_DENSE)[cls]
    classes, masks, findings = findings_from_probs(probs, "xray")
    assert masks[0].sum() == 3 and masks[3].sum() == 1 and not masks[1].any() and not masks[2].any()
    assert masks[0][0, 0] and masks[0][1, 0] and masks[3][3, 3]
    assert [(f.region, f.type, f.size) for f in findings] == [("right upper zone", "nodule", "small"),
                                                              ("left lower zone", "opacity", "large")]
    with pytest.raises(ValueError):
        findings_from_probs(np.zeros((15, N_DENSE)), "xray")


def test_token_path_equals_image_path():
    torch.manual_seed(0)
    spec = Specialist(SpecialistParams(steps=10))
    with torch.no_grad():
        spec.dense.bias.copy_(torch.tensor([0.0, 0.3, 0.2, 0.1, 0.25]))  # a random head would put lesions everywhere alike
    images = np.stack([render_case(derive_seed(3, "tool", i), "path", WORLD)[0] for i in range(6)])
    tool = SegmentationTool(spec, "path")
    a, b = tool(images), tool.from_tokens(token_grid(spec.encoder, images))
    for x, y in zip(a, b):
        assert np.array_equal(x.classes, y.classes) and np.array_equal(x.masks, y.masks) and x.text == y.text
    with pytest.raises(ValueError):
        SegmentationTool(spec, "ct")


def test_region_text_reads_back_through_the_finding_tagger():
    tagger = FindingTagger().fit(*annotated_sentences(600, 11))
    checked = 0
    for i in range(30):
        _, findings, _, dense = render_case(derive_seed(5, "tool", i), "xray", WORLD)
        _, _, got = findings_from_probs(_one_hot(dense), "xray")
        text = region_text(got, "xray")
        assert text.startswith("Segmentation tool:")
        back = tagger.extract(text)
        assert {(f.region, f.type, f.size) for f in back} == {(f.region, f.type, f.size) for f in findings}, text
        checked += bool(findings)
    assert checked > 10
