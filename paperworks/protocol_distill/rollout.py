"""Tool-interleaved batched generation with a KV cache.

Every row advances one token per step: either a token the model samples, or the next token of a
document the search tool inserted after the row's last ``</s>``. Feeding inserted tokens one at a
time through the same cached forward keeps the KV cache exact for every row without re-encoding.
The LM kit's ``sample`` cannot do this (it has no tool calls), so it lives here.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from paperworks.core.lm.sampling import position_ids_from_mask
from paperworks.protocol_distill.episode import A_CLOSE, D_CLOSE, D_OPEN, S_CLOSE, S_OPEN, Codec, extract_answer
from paperworks.protocol_distill.search import SearchTool


@dataclass
class Rollouts:
    prompt_ids: torch.Tensor        # (B, P) left-padded
    prompt_mask: torch.Tensor       # (B, P)
    completion_ids: torch.Tensor    # (B, T) right-padded with <pad>
    completion_mask: torch.Tensor   # (B, T) 1 on every real completion token (model or tool)
    loss_mask: torch.Tensor         # (B, T) 1 only on tokens the model wrote: tool tokens never enter a loss
    words: list[list[str]]          # completion words per row
    answers: list[str | None]       # None = the episode never closed an answer
    retrieved: list[list[str]]      # documents the tool inserted, per row
    n_searches: list[int]


def left_pad(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = torch.tensor(r, dtype=torch.long)
        mask[i, width - len(r):] = 1
    return ids, mask


@torch.no_grad()
def rollout(model, codec: Codec, prompts: list[list[int]], tool: SearchTool, max_completion: int,
            max_searches: int, temperature: float = 1.0, greedy: bool = False,
            generator: torch.Generator | None = None) -> Rollouts:
    """Run episodes for ``prompts`` (token ids starting with <bos>) until each closes an answer."""
    was_training = model.training
    model.eval()
    B = len(prompts)
    prompt_ids, prompt_mask = left_pad(prompts, codec.pad)
    out = model(input_ids=prompt_ids, attention_mask=prompt_mask, position_ids=position_ids_from_mask(prompt_mask),
                use_cache=True)
    cache, logits = out.cache, out.logits[:, -1]
    mask = prompt_mask.clone()
    positions = prompt_mask.sum(1)                      # next position per row
    comp = [[] for _ in range(B)]
    model_flags = [[] for _ in range(B)]
    forced: list[list[int]] = [[] for _ in range(B)]
    query: list[list[str] | None] = [None] * B
    retrieved: list[list[str]] = [[] for _ in range(B)]
    n_search = [0] * B
    done = [False] * B
    stop_ids = {codec.ids[A_CLOSE], codec.eos, codec.pad, codec.bos}
    for _ in range(max_completion):
        if greedy:
            sampled = logits.argmax(-1)
        else:
            probs = torch.softmax(logits.float() / temperature, dim=-1)
            sampled = torch.multinomial(probs, 1, generator=generator).squeeze(1)
        step_tok = torch.full((B,), codec.pad, dtype=torch.long)
        step_mask = torch.zeros(B, dtype=torch.long)
        for i in range(B):
            if done[i]:
                continue
            if forced[i]:
                tok, by_model = forced[i].pop(0), 0
            else:
                tok, by_model = int(sampled[i]), 1
            comp[i].append(tok)
            model_flags[i].append(by_model)
            step_tok[i], step_mask[i] = tok, 1
            word = codec.id_to_word[tok]
            if by_model and word == S_OPEN:
                query[i] = []
            elif by_model and word == S_CLOSE:
                q = " ".join(query[i] or [])
                query[i] = None
                n_search[i] += 1
                docs = tool.search(q) if n_search[i] <= max_searches else ()
                retrieved[i].extend(docs)
                doc_words = " ".join(docs).split() or ["none"]
                forced[i] = [codec.ids[D_OPEN]] + [codec.word_to_id.get(w, codec.unk) for w in doc_words] + [codec.ids[D_CLOSE]]
            elif by_model and tok in stop_ids:
                done[i] = True
            elif by_model and query[i] is not None:
                query[i].append(word)
        if all(done):
            break
        mask = torch.cat([mask, step_mask[:, None]], dim=1)
        out = model(input_ids=step_tok[:, None], attention_mask=mask, position_ids=positions[:, None],
                    cache=cache, use_cache=True)
        positions = positions + step_mask
        cache, logits = out.cache, out.logits[:, -1]
    model.train(was_training)
    T = max(1, max(len(c) for c in comp))
    completion_ids = torch.full((B, T), codec.pad, dtype=torch.long)
    completion_mask = torch.zeros((B, T), dtype=torch.long)
    loss_mask = torch.zeros((B, T), dtype=torch.long)
    words, answers = [], []
    for i in range(B):
        n = len(comp[i])
        completion_ids[i, :n] = torch.tensor(comp[i], dtype=torch.long)
        completion_mask[i, :n] = 1
        loss_mask[i, :n] = torch.tensor(model_flags[i], dtype=torch.long)
        w = [codec.id_to_word[t] for t in comp[i]]
        words.append(w)
        answers.append(extract_answer(w))
    return Rollouts(prompt_ids, prompt_mask, completion_ids, completion_mask, loss_mask, words, answers, retrieved, n_search)
