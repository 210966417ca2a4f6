"""aLoRA prefix reuse (``paperworks/mol/alora.py``): a turn served on the base's cached prefix gives the logits
of a full recompute (whose offsets peft finds itself), at every decoded position; off-by-one offsets and a
decode step without offsets are planted bugs these tests must catch."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from paperworks.mol import alora as A

ATOL = 1e-4


@pytest.fixture(scope="module")
def setup(tiny_repo):
    from paperworks.core.lm import LMConfig, build_model, load_tokenizer
    from paperworks.mol.artifacts import WORLD, read_world
    from paperworks.mol.models import freeze

    tok = load_tokenizer(tiny_repo / WORLD / "tokenizer.json")
    world = read_world(tiny_repo / WORLD)
    base = freeze(build_model(LMConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, max_positions=256),
                              len(tok), seed=3))
    inv = A.invocation_ids(tok)
    convs = [c for c in A.conversation_turns(tok, world["test_conversations"]) if len(c) >= 3]
    assert len(convs) >= 2
    return base, tok, inv, convs


def randomize(model, seed: int):
    """Non-zero LoRA weights (peft initialises B = 0: an untrained adapter would change nothing)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    return model.eval()


@pytest.fixture(scope="module")
def specialists(setup):
    base, tok, inv, _ = setup
    return {cap: randomize(A.alora_model(base, 2, 2.0, seed=i, inv=inv), 10 + i)
            for i, cap in enumerate(("chat", "agent", "coding", "genui"))}


def check_against_recompute(model, ctx: list[int], step: A.Step, row: int) -> float:
    """Largest |logit difference| between the cached run and full recomputes of ctx + the tokens decoded so far."""
    gen = step.generated[row]
    worst = 0.0
    for k in range(len(gen)):
        ref = A.full_logits(model, ctx + gen[:k])[-1]
        worst = max(worst, float((step.logits[k][row] - ref).abs().max()))
    return worst


def serve_switch(setup, specialists, turn: int = 1):
    """Turn 0 of two conversations with one adapter (batched, different lengths), then turn ``turn`` of each with
    ANOTHER adapter on the base prefix the first left; returns everything the checks compare."""
    base, tok, inv, convs = setup
    two = convs[:2]
    caps = [c[0]["capability"] for c in two]
    first = specialists[caps[0]]
    ctx0 = [A.context_ids(tok.bos_token_id, c, 0) for c in two]
    s0 = A.run_batch(first, [None, None], ctx0, 6, tok.eos_token_id, tok.pad_token_id, alora_inv=len(inv), keep="base")
    ctx1 = [A.context_ids(tok.bos_token_id, c, turn) for c in two]
    covered = [len(x) - len(inv) for x in ctx0]
    new = [c1[n:] for c1, n in zip(ctx1, covered)]
    other = next(m for cap, m in specialists.items() if cap != caps[0])
    s1 = A.run_batch(other, s0.keep, new, 6, tok.eos_token_id, tok.pad_token_id, alora_inv=len(inv), keep="base", keep_logits=True)
    return other, ctx1, s1, new


def test_base_prefix_reuse_equals_full_recompute(setup, specialists):
    other, ctx1, s1, new = serve_switch(setup, specialists)
    assert all(len(g) > 0 for g in s1.generated)
    for row in range(2):
        assert check_against_recompute(other, ctx1[row], s1, row) < ATOL
    assert s1.prefill_tokens == sum(len(x) for x in new) < sum(len(x) for x in ctx1)  # the prefix was not prefilled again


@pytest.mark.parametrize("delta", [1, -1])
def test_off_by_one_prefill_offsets_are_caught(setup, specialists, monkeypatch, delta):
    real = A.prefill_offsets
    monkeypatch.setattr(A, "prefill_offsets", lambda n, k: real(n, k + delta))
    other, ctx1, s1, _ = serve_switch(setup, specialists)
    assert max(check_against_recompute(other, ctx1[row], s1, row) for row in range(2)) > 100 * ATOL


