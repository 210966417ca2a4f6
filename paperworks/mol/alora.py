"""Activated LoRA (aLoRA, peft ``LoraConfig(alora_invocation_tokens=…)``) specialists and serving whole
conversations with the key/value cache of the shared prefix reused across capability switches.

An aLoRA adapter changes nothing before its invocation tokens (here the ``\\nassistant:`` that ends every
user turn), so the key/values of everything before them are the *base* model's and can be shared by every
aLoRA specialist: when a conversation switches capability, only the tokens after the cached base prefix are
prefilled. A standard LoRA adapts every token, so its cache is valid for that adapter only; on a switch the
whole conversation is prefilled again.

The peft trap (``../shared/LIBRARY-NOTES.md``): the aLoRA layer applies the adapter only on the last
``alora_offsets[i]`` tokens of what it is given, and with ``alora_offsets=None`` on **none**. ``PeftModel.forward``
computes the offsets itself only when the invocation tokens are *in* the ``input_ids`` it gets — true for a
full-sequence forward (training, ``heldout_loss``, ``PeftModel.generate``), false for a decode step fed one
token: a hand-written decode loop that does not pass ``alora_offsets`` silently decodes with the base. Every
forward here passes the offsets explicitly (``prefill_offsets``, ``DECODE_OFFSET``); ``tests/mol/test_alora.py``
checks the reused-prefix logits against a full recompute whose offsets peft finds on its own.

Layout of one batch (rows have different cached lengths ``L_i`` and new lengths ``N_i``)::

    [pad × (C − L_i)] [cached L_i] [pad × (N − N_i)] [new N_i]   → then one column per decoded token

with the attention mask 0 on pads and position ids = cumsum(mask) − 1, so a cached key keeps the rotary
position it was computed at. Conversations are built on token ids (``<bos> p₀ a₀ <eos> p₁ a₁ <eos> p₂ …``):
concatenating strings would let BPE merge across turn boundaries.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch

from paperworks.mol.models import LORA_TARGETS

INVOCATION = "\nassistant:"  # every user turn ends with it (world.prompt_text): the aLoRA adapters activate here
DECODE_OFFSET = 1            # a decode step feeds one token, and that token is adapted


def invocation_ids(tok) -> list[int]:
    """The invocation string as token ids (its tokenization must end every prompt: checked by ``check_prompts``)."""
    ids = tok(INVOCATION, add_special_tokens=False)["input_ids"]
    if not ids:
        raise ValueError(f"the invocation {INVOCATION!r} tokenizes to nothing")
    return list(ids)


def check_prompts(tok, prompts: Sequence[str], inv: Sequence[int]) -> None:
    """Every prompt's ids end with the invocation ids (else the adapter would activate elsewhere or nowhere)."""
    bad = [p for p in prompts if tok(p, add_special_tokens=False)["input_ids"][-len(inv):] != list(inv)]
    if bad:
        raise ValueError(f"{len(bad)} prompts do not end with the invocation tokens {list(inv)}, e.g. {bad[0]!r}")


def alora_model(base, rank: int, alpha_over_rank: float, seed: int, inv: Sequence[int]):
    """An aLoRA of ``rank`` on all 7 linear modules of a deep copy of the frozen base (the specialists' recipe)."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    cfg = LoraConfig(r=rank, lora_alpha=alpha_over_rank * rank, lora_dropout=0.0, target_modules=list(LORA_TARGETS),
                     bias="none", task_type="CAUSAL_LM", alora_invocation_tokens=list(inv))
    return get_peft_model(copy.deepcopy(base), cfg)


def prefill_offsets(n_rows: int, n_inv: int) -> list[int]:
    """aLoRA offsets of a prefill whose rows all end with the invocation: adapt the last ``n_inv`` tokens."""
    return [n_inv] * n_rows


# ------------------------------------------------------------------ per-row key/value caches
RowCache = list  # one row's cache: per layer a (keys, values) pair of shape (heads, length, head_dim)


def row_length(row: RowCache | None) -> int:
    return 0 if not row else int(row[0][0].shape[1])


def stack_rows(rows: Sequence[RowCache | None]):
    """Left-pad the rows' caches to a common length: (DynamicCache or None, mask (B, C))."""
    from transformers import DynamicCache

    lengths = [row_length(r) for r in rows]
    width = max(lengths)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    if width == 0:
        return None, mask
    ref = next(r for r in rows if r)
    layers = []
    for layer, (k0, v0) in enumerate(ref):
        keys = k0.new_zeros((len(rows), k0.shape[0], width, k0.shape[2]))
        values = v0.new_zeros((len(rows), v0.shape[0], width, v0.shape[2]))
        for i, r in enumerate(rows):
            if r:
                keys[i, :, width - lengths[i]:] = r[layer][0]
                values[i, :, width - lengths[i]:] = r[layer][1]
        layers.append((keys, values))
    for i, n in enumerate(lengths):
        mask[i, width - n:] = 1
    return DynamicCache(layers), mask


