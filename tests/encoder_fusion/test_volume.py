"""Comparison 2 (CT-like volumes): params, the world, the sampled-slice precondition, the arms'
equations on hand-checkable cases, the checked volume reader and the per-unit tables."""
import json

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from paperworks.core.io import ArtifactError, save_safetensors
from paperworks.core.params import ParamsError, validate_section
from paperworks.encoder_fusion import report
from paperworks.encoder_fusion.params import Params, VolumeParams
from paperworks.encoder_fusion.volume import (VOLUME_ANSWERS, VOLUME_REGIONS, Lesion, VolumeCase, VolumeVQA, answers,
                                              build_volumes, question_frame, read_volumes, render_volume, sampled_slices,
                                              thin_missed_share)
from tests.encoder_fusion.test_params import CONF

P = VolumeParams(depth=8, size=32, n_train=8, n_dev=4, n_test=4, k_slices=3, widths=[4, 8, 16], d_model=8, steps=10)


def _error(volume_changes: dict) -> str:
    s = yaml.safe_load((CONF / "default" / "encoder_fusion.yaml").read_text())
    s["volume"].update(volume_changes)
    with pytest.raises(ParamsError) as e:
        validate_section("encoder_fusion", Params, s)
    return str(e.value)


def test_bad_volume_params_name_the_key():
    assert "k_slices=16" in _error({"k_slices": 16}) and "below depth=16" in _error({"k_slices": 16})
    assert "need at least 'anchored' and 'sampled'" in _error({"arms": ["anchored", "encoder3d"]})
    msg = _error({"arms": ["anchored", "slices"]})
    assert "encoder_fusion.volume.arms" in msg and "'sampled'" in msg
    assert "depth=18" in _error({"depth": 18})
    assert "size=48" in _error({"size": 48})
    assert "slice_count" in _error({"slice_count": 4})


def test_world_is_deterministic_and_lesions_span_one_to_three_slices():
    a_cases, a = build_volumes(P, 5)
    b_cases, b = build_volumes(P, 5)
    assert a_cases == b_cases and a.tobytes() == b.tobytes()
    assert build_volumes(P, 6)[1].tobytes() != a.tobytes()
    assert a.shape == (16, 8, 32, 32) and a.dtype == np.uint8
    spans = {x.span for s in range(60) for x in render_volume(s, P)[1]}
    assert spans == {1, 2, 3}
    # noise-free: a lesion changes exactly the slices it spans, inside its own quadrant
    quiet = P.model_copy(update={"noise": 0.0})
    for s in range(40):
        vol, lesions = render_volume(s, quiet)
        if len(lesions) != 1:
            continue
        x = lesions[0]
        base = np.median(vol, axis=0)  # the lesion is in ≤ 3 of 8 slices; the body drifts by a few grey levels only
        changed = [z for z in range(8) if np.abs(vol[z].astype(float) - base).max() > 20]
        assert changed == list(range(x.z0, x.z0 + x.span))
        ry, rx = divmod(VOLUME_REGIONS.index(x.region), 2)
        diff = np.abs(vol[x.z0].astype(float) - base) > 20
        assert diff[ry * 16:(ry + 1) * 16, rx * 16:(rx + 1) * 16].sum() == diff.sum() > 0


def test_sampled_slices_and_thin_missed_share_by_hand():
    assert sampled_slices(16, 6).tolist() == [0, 3, 6, 9, 12, 15]
    assert sampled_slices(8, 3).tolist() == [0, 4, 7]
    cases = [VolumeCase("a", "test", (Lesion(VOLUME_REGIONS[0], "nodule", 3, 1), Lesion(VOLUME_REGIONS[1], "cyst", 4, 1))),
             VolumeCase("b", "test", (Lesion(VOLUME_REGIONS[2], "nodule", 5, 1), Lesion(VOLUME_REGIONS[3], "nodule", 1, 3)))]
    share, n = thin_missed_share(cases, 8, 3)  # thin at slices 3, 4, 5; sampled {0, 4, 7} → 3 and 5 missed
    assert n == 3 and share == pytest.approx(2 / 3)


