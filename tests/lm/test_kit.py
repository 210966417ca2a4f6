"""Unit tests for the shared tiny-LM kit (paperworks.core.lm)."""
from __future__ import annotations

import pytest
import torch

from paperworks.core.io import ArtifactError
from paperworks.core.lm import (
    LMConfig, TrainConfig, build_model, check_prompt_fits, completion_logits, encode_sft,
    load_checkpoint, load_tokenizer, sample, save_checkpoint, save_tokenizer, sft_loss,
    train_sft, train_tokenizer, warmup_cosine,
)

TEXTS = [f"{a}+{b}={a + b}" for a in range(30) for b in range(30)]
CFG = LMConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_positions=24)


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(TEXTS)


def test_tokenizer_chars_roundtrip_and_specials(tok, tmp_path):
    assert tok.convert_ids_to_tokens([0, 1, 2, 3]) == ["<pad>", "<bos>", "<eos>", "<unk>"]
    assert len(tok) == 4 + len(set("".join(TEXTS)))  # character level: one token per character
    assert tok.padding_side == "left"
    ids = tok("12+7=19", add_special_tokens=False)["input_ids"]
    assert len(ids) == 7 and tok.decode(ids) == "12+7=19"
    save_tokenizer(tok, tmp_path / "tokenizer.json")
    again = load_tokenizer(tmp_path / "tokenizer.json")
    assert again("12+7=19")["input_ids"] == tok("12+7=19")["input_ids"]


def test_tokenizer_deterministic_and_bpe_merges(tmp_path):
    a, b = train_tokenizer(TEXTS[::-1], vocab_size=40), train_tokenizer(TEXTS, vocab_size=40)
    save_tokenizer(a, tmp_path / "a.json")
    save_tokenizer(b, tmp_path / "b.json")
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    assert len(a) == 40  # merges added beyond the alphabet


def test_load_tokenizer_rejects_corrupt(tmp_path):
    (tmp_path / "t.json").write_text("{not json")
    with pytest.raises(ArtifactError):
        load_tokenizer(tmp_path / "t.json")


def test_lmconfig_validates():
    with pytest.raises(ValueError):
        LMConfig(hidden_size=30, num_heads=4)


def test_warmup_cosine_shape():
    assert warmup_cosine(0, 10, 100) == pytest.approx(0.1)
    assert warmup_cosine(9, 10, 100) == pytest.approx(1.0)
    assert warmup_cosine(100, 10, 100, 0.1) == pytest.approx(0.1)
    assert warmup_cosine(55, 10, 100, 0.0) == pytest.approx(0.5)


def test_encode_sft_masks_prompt(tok):
    batch = encode_sft(tok, ["1+2=", "10+20="], ["3", "30"], CFG.max_positions)
    lab = batch["labels"]
    # row 0: <bos> 1 + 2 = | 3 <eos>
    assert lab[0, :5].eq(-100).all() and lab[0, 5:7].tolist() == [tok.convert_tokens_to_ids("3"), tok.eos_token_id]
    assert batch["attention_mask"][0].sum() == 7
    with pytest.raises(ValueError, match="max_positions"):
        encode_sft(tok, ["1" * 30], ["2"], CFG.max_positions)


def test_training_reduces_loss(tok):
    prompts = [t.split("=")[0] + "=" for t in TEXTS]
    comps = [t.split("=")[1] for t in TEXTS]
    data = encode_sft(tok, prompts, comps, CFG.max_positions)
    model = build_model(CFG, len(tok), seed=0)
    with torch.no_grad():
        first = float(sft_loss(model, {k: v[:64] for k, v in data.items()}))
    hist = train_sft(model, data, TrainConfig(steps=40, batch_size=32, lr=1e-2, warmup_steps=4, log_every=10), seed=0)
    assert hist[-1]["loss"] < first
    assert [h["step"] for h in hist] == [10, 20, 30, 40]


def test_checkpoint_roundtrip_and_shape_check(tok, tmp_path):
    model = build_model(CFG, len(tok), seed=1)
    save_checkpoint(model, tmp_path / "m.safetensors", CFG, len(tok))
    again, cfg, vocab = load_checkpoint(tmp_path / "m.safetensors")
    assert cfg == CFG and vocab == len(tok)
    for (k, v), (k2, v2) in zip(model.state_dict().items(), again.state_dict().items()):
        assert k == k2 and torch.equal(v, v2)
    with pytest.raises(ArtifactError, match="shape"):
        load_checkpoint(tmp_path / "m.safetensors", cfg=CFG.model_copy(update={"hidden_size": 64}))
    (tmp_path / "bad.safetensors").write_bytes(b"garbage")
    with pytest.raises(ArtifactError):
        load_checkpoint(tmp_path / "bad.safetensors")


def test_sampling_left_padding_matches_completion_logits(tok):
    model = build_model(CFG, len(tok), seed=2)
    prompts = ["1+2=", "13+14=", "5+29="]
    g = sample(model, tok, prompts, 6, greedy=True)
    assert g.prompt_ids[0, 0] == tok.pad_token_id and g.prompt_ids[1, 0] == tok.bos_token_id
    logits = completion_logits(model, g.prompt_ids, g.prompt_mask, g.completion_ids, g.completion_mask)
    assert logits.shape[:2] == g.completion_ids.shape and logits.shape[2] == len(tok)
    agree = (logits.argmax(-1) == g.completion_ids) | (g.completion_mask == 0)
    assert agree.all()  # greedy tokens are the argmax of the aligned logits: positions are right


def test_sampling_masks_after_eos_and_repeats(tok):
    model = build_model(CFG, len(tok), seed=3)
    s = sample(model, tok, ["1+2=", "3+4="], 5, temperature=1.5, num_return_sequences=3)
    assert s.completion_ids.shape[0] == 6 and torch.equal(s.prompt_ids[0], s.prompt_ids[2])
    for row, m in zip(s.completion_ids, s.completion_mask):
        eos = (row == tok.eos_token_id).nonzero()
        if len(eos):
            assert m[: eos[0, 0] + 1].all() and not m[eos[0, 0] + 1:].any()
        else:
            assert m.all()


def test_prompt_longer_than_context_fails(tok):
    with pytest.raises(ValueError, match="exceeds the model context"):
        check_prompt_fits(tok, ["1" * 20], 8, CFG.max_positions)
    model = build_model(CFG, len(tok), seed=0)
    with pytest.raises(ValueError):
        sample(model, tok, ["1" * 20], 8)


def test_log_row_writes_every_metric_but_step_at_the_rows_step(tmp_path):
    from dvclive import Live

    from paperworks.core.lm import log_row

    live = Live(str(tmp_path / "live"), dvcyaml=False, save_dvc_exp=False, report=None)
    log_row(live, {"step": 3, "loss": 0.5, "kl": 2}, prefix="s0/")
    log_row(live, {"step": 7, "loss": 0.25, "kl": 1})
    live.end()
    metrics = tmp_path / "live/plots/metrics"
    assert (metrics / "s0/loss.tsv").read_text().splitlines() == ["step\tloss", "3\t0.5"]
    assert (metrics / "s0/kl.tsv").read_text().splitlines() == ["step\tkl", "3\t2.0"]
    assert (metrics / "loss.tsv").read_text().splitlines() == ["step\tloss", "7\t0.25"]
    assert not (metrics / "step.tsv").exists() and not (metrics / "s0/step.tsv").exists()