def unstack_rows(cache, mask: torch.Tensor, upto: int) -> list[RowCache]:
    """Each row's real (mask = 1) key/values among the first ``upto`` columns, as compact per-row caches."""
    out = []
    for i in range(mask.shape[0]):
        cols = mask[i, :upto].nonzero(as_tuple=True)[0]
        out.append([(layer.keys[i][:, cols].clone(), layer.values[i][:, cols].clone()) for layer in cache.layers])
    return out


@dataclass
class Step:
    """What one batch computed: generated ids per row (up to and incl. <eos>), prefill tokens, and the cache to keep."""

    generated: list[list[int]]
    prefill_tokens: int
    keep: list[RowCache]
    logits: list[torch.Tensor] = field(default_factory=list)  # (B, V) per position that picked a token (with keep_logits)


@torch.no_grad()
def run_batch(model, rows: Sequence[RowCache | None], new: Sequence[Sequence[int]], max_new_tokens: int, eos_id: int,
              pad_id: int, alora_inv: int | None = None, keep: str = "prompt", keep_logits: bool = False) -> Step:
    """Prefill ``new`` on top of each row's cache, then decode greedily with the cache.

    ``alora_inv``: the invocation length of aLoRA adapters (``None``: a standard LoRA or the base; then no
    offsets are passed). ``keep``: which key/values to return per row for the next turn — ``"prompt"`` (the whole
    prefilled context: valid for this adapter only) or ``"base"`` (the context minus its last ``alora_inv``
    tokens: computed without the adapter, so valid for the base and for every aLoRA specialist).
    """
    if keep == "base" and alora_inv is None:
        raise ValueError("keep='base' needs alora_inv: only an aLoRA leaves the prefix with the base's key/values")
    b = len(new)
    cache, cmask = stack_rows(rows)
    n = max(len(x) for x in new)
    ids = torch.full((b, n), pad_id, dtype=torch.long)
    nmask = torch.zeros((b, n), dtype=torch.long)
    for i, x in enumerate(new):
        ids[i, n - len(x):] = torch.tensor(list(x), dtype=torch.long)
        nmask[i, n - len(x):] = 1
    mask = torch.cat([cmask, nmask], dim=1)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    kw = {} if alora_inv is None else {"alora_offsets": prefill_offsets(b, alora_inv)}
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos[:, -n:], cache=cache, use_cache=True, **kw)
    cache = out.cache
    prompt_width = mask.shape[1]
    kept = unstack_rows(cache, mask, prompt_width - (alora_inv if keep == "base" else 0))
    logits = out.logits[:, -1].float()
    generated: list[list[int]] = [[] for _ in range(b)]
    done = torch.zeros(b, dtype=torch.bool)
    last_pos = pos[:, -1]
    trace = []
    for step in range(max_new_tokens):
        if keep_logits:
            trace.append(logits.clone())
        nxt = logits.argmax(-1)
        for i in range(b):
            if not done[i]:
                generated[i].append(int(nxt[i]))
        done |= nxt == eos_id
        if bool(done.all()) or step == max_new_tokens - 1:
            break
        mask = torch.cat([mask, torch.ones((b, 1), dtype=torch.long)], dim=1)
        last_pos = last_pos + 1
        kw = {} if alora_inv is None else {"alora_offsets": [DECODE_OFFSET] * b}
        out = model(input_ids=torch.where(done, pad_id, nxt)[:, None], attention_mask=mask, position_ids=last_pos[:, None],
                    cache=cache, use_cache=True, **kw)
        cache = out.cache
        logits = out.logits[:, -1].float()
    return Step(generated=generated, prefill_tokens=int(nmask.sum()), keep=kept, logits=trace)


@torch.no_grad()
def full_logits(model, ids: Sequence[int]) -> torch.Tensor:
    """The reference: one forward over the whole sequence, no cache, offsets left to peft (it finds the last
    invocation in ``ids``); logits (T, V)."""
    x = torch.tensor([list(ids)], dtype=torch.long)
    return model(input_ids=x, attention_mask=torch.ones_like(x), use_cache=False).logits[0].float()


# ------------------------------------------------------------------ conversations
def conversation_turns(tok, rows: Sequence[dict]) -> list[list[dict]]:
    """Test-conversation rows → per conversation its turns in order, each with ``prompt_ids`` (ending in the
    invocation) and ``answer_ids`` (the reference answer + <eos>: the history the next turn sees)."""
    by: dict[int, list[dict]] = {}
    for r in rows:
        by.setdefault(int(r["conversation"]), []).append(r)
    out = []
    for c in sorted(by):
        turns = sorted(by[c], key=lambda r: int(r["turn"]))
        out.append([{**r, "prompt_ids": tok(r["prompt"], add_special_tokens=False)["input_ids"],
                     "answer_ids": tok(r["target"], add_special_tokens=False)["input_ids"] + [tok.eos_token_id]}
                    for r in turns])
    return out


def context_ids(bos_id: int, turns: Sequence[dict], t: int) -> list[int]:
    """The whole context of turn ``t``: <bos>, every earlier turn's prompt and answer, turn ``t``'s prompt."""
    ids = [bos_id]
    for s in range(t):
        ids += turns[s]["prompt_ids"] + turns[s]["answer_ids"]
    return ids + turns[t]["prompt_ids"]


