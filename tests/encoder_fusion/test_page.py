"""The page's example cases: matched / missed / hallucinated land in their own columns, the RoI frame
sits on the named quadrant, and the block replaces only what is between the markers."""
import numpy as np

from paperworks.encoder_fusion.page import END, START, examples_block, inject, outline_roi

F = lambda region, t="nodule", size="small": {"region": region, "type": t, "size": size, "severity": 2}


def test_examples_block_marks_each_finding_in_its_column():
    ex = [{"case_id": "xray-test-00001", "roi": "left lower zone", "system": "terse", "report": "Small nodule in the right upper zone.",
           "reference": "Small nodule in the right upper zone. The left lower zone shows a large opacity.",
           "matched": [F("right upper zone")], "missed": [F("left lower zone", "opacity", "large")],
           "hallucinated": [F("left upper zone")], "roi_score": 0.2, "mean_rater_utility": -4.5}]
    md = examples_block(ex, {"xray-test-00001": "encoder_fusion/xray-test-00001.png"})
    row = next(line for line in md.splitlines() if line.startswith("| terse |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2] == "small nodule in the right upper zone"
    assert cells[3] == "large opacity in the left lower zone **(RoI)**"
    assert cells[4] == "small nodule in the left upper zone"
    assert cells[5] == "0.200" and "region of interest: left lower zone" in md
    assert "![xray-test-00001](encoder_fusion/xray-test-00001.png)" in md


def test_roi_frame_on_the_named_quadrant():
    img = np.zeros((32, 32, 3), np.uint8)
    out = outline_roi(img, "xray", "left lower zone", scale=2)  # region 3: row 1, col 1
    yellow = (out == (255, 220, 0)).all(-1)
    assert out.shape == (64, 64, 3) and yellow[32:, 32:].any() and not yellow[:32].any() and not yellow[:, :32].any()
    out = outline_roi(img, "xray", "left upper zone", scale=2)  # region 1: row 0, col 1
    yellow = (out == (255, 220, 0)).all(-1)
    assert yellow[:32, 32:].any() and not yellow[32:].any()


def test_inject_replaces_only_the_block():
    text = f"a\n{START}\nold\n{END}\nb\n"
    assert inject(text, "new\n") == f"a\n{START}\nnew\n{END}\nb\n"