def test_decode_without_offsets_is_caught(setup, specialists, monkeypatch):
    """The peft trap: a one-token decode step holds no invocation, so without offsets it runs the bare base."""
    monkeypatch.setattr(A, "DECODE_OFFSET", 0)
    other, ctx1, s1, _ = serve_switch(setup, specialists)
    assert max(check_against_recompute(other, ctx1[row], s1, row) for row in range(2)) > 100 * ATOL


def test_prefix_before_invocation_is_the_base(setup, specialists):
    """Training and the reference use peft's own offsets (full sequences): before the invocation an aLoRA is the base,
    from it on it is not; peft's offset of a prompt is the invocation length."""
    from peft.tuners.lora.variants import calculate_alora_offsets

    base, tok, inv, convs = setup
    model = specialists["agent"]
    ctx = A.context_ids(tok.bos_token_id, convs[0], 1) + convs[0][1]["answer_ids"][:3]
    ours, ref = A.full_logits(model, ctx), A.full_logits(base, ctx)
    start = len(A.context_ids(tok.bos_token_id, convs[0], 1)) - len(inv)
    assert torch.allclose(ours[:start], ref[:start], atol=1e-5)
    assert (ours[start:] - ref[start:]).abs().max() > 1e-2
    x = torch.tensor([A.context_ids(tok.bos_token_id, convs[0], 1)])
    assert calculate_alora_offsets(model.peft_config, "default", x) == A.prefill_offsets(1, len(inv))


def test_a_standard_lora_cannot_reuse_the_base_prefix(setup):
    """Why the LoRA arm recomputes: its adapted prefix differs from the base's, and run_batch refuses to keep one."""
    from paperworks.mol.models import lora_model

    base, tok, inv, convs = setup
    lora = randomize(lora_model(base, 2, 2.0, seed=0), 5)
    ctx = A.context_ids(tok.bos_token_id, convs[0], 0)
    assert (A.full_logits(lora, ctx)[:-len(inv)] - A.full_logits(base, ctx)[:-len(inv)]).abs().max() > 1e-2
    with pytest.raises(ValueError, match="keep='base'"):
        A.run_batch(lora, [None], [ctx], 2, tok.eos_token_id, tok.pad_token_id, alora_inv=None, keep="base")


def test_replay_reuse_saves_prefill_and_keeps_answers(setup, specialists):
    base, tok, inv, convs = setup
    convs = convs[:3]
    n = sum(len(c) for c in convs)
    arrivals = np.arange(n) * 0.01
    ticks = iter(range(10_000))
    kw = dict(convs=convs, arrivals=arrivals, max_new_tokens=5, max_batch=4, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id,
              bos_id=tok.bos_token_id, n_inv=len(inv), clock=lambda: next(ticks) * 1e-3)
    reuse = A.replay_conversations(specialists.__getitem__, "alora", "base_prefix", **kw)
    full = A.replay_conversations(specialists.__getitem__, "alora", "none", **kw)
    assert reuse["answers"] == full["answers"]
    # prefill by hand: without reuse every turn prefills its whole context; with it, turn t ≥ 1 prefills what follows
    # the previous turn's base prefix (that turn's invocation, its answer and the new prompt)
    ctx = {(c, t): len(A.context_ids(tok.bos_token_id, conv, t)) for c, conv in enumerate(convs) for t in range(len(conv))}
    assert full["prefill_tokens"] == sum(ctx.values())
    assert reuse["prefill_tokens"] == sum(v if t == 0 else v - (ctx[(c, t - 1)] - len(inv)) for (c, t), v in ctx.items())
    assert reuse["prefill_tokens"] < full["prefill_tokens"]
    with pytest.raises(ValueError, match="aLoRA"):
        A.replay_conversations(specialists.__getitem__, "lora", "base_prefix", **kw)