def test_question_rows_follow_the_model_output_order():
    c = VolumeCase("c", "test", (Lesion(VOLUME_REGIONS[2], "cyst", 0, 1),))
    df = question_frame([c])
    assert df["answer"].tolist() == answers(c).tolist()
    assert [VOLUME_ANSWERS[a] for a in answers(c)] == ["no", "none", "no", "none", "yes", "cyst", "no", "none"]
    assert df.loc[4, "key"] == "c|presence|right lower lobe" and df.loc[4, "span"] == 1


def _vols(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (2, 8, 32, 32), generator=g, dtype=torch.uint8)


def test_sampled_arm_is_blind_to_unsampled_slices_anchored_is_not():
    torch.manual_seed(0)
    sampled, anchored, enc3d = VolumeVQA("sampled", P), VolumeVQA("anchored", P), VolumeVQA("encoder3d", P)
    v = _vols()
    w = v.clone()
    w[:, 2] = 255 - w[:, 2]                     # slice 2 is not among the sampled {0, 4, 7}
    with torch.no_grad():
        assert torch.equal(sampled(v), sampled(w))
        assert not torch.allclose(anchored(v), anchored(w))
        assert not torch.allclose(enc3d(v), enc3d(w))
        u = v.clone()
        u[:, 4] = 255 - u[:, 4]                 # a sampled slice
        assert not torch.allclose(sampled(v), sampled(u))


def test_anchored_closed_gate_is_the_plain_per_slice_model():
    torch.manual_seed(1)
    m = VolumeVQA("anchored", P)
    v = _vols(1)
    with torch.no_grad():
        closed = m(v)
        assert m.gates() == {"gate_depth": 0.0}
        m.depth_conv.weight.normal_()           # the depth branch is ignored while the gate is closed …
        assert torch.equal(m(v), closed)
        m.gate.fill_(0.5)                       # … and counts once it opens
        assert not torch.allclose(m(v), closed)


def test_region_head_reads_its_own_quadrant(monkeypatch):
    """The head alone (tokens given): a change in region 2's cells (right lower lobe: row 1, col 0 of a
    4 × 4 cell grid → cells [2:4, 0:2]) moves questions 4 and 5 only (q = 2·region + qtype)."""
    torch.manual_seed(2)
    m = VolumeVQA("encoder3d", P)
    h = torch.randn(2, 3, 4, 4, 8)
    h2 = h.clone()
    h2[:, :, 2:, :2] += 5.0
    monkeypatch.setattr(m, "tokens", lambda v: h)
    with torch.no_grad():
        a = m(None)
        monkeypatch.setattr(m, "tokens", lambda v: h2)
        b = m(None)
    assert a.shape == (2, 8, len(VOLUME_ANSWERS))
    assert torch.equal(a[:, [0, 1, 2, 3, 6, 7]], b[:, [0, 1, 2, 3, 6, 7]])
    assert not torch.allclose(a[:, 4:6], b[:, 4:6])


def _write(tmp_path, vols, records):
    save_safetensors(tmp_path / "volumes.safetensors", {"volumes": vols})
    (tmp_path / "cases.json").write_text(json.dumps(records))


def test_corrupted_volumes_fail_naming_file_and_key(tmp_path):
    cases, vols = build_volumes(P, 3)
    records = [c.to_record() for c in cases]
    _write(tmp_path, torch.from_numpy(vols), records)
    assert read_volumes(tmp_path, P)[1].tobytes() == vols.tobytes()
    _write(tmp_path, torch.from_numpy(vols).float(), records)
    with pytest.raises(ArtifactError, match=r"volumes\.safetensors: 'volumes' must be uint8"):
        read_volumes(tmp_path, P)
    _write(tmp_path, torch.from_numpy(vols[:, :4]), records)
    with pytest.raises(ArtifactError, match=r"'volumes' must be uint8 N × 8 × 32 × 32 \(got torch.uint8 \(16, 4, 32, 32\)\)"):
        read_volumes(tmp_path, P)
    _write(tmp_path, torch.from_numpy(vols), records[:-1])
    with pytest.raises(ArtifactError, match=r"cases\.json: 15 cases but 16 volumes"):
        read_volumes(tmp_path, P)
    bad = [dict(r) for r in records]
    bad[0] = {**bad[0], "lesions": [{"region": "spleen", "type": "nodule", "z0": 0, "span": 1}]}
    _write(tmp_path, torch.from_numpy(vols), bad)
    with pytest.raises(ArtifactError, match="ct-train-00000 has an impossible lesion"):
        read_volumes(tmp_path, P)
    (tmp_path / "volumes.safetensors").write_bytes(b"\x10\x00\x00garbage")
    with pytest.raises(ArtifactError, match=r"volumes\.safetensors: corrupt"):
        read_volumes(tmp_path, P)


