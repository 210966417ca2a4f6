"""Tests that bite on alignment bugs in the LM kit: every KL and log-prob of the language tracks
rests on ``completion_logits``, ``position_ids_from_mask`` and the label shift in ``sft_loss``.

References are independent computations: a plain forward pass of each row on its own
(no padding, default positions), and a hand-written cross-entropy over shifted labels.
"""
from __future__ import annotations

import pytest
import torch

from paperworks.core.lm import (
    LMConfig, TrainConfig, build_model, completion_logits, encode_prompts, encode_sft,
    position_ids_from_mask, sample, sft_loss, train_sft, train_tokenizer,
)

TEXTS = [f"{a}+{b}={a + b}" for a in range(30) for b in range(30)]
CFG = LMConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, max_positions=24)
PROMPTS = ["1+2=", "13+14=", "5+29=", "7+7="]          # different lengths → different left padding
COMPLETIONS = ["3", "27", "34", "14914"]                # different lengths → different right padding


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(TEXTS)


@pytest.fixture(scope="module")
def model(tok):
    m = build_model(CFG, len(tok), seed=0)
    with torch.no_grad():  # larger weights than the 0.02 init, so neighbouring positions' logits differ clearly
        for p in m.parameters():
            if p.ndim >= 2:
                p.normal_(0.0, 0.3)
    return m.eval()


def _completion_batch(tok, completions):
    """Right-padded ``completion <eos> <pad>…`` ids and the mask (1 up to and including <eos>)."""
    rows = [tok(c, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for c in completions]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), tok.pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        mask[i, : len(r)] = 1
    return ids, mask


def _alone_logprobs(model, prompt_row: list[int], completion_row: list[int]) -> torch.Tensor:
    """log p(completion token j | prompt, earlier tokens) from one unpadded row, default positions."""
    ids = torch.tensor([prompt_row + completion_row])
    logp = torch.log_softmax(model(input_ids=ids, use_cache=False).logits[0].double(), -1)
    p = len(prompt_row)
    return torch.stack([logp[p - 1 + j, t] for j, t in enumerate(completion_row)])


def test_completion_logits_match_each_row_run_alone(tok, model):
    p_ids, p_mask = encode_prompts(tok, PROMPTS)
    c_ids, c_mask = _completion_batch(tok, COMPLETIONS)
    assert p_mask[:, 0].eq(0).any() and c_mask[:, -1].eq(0).any()  # the batch really is padded on both sides
    with torch.no_grad():
        logits = completion_logits(model, p_ids, p_mask, c_ids, c_mask)
    assert logits.shape == (*c_ids.shape, len(tok))
    logp = torch.log_softmax(logits.double(), -1).gather(-1, c_ids[..., None])[..., 0]
    for i in range(len(PROMPTS)):
        prompt_row = p_ids[i][p_mask[i].bool()].tolist()
        completion_row = c_ids[i][c_mask[i].bool()].tolist()
        with torch.no_grad():
            want = _alone_logprobs(model, prompt_row, completion_row)
        got = logp[i, : len(completion_row)]
        assert torch.allclose(got, want, atol=1e-4), (i, got, want)
        # the reference separates neighbouring positions: an off-by-one slice is far outside the tolerance
        assert (logp[i, 1: len(completion_row)] - want[:-1]).abs().max() > 1e-2 or len(completion_row) == 1


def test_position_ids_count_from_the_first_real_token(tok, model):
    """RoPE only sees position differences, so a constant shift per row cannot show in the logits;
    the positions themselves are the contract (``[<pad>… <bos> …]`` → <bos> at 0)."""
    mask = torch.tensor([[0, 0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 0], [0, 1, 1, 1, 0, 0, 0]])
    pos = position_ids_from_mask(mask)
    for row, m in zip(pos, mask):
        assert row[m.bool()].tolist() == list(range(int(m.sum())))
    # and completion_logits hands exactly these positions to the model
    p_ids, p_mask = encode_prompts(tok, PROMPTS)
    c_ids, c_mask = _completion_batch(tok, COMPLETIONS)
    seen = {}

    def spy(_module, _args, kwargs):
        seen["position_ids"] = kwargs["position_ids"].clone()
        seen["mask"] = kwargs["attention_mask"].clone()

    handle = model.register_forward_pre_hook(spy, with_kwargs=True)
    try:
        with torch.no_grad():
            completion_logits(model, p_ids, p_mask, c_ids, c_mask)
    finally:
        handle.remove()
    for row, m in zip(seen["position_ids"], seen["mask"]):
        assert row[m.bool()].tolist() == list(range(int(m.sum()))), "first real token must have position 0"


def _manual_sft_loss(model, tok, prompts, completions) -> torch.Tensor:
    """Mean over completion tokens and <eos> of −log p(token | everything before it), each row alone."""
    nll = []
    for p, c in zip(prompts, completions):
        prompt_row = [tok.bos_token_id] + tok(p, add_special_tokens=False)["input_ids"]
        completion_row = tok(c, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        nll.append(-_alone_logprobs(model, prompt_row, completion_row))
    return torch.cat(nll).mean()


def test_sft_loss_is_cross_entropy_over_shifted_labels(tok, model):
    batch = encode_sft(tok, PROMPTS, COMPLETIONS, CFG.max_positions)
    with torch.no_grad():
        got = sft_loss(model, batch)
        want = _manual_sft_loss(model, tok, PROMPTS, COMPLETIONS)
    assert float(got) == pytest.approx(float(want), abs=1e-4)
    # the same number through the sampling layout (left-padded prompts + completion_logits)
    p_ids, p_mask = encode_prompts(tok, PROMPTS)
    c_ids, c_mask = _completion_batch(tok, COMPLETIONS)
    with torch.no_grad():
        logp = torch.log_softmax(completion_logits(model, p_ids, p_mask, c_ids, c_mask).double(), -1)
    token_logp = logp.gather(-1, c_ids[..., None])[..., 0]
    assert float(got) == pytest.approx(float(-(token_logp * c_mask).sum() / c_mask.sum()), abs=1e-4)


def test_memorised_completions_are_reproduced_greedily(tok):
    """Trained with ``sft_loss`` to memorise four answers, the model's greedy answers are those answers."""
    data = encode_sft(tok, PROMPTS, COMPLETIONS, CFG.max_positions)
    model = build_model(CFG, len(tok), seed=5)
    hist = train_sft(model, data, TrainConfig(steps=150, batch_size=4, lr=1e-2, warmup_steps=5, log_every=50), seed=0)
    assert hist[-1]["loss"] < 0.05
    with torch.no_grad():
        assert float(_manual_sft_loss(model, tok, PROMPTS, COMPLETIONS)) < 0.05
    s = sample(model, tok, PROMPTS, max_new_tokens=7, greedy=True)
    assert s.texts == COMPLETIONS and s.finished.all()
