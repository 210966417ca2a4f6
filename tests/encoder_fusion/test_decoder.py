"""The report decoder: its visual prefix reaches the output, training lowers the held-out loss, greedy
reports stop at <eos>, and the RoI-weighted F1 counts a hand-made example."""
import numpy as np
import torch

from paperworks.core.lm import train_tokenizer
from paperworks.encoder_fusion.decoder import ReportDecoder, encode_reports, generate_reports, lm_config, roi_f1, train_decoder
from paperworks.encoder_fusion.params import DecoderParams, HeadParams
from paperworks.encoder_fusion.reports import RoIScore, score_findings
from paperworks.encoder_fusion.world import Finding

HEAD = HeadParams(d_model=16, heads=2, window=1, steps=10)
DEC = DecoderParams(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32, vocab_size=0, steps=200, batch_size=8,
                    lr=1e-2, log_every=20, max_new_tokens=40)
DIMS = {"foundation": 8, "xray": 8, "path": 8}
TEXTS = ["Small nodule in the left upper zone.", "No lesion in the right lower zone."]


def _tokens(n: int, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {k: torch.randn(n, 4, 8, generator=g) for k in DIMS}


def _model(fusion: str, tok, seed: int = 3) -> ReportDecoder:
    cfg = lm_config(DEC, 4, 40)
    return ReportDecoder(fusion, DIMS, 12, 2, HEAD, cfg, len(tok), seed)


def test_visual_prefix_changes_the_output_and_only_through_the_projector():
    tok = train_tokenizer(TEXTS)
    ids, mask = encode_reports(tok, TEXTS[:1] * 2)
    for fusion in ("foundation", "parallel", "cascade"):
        model = _model(fusion, tok).eval()
        a, b = _tokens(1, 0), _tokens(1, 1)
        two = {k: torch.cat([a[k], b[k]]) for k in a}
        with torch.no_grad():
            logits = model(two, ids, mask)
            assert not torch.allclose(logits[0], logits[1], atol=1e-4), fusion  # different images → different next-token logits
            model.prefix.weight.zero_()
            logits = model(two, ids, mask)
        assert torch.allclose(logits[0], logits[1], atol=1e-6), fusion  # no projector → the image cannot matter


def test_same_seed_same_decoder_for_every_fusion():
    tok = train_tokenizer(TEXTS)
    sd = {f: _model(f, tok).state_dict() for f in ("foundation", "parallel", "cascade")}
    for k, v in sd["foundation"].items():
        if k.startswith(("lm.", "prefix.", "fusion.proj_f", "fusion.pos")):
            assert torch.equal(v, sd["cascade"][k]) and torch.equal(v, sd["parallel"][k]), k


def test_decoder_learns_the_image_to_report_map_and_stops_at_eos():
    """Two images, two reports: after a short training the greedy report of each image is its own report."""
    tok = train_tokenizer(TEXTS)
    base = _tokens(2, 5)
    tokens = {k: v.repeat(20, 1, 1) for k, v in base.items()}
    rows = np.arange(40)
    ids, mask = encode_reports(tok, [TEXTS[i % 2] for i in rows])
    model = _model("cascade", tok)
    hist = train_decoder(model, tokens, (rows, ids, mask), (rows[:4], ids[:4], mask[:4]), DEC, seed=1)
    sel = next(r for r in hist if r["selected"])
    assert sel["dev_loss"] < 0.5 * hist[0]["dev_loss"]
    assert generate_reports(model, tok, tokens, np.array([0, 1]), DEC.max_new_tokens) == TEXTS


def test_roi_f1_counts_a_hand_made_example():
    f = lambda region, t="nodule", size="small": Finding(region, t, size, 1)
    ref = [f("right upper zone"), f("left lower zone", "opacity", "large")]
    rep = [f("right upper zone", size="large"), f("left upper zone")]   # size differs: still matched (region + type)
    s = score_findings(rep, ref, roi="left lower zone", roi_weight=3.0)
    assert [x.region for x in s.matched] == ["right upper zone"]
    assert [x.region for x in s.missed] == ["left lower zone"] and [x.region for x in s.hallucinated] == ["left upper zone"]
    # W(matched) = 1, W(missed) = 3 (in the RoI), W(hallucinated) = 1 → F1 = 2 / (2 + 3 + 1)
    assert roi_f1(s, "left lower zone", 3.0) == 2 / 6
    assert s.score == 1 / 5
    assert roi_f1(RoIScore(), "left lower zone") == 1.0  # nothing to find, nothing reported
    assert roi_f1(score_findings([], ref, "left lower zone"), "left lower zone") == 0.0


def test_patience_stops_the_decoder_that_many_steps_after_its_lowest_dev_loss(monkeypatch):
    """A scripted dev-loss curve (lowest at step 20, then rising): with patience 40 and a dev check every 20
    steps, training stops at step 60 (not 80: ``>=``) and ends at step 20's weights; the same rule as the heads."""
    import paperworks.encoder_fusion.decoder as decoder

    curve = iter([2.0, 1.0, 1.5, 1.6, 1.7, 1.8, 1.9, 2.0, 2.1, 2.2, 2.3])
    monkeypatch.setattr(decoder, "dev_loss", lambda *a, **k: next(curve))
    tok = train_tokenizer(TEXTS)
    tokens = _tokens(8, 2)
    rows = np.arange(8)
    ids, mask = encode_reports(tok, [TEXTS[i % 2] for i in rows])
    hist = train_decoder(_model("cascade", tok), tokens, (rows, ids, mask), (rows[:2], ids[:2], mask[:2]),
                         DEC.model_copy(update={"patience": 40}), seed=1)
    assert [r["step"] for r in hist] == [0, 20, 40, 60]
    assert [r["step"] for r in hist if r["selected"]] == [20]