def test_thin_recall_table_and_precondition():
    pred = pd.DataFrame({"arm": ["anchored", "sampled"] * 3, "seed": 0,
                         "key": ["a|presence|r", "a|presence|r", "a|type|r", "a|type|r", "b|presence|r", "b|presence|r"],
                         "qtype": ["presence", "presence", "type", "type", "presence", "presence"],
                         "span": [1, 1, 1, 1, 2, 2], "correct": [1.0, 0.0, 1.0, 1.0, 1.0, 1.0]})
    units = report.volume_units(pred)
    thin = units["thin_lesion_recall"]
    assert thin["unit"].tolist() == ["a|presence|r", "a|presence|r"] and thin["value"].tolist() == [1.0, 0.0]
    assert len(units["volume_vqa_accuracy"]) == 6
    p = validate_section("encoder_fusion", Params, yaml.safe_load((CONF / "default" / "encoder_fusion.yaml").read_text()))
    world = {"thin_missed_share": 0.25, "n_thin_test_lesions": 8, "sampled_slices": [0, 15]}
    from paperworks.core.claims import EvidenceParams
    pre = report.volume_preconditions(p, world, {}, EvidenceParams())
    assert pre[0]["name"] == "sampled slices miss thin lesions" and pre[0]["passed"] is False
    assert report.volume_preconditions(p, {**world, "thin_missed_share": 0.6}, {}, EvidenceParams())[0]["passed"] is True


def test_volume_training_stops_once_its_patience_is_spent(monkeypatch):
    """Scripted dev accuracies, best at step 3 and tied later (earliest on ties): patience 6 with a check every 3
    steps stops at step 9 and keeps step 3; without patience all 30 steps run."""
    from paperworks.encoder_fusion import volume
    from paperworks.encoder_fusion.volume import N_QUESTIONS, train_volume

    n = 4
    dev_ans = np.zeros((n, N_QUESTIONS), dtype=np.int64)

    def scripted(accuracies):
        it = iter(accuracies)

        def predict(model, vols, batch=64):
            right = int(round(next(it) * n * N_QUESTIONS))
            logits = torch.zeros(n, N_QUESTIONS, len(VOLUME_ANSWERS))
            logits[..., 1] = 1.0                                   # wrong (answer 0) …
            logits.view(-1, len(VOLUME_ANSWERS))[:right, 0] = 2.0  # … except the first `right` questions
            return logits
        return predict

    vols = np.zeros((n, P.depth, P.size, P.size), dtype=np.uint8)
    train_ans = np.zeros((n, N_QUESTIONS), dtype=np.int64)
    curve = [0.25, 0.75, 0.5, 0.75, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]
    monkeypatch.setattr(volume, "predict_volumes", scripted(curve))
    p = P.model_copy(update={"steps": 30, "log_every": 3, "patience": 6})
    torch.manual_seed(0)
    hist = train_volume(VolumeVQA("sampled", p), vols, train_ans, vols, dev_ans, p, seed=0)
    assert [r["step"] for r in hist] == [0, 3, 6, 9]
    assert [r["step"] for r in hist if r["selected"]] == [3]
    monkeypatch.setattr(volume, "predict_volumes", scripted(curve))
    p = p.model_copy(update={"patience": None})
    hist = train_volume(VolumeVQA("sampled", p), vols, train_ans, vols, dev_ans, p, seed=0)
    assert [r["step"] for r in hist][-1] == 30


def test_volume_patience_must_be_positive():
    assert "patience" in _error({"patience": 0})
