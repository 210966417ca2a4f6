"""Batched sampling (left padding + KV cache via ``generate``) and aligned completion logits.

Layout used everywhere: ``[<pad>… <bos> prompt][completion … <pad>]`` — prompts are
left-padded to a common width P, completions right-padded after their ``<eos>``, so
completion token j of every row sits at column P + j and the logits that predict it at
column P + j − 1. Positions are counted from the first real token (left padding does
not shift RoPE positions).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch


@dataclass
class Samples:
    prompt_ids: torch.Tensor        # (B, P) left-padded, starts with <bos>
    prompt_mask: torch.Tensor       # (B, P) 1 on real tokens
    completion_ids: torch.Tensor    # (B, T) right-padded with <pad> after <eos>
    completion_mask: torch.Tensor   # (B, T) 1 up to and including the first <eos>
    texts: list[str]                # decoded completions without special tokens
    finished: torch.Tensor          # (B,) True when an <eos> was produced

    @property
    def num_tokens(self) -> int:
        return int(self.completion_mask.sum())


def check_prompt_fits(tokenizer, prompts: Sequence[str], max_new_tokens: int, max_positions: int) -> None:
    """Raise ``ValueError`` naming the longest prompt when prompt + completion exceeds the context."""
    lengths = [len(tokenizer(p, add_special_tokens=False)["input_ids"]) + 1 for p in prompts]
    worst = max(range(len(prompts)), key=lambda i: lengths[i]) if prompts else None
    if worst is not None and lengths[worst] + max_new_tokens > max_positions:
        raise ValueError(
            f"prompt of {lengths[worst]} tokens + {max_new_tokens} new tokens exceeds the model context "
            f"max_positions={max_positions}: {prompts[worst][:80]!r}"
        )


def encode_prompts(tokenizer, prompts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """``<bos>`` + prompt, left-padded: (input_ids, attention_mask)."""
    rows = [[tokenizer.bos_token_id] + tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = torch.tensor(r)
        mask[i, width - len(r):] = 1
    return ids, mask


def position_ids_from_mask(mask: torch.Tensor) -> torch.Tensor:
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


def completion_mask_from_ids(completion_ids: torch.Tensor, eos_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """1 up to and including the first <eos> in each row; also whether the row finished."""
    is_eos = completion_ids == eos_id
    after_eos = (is_eos.long().cumsum(-1) - is_eos.long()) > 0  # strictly after the first eos
    return (~after_eos).long(), is_eos.any(-1)


@torch.no_grad()
def sample(
    model,
    tokenizer,
    prompts: Sequence[str],
    max_new_tokens: int,
    temperature: float = 1.0,
    greedy: bool = False,
    num_return_sequences: int = 1,
) -> Samples:
    """Sample completions for a batch of prompts (pure temperature sampling: no top-k/top-p).

    With ``num_return_sequences=n`` the rows come prompt-major (prompt 0 n times, then 1 …).
    """
    from transformers import GenerationConfig

    check_prompt_fits(tokenizer, prompts, max_new_tokens, model.config.max_position_embeddings)
    ids, mask = encode_prompts(tokenizer, prompts)
    gen = GenerationConfig(
        max_new_tokens=max_new_tokens, do_sample=not greedy, temperature=None if greedy else temperature,
        top_k=None, top_p=None, num_return_sequences=num_return_sequences, use_cache=True,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id,
    )
    was_training = model.training
    model.eval()
    out = model.generate(input_ids=ids, attention_mask=mask, generation_config=gen)
    model.train(was_training)
    if num_return_sequences > 1:
        ids = ids.repeat_interleave(num_return_sequences, 0)
        mask = mask.repeat_interleave(num_return_sequences, 0)
    comp = out[:, ids.shape[1]:]
    cmask, finished = completion_mask_from_ids(comp, tokenizer.eos_token_id)
    comp = torch.where(cmask.bool(), comp, torch.full_like(comp, tokenizer.pad_token_id))
    texts = tokenizer.batch_decode(comp, skip_special_tokens=True)
    return Samples(ids, mask, comp, cmask, texts, finished)


def completion_logits(model, prompt_ids, prompt_mask, completion_ids, completion_mask) -> torch.Tensor:
    """Logits (B, T, V) that predict each completion token given its prompt and the tokens before it.

    Call under ``torch.no_grad()`` for teachers; with grad for the student. The same
    completion can be scored under different prompts (e.g. a privileged one).
    """
    ids = torch.cat([prompt_ids, completion_ids], dim=1)
    mask = torch.cat([prompt_mask, completion_mask], dim=1)
    out = model(input_ids=ids, attention_mask=mask, position_ids=position_ids_from_mask(mask), use_cache=False)
    p = prompt_ids.shape[1]
    return out.logits[:, p - 1: p - 1 + completion_ids.shape[1]].float()