REUSE_MODES = ("none", "same_adapter", "base_prefix")


@dataclass
class ConvState:
    """One conversation's cache between turns: which adapter computed it (``"base"``: the shared base prefix)
    and how many context tokens it covers."""

    rows: RowCache | None = None
    owner: str | None = None
    covered: int = 0


def new_tokens(state: ConvState, ctx: list[int], adapter: str, reuse: str) -> tuple[RowCache | None, list[int]]:
    """The cache a turn may start from and the tokens still to prefill, under ``reuse``:
    ``none`` — nothing; ``same_adapter`` — the cache if this adapter computed it; ``base_prefix`` — the base cache."""
    usable = (reuse == "same_adapter" and state.owner == adapter) or (reuse == "base_prefix" and state.owner == "base")
    if not usable or state.rows is None:
        return None, ctx
    return state.rows, ctx[state.covered:]


def replay_conversations(select: Callable[[str], object], kind: str, reuse: str, convs: Sequence[Sequence[dict]],
                         arrivals: np.ndarray, max_new_tokens: int, max_batch: int, eos_id: int, pad_id: int, bos_id: int,
                         n_inv: int, clock=None) -> dict:
    """Serve the turns of ``convs`` (flattened in conversation order; turn k arrives at ``arrivals[k]`` but not
    before its conversation's previous turn finished) with batches grouped by adapter (the oldest ready turn's
    adapter, at most ``max_batch``); the clock advances by measured compute.

    ``select(capability)`` returns the model with that capability's adapter active (e.g. ``set_adapter`` on one
    peft model; called outside the timed region). ``kind``: ``"lora"`` or ``"alora"``. Returns per-turn answers,
    latencies and prefill tokens, and the totals."""
    import time

    if reuse not in REUSE_MODES:
        raise ValueError(f"reuse={reuse!r}: one of {REUSE_MODES}")
    if reuse == "base_prefix" and kind != "alora":
        raise ValueError("reuse='base_prefix' needs aLoRA adapters (a LoRA's prefix is not the base's)")
    clock_fn = clock or time.perf_counter
    flat = [(c, t) for c, turns in enumerate(convs) for t in range(len(turns))]
    index = {ct: k for k, ct in enumerate(flat)}
    state = [ConvState() for _ in convs]
    finish = np.full(len(flat), np.nan)
    ready = np.full(len(flat), np.nan)
    answers: list[list[int] | None] = [None] * len(flat)
    prefill = np.zeros(len(flat), dtype=int)
    now, busy, tokens, batches, sizes = 0.0, 0.0, 0, 0, []
    pending = set(range(len(flat)))

    def ready_at(k: int) -> float:
        c, t = flat[k]
        prev = arrivals[k] if t == 0 else max(arrivals[k], finish[index[(c, t - 1)]])
        return float(prev)

    while pending:
        avail = sorted((k for k in pending if (flat[k][1] == 0 or not np.isnan(finish[index[(flat[k][0], flat[k][1] - 1)]]))),
                       key=ready_at)
        if ready_at(avail[0]) > now:
            now = ready_at(avail[0])
        waiting = [k for k in avail if ready_at(k) <= now]
        cap = convs[flat[waiting[0]][0]][flat[waiting[0]][1]]["capability"]
        batch = [k for k in waiting if convs[flat[k][0]][flat[k][1]]["capability"] == cap][:max_batch]
        rows, new = [], []
        for k in batch:
            c, t = flat[k]
            ctx = context_ids(bos_id, convs[c], t)
            r, x = new_tokens(state[c], ctx, cap, reuse)
            rows.append(r)
            new.append(x)
        model = select(cap)
        t0 = clock_fn()
        step = run_batch(model, rows, new, max_new_tokens, eos_id, pad_id, alora_inv=n_inv if kind == "alora" else None,
                         keep="base" if reuse == "base_prefix" else "prompt")
        dt = clock_fn() - t0
        now += dt
        busy += dt
        batches += 1
        sizes.append(len(batch))
        for j, k in enumerate(batch):
            c, t = flat[k]
            ready[k] = ready_at(k)
            finish[k] = now
            answers[k] = step.generated[j]
            prefill[k] = len(new[j])
            tokens += len(step.generated[j])
            ctx_len = len(context_ids(bos_id, convs[c], t))
            if reuse == "base_prefix":
                state[c] = ConvState(step.keep[j], "base", ctx_len - n_inv)
            elif reuse == "same_adapter":
                state[c] = ConvState(step.keep[j], cap, ctx_len)
            pending.discard(k)
    latency = finish - ready
    return {"answers": answers, "latency_s": latency, "prefill": prefill, "tokens_per_s": tokens / max(busy, 1e-12),
            "p50_ms": 1000 * float(np.percentile(latency, 50)), "p95_ms": 1000 * float(np.percentile(latency, 95)),
            "prefill_tokens": int(prefill.sum()), "batches": batches, "mean_batch": float(np.mean(sizes)), "busy_s": busy,
            "turns": flat}
