"""The prompted report decoder: the prompt reaches the output, how wide a prompt is padded changes nothing (pads
masked, positions over attended tokens only), an empty prompt is the plain report decoder, and a short training
teaches it to follow two format instructions."""
import numpy as np
import torch

from paperworks.core.lm import train_tokenizer
from paperworks.encoder_fusion.decoder import ReportDecoder
from paperworks.encoder_fusion.explore import (PromptedDecoder, compliance, encode_prompts, make_data, prompt_width,
                                               prompted_config, target_width, train_prompted)
from paperworks.encoder_fusion.instructions import PROMPTS, render
from paperworks.encoder_fusion.params import HeadParams

HEAD = HeadParams(d_model=16, heads=2, window=1, steps=10)
DIMS = {"foundation": 8, "xray": 8, "path": 8}
REPORTS = ["Small nodule in the left upper zone.", "No lesion in the right lower zone."]


def _tokens(n: int, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {k: torch.randn(n, 4, 8, generator=g) for k in DIMS}


def _setup():
    kinds = ("header", "bullets")
    targets = [r for r in REPORTS] + [render(k, r) for k in kinds for r in REPORTS]
    prompts = ["", ""] + [PROMPTS[k] for k in kinds for _ in REPORTS]
    tok = train_tokenizer(targets + prompts[2:])
    pw, tw = prompt_width(tok, prompts), target_width(tok, targets)
    cfg = prompted_config(32, 1, 2, 64, 4, pw, tw, 40)
    return kinds, targets, prompts, tok, pw, tw, cfg


def test_prompt_reaches_the_output_and_pads_on_the_left():
    kinds, targets, prompts, tok, pw, tw, cfg = _setup()
    enc = encode_prompts(tok, ["", PROMPTS["header"]], pw)
    assert (enc[0] == tok.pad_token_id).all() and enc[1, -1] != tok.pad_token_id
    model = PromptedDecoder("cascade", DIMS, 12, 2, HEAD, cfg, len(tok), seed=1).eval()
    rows, prompt, ids, mask = make_data(tok, np.array([0, 0]), ["", PROMPTS["header"]], [REPORTS[0]] * 2, pw, tw)
    t = _tokens(1)
    both = {k: v[[0, 0]] for k, v in t.items()}
    with torch.no_grad():
        logits = model(both, prompt, ids, mask)
    assert logits.shape[:2] == (2, ids.shape[1] - 1)
    assert not torch.allclose(logits[0], logits[1], atol=1e-4)   # same image and report, different prompt


def test_pad_width_changes_neither_the_logits_nor_the_greedy_reports():
    """Each row of a batch that mixes empty and long prompts gets the logits and report it gets alone (its prompt
    unpadded), and padding every prompt 7 columns wider changes nothing. Attended pads or positions that count
    pads would move the short rows (the model is trained a little so its outputs depend on its inputs)."""
    kinds, targets, prompts, tok, pw, tw, cfg = _setup()
    cfg = prompted_config(32, 1, 2, 64, 4, pw + 7, tw, 40)
    tokens = _tokens(2, seed=4)
    model = PromptedDecoder("cascade", DIMS, 12, 2, HEAD, cfg, len(tok), seed=3)
    data = make_data(tok, np.arange(len(targets)) % 2, prompts, targets, pw, tw)
    train_prompted(model, tokens, [(data, 1.0)], data, steps=40, batch_size=6, lr=1e-2, log_every=20, seed=0)
    model.eval()
    rows, prompt, ids, mask = data
    wide = encode_prompts(tok, prompts, pw + 7)
    assert wide.shape[1] == prompt.shape[1] + 7 and (wide[:, :7] == tok.pad_token_id).all()
    tok_rows = {k: v[torch.as_tensor(rows)] for k, v in tokens.items()}
    bos, eos = tok.bos_token_id, tok.eos_token_id
    with torch.no_grad():
        batch_logits = model(tok_rows, wide, ids, mask)
        assert torch.allclose(batch_logits, model(tok_rows, prompt, ids, mask), atol=1e-5)
        batch_reports = model.generate(tok_rows, wide, bos, eos, 30)
        for i, text in enumerate(prompts):
            one = {k: v[i:i + 1] for k, v in tok_rows.items()}
            own = encode_prompts(tok, [text], prompt_width(tok, [text]) if text else 0)
            n = int(mask[i].sum())
            alone = model(one, own, ids[i:i + 1, :n], mask[i:i + 1, :n])
            assert torch.allclose(batch_logits[i, :n - 1], alone[0], atol=1e-4), (i, text)
            assert batch_reports[i] == model.generate(one, own, bos, eos, 30)[0], (i, text)


def test_empty_prompt_is_the_plain_report_decoder():
    """Same seed, same weights: an all-pad prompt gives the logits of ``ReportDecoder`` with no prompt at all."""
    kinds, targets, prompts, tok, pw, tw, cfg = _setup()
    prompted = PromptedDecoder("parallel", DIMS, 12, 2, HEAD, cfg, len(tok), seed=5).eval()
    plain = ReportDecoder("parallel", DIMS, 12, 2, HEAD, cfg, len(tok), seed=5).eval()
    plain.load_state_dict(prompted.state_dict())
    rows, prompt, ids, mask = make_data(tok, np.array([0, 1]), ["", ""], REPORTS, pw, tw)
    t = _tokens(2, seed=6)
    with torch.no_grad():
        assert torch.allclose(prompted(t, prompt, ids, mask), plain(t, ids, mask), atol=1e-5)


def test_short_training_teaches_two_format_instructions():
    kinds, targets, prompts, tok, pw, tw, cfg = _setup()
    n = len(targets)
    rows = np.arange(n) % 2                       # case 0 or 1 (its report) under each prompt
    tokens = _tokens(2, seed=4)
    data = make_data(tok, rows, prompts, targets, pw, tw)
    model = PromptedDecoder("foundation", DIMS, 12, 2, HEAD, cfg, len(tok), seed=2)
    before = compliance(model, tok, tokens, np.array([0, 1]), ["a", "b"], kinds, PROMPTS, pw, 40)
    hist = train_prompted(model, tokens, [(data, 1.0)], data, steps=150, batch_size=6, lr=1e-2, log_every=25, seed=0)
    after = compliance(model, tok, tokens, np.array([0, 1]), ["a", "b"], kinds, PROMPTS, pw, 40)
    assert not all(r["complies"] for r in before)
    assert all(r["complies"] for r in after), after
    assert hist[-1]["dev_loss"] < hist[0]["dev_loss"] / 4 and sum(r["selected"] for r in hist) == 1


def test_instruction_tuning_stops_once_its_patience_is_spent(monkeypatch):
    """Scripted dev losses, lowest at step 25: patience 50 with a check every 25 steps stops at step 75."""
    import paperworks.encoder_fusion.explore as explore

    curve = iter([3.0, 1.0, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7])
    monkeypatch.setattr(explore, "prompted_dev_loss", lambda *a, **k: next(curve))
    kinds, targets, prompts, tok, pw, tw, cfg = _setup()
    data = make_data(tok, np.arange(len(targets)) % 2, prompts, targets, pw, tw)
    model = PromptedDecoder("foundation", DIMS, 12, 2, HEAD, cfg, len(tok), seed=2)
    hist = train_prompted(model, _tokens(2, seed=4), [(data, 1.0)], data, steps=150, batch_size=6, lr=1e-2, log_every=25,
                          seed=0, patience=50)
    assert [r["step"] for r in hist] == [0, 25, 50, 75]
    assert [r["step"] for r in hist if r["selected"]] == [25]
