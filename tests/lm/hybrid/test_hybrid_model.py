"""The hybrid causal LM: config validation, every variant's decode path == its full forward,
chunkwise == recurrent through the whole model, causality, checkpoints, the kit's loss."""
from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from paperworks.core.io import ArtifactError
from paperworks.core.lm.hybrid import (
    HybridLMConfig, KDAConfig, MoEConfig, build_hybrid_lm, greedy_decode, load_hybrid_checkpoint,
    next_token_loss, parameter_counts, save_hybrid_checkpoint,
)
from paperworks.core.lm.train import sft_loss

SMALL = dict(vocab_size=23, hidden_size=32, num_heads=2, head_dim=16, mla_kv_rank=8, mlp_hidden=48,
             kda=KDAConfig(chunk_size=8))
VARIANTS = {
    "hybrid": dict(),
    "dense": dict(layer_pattern="A"),
    "all_kda_gdn": dict(layer_pattern="K", kda=KDAConfig(chunk_size=8, per_head_gate=True)),
    "hybrid_moe_full_attnres": dict(mlp="moe", moe=MoEConfig(num_experts=6, top_k=2, expert_hidden=16),
                                     residual="full_attnres"),
    "hybrid_latentmoe_block_attnres": dict(mlp="moe", residual="block_attnres", attnres_blocks=4,
                                           moe=MoEConfig(num_experts=8, top_k=3, expert_hidden=8, latent_dim=12,
                                                         num_shared_experts=1, balancing="quantile")),
    "mixed_pattern": dict(layer_pattern="KMA", num_layers=3),
}


def small(**kw) -> HybridLMConfig:
    args = dict(SMALL)
    args.update(kw)
    return HybridLMConfig(**args)


def test_pattern_tiles_over_layers_and_bad_configs_fail_clearly():
    assert small(num_layers=8).mixers() == "KKKMKKKM"
    assert small(layer_pattern="A", num_layers=3).mixers() == "AAA"
    with pytest.raises(ValidationError, match="layer_pattern 'KKX'"):
        small(layer_pattern="KKX")
    with pytest.raises(ValidationError, match="attnres_blocks=3 must divide 2 \\* num_layers = 8"):
        small(residual="block_attnres", attnres_blocks=3)
    with pytest.raises(ValidationError, match="kda.chunk_size"):
        small(kda={"chunk_size": 32, "lower_bound": -5.0})
    with pytest.raises(ValidationError, match="extra"):
        HybridLMConfig.model_validate({**SMALL, "kda": {"chunk": 8}})


@pytest.mark.parametrize("name", list(VARIANTS))
def test_decode_path_equals_full_forward(name):
    model = build_hybrid_lm(small(**VARIANTS[name]), seed=0).double().eval()
    with torch.no_grad():   # move the zero-initialised pseudo-queries so AttnRes weights are not uniform
        for pname, p in model.named_parameters():
            if pname.endswith(".query"):
                p.normal_(0, 1.0)
    prompt = torch.randint(4, 23, (2, 6), generator=torch.Generator().manual_seed(1))
    seq = greedy_decode(model, prompt, 14)
    assert seq.shape == (2, 20) and torch.equal(seq[:, :6], prompt)
    with torch.no_grad():
        full = model(seq).logits
    # greedy decoding picked the full forward's argmax at every position ...
    assert torch.equal(full[:, 5:-1].argmax(-1), seq[:, 6:])
    # ... and the step logits equal the full forward's, not just their argmax
    with torch.no_grad():
        logits, caches = model.prefill(seq[:, :6])
        stepped = [logits]
        for i in range(6, 19):
            logits, caches = model.step(seq[:, i], caches)
            stepped.append(logits)
    assert (torch.stack(stepped, 1) - full[:, 5:-1]).abs().max() <= 1e-9


def test_whole_model_chunkwise_equals_recurrent_and_is_causal():
    model = build_hybrid_lm(small(mlp="moe", moe=MoEConfig(num_experts=4, top_k=2, expert_hidden=8)), seed=0).double().eval()
    ids = torch.randint(0, 23, (2, 19))
    with torch.no_grad():
        a, b = model(ids).logits, model(ids, recurrent=True).logits
        assert (a - b).abs().max() <= 1e-10
        changed = ids.clone()
        changed[:, 12] = (changed[:, 12] + 1) % 23
        c = model(changed).logits
    assert (a[:, :12] - c[:, :12]).abs().max() <= 1e-12 and (a[:, 12:] - c[:, 12:]).abs().max() > 1e-6


def test_output_carries_aux_loss_and_expert_loads():
    cfg = small(mlp="moe", moe=MoEConfig(num_experts=4, top_k=2, expert_hidden=8, balancing="aux_loss"))
    model = build_hybrid_lm(cfg, seed=0).train()
    out = model(torch.randint(0, 23, (3, 10)))
    assert out.expert_load.shape == (4, 4) and torch.all(out.expert_load.sum(1) == 3 * 10 * 2)
    assert out.aux_loss.item() > 0
    (out.logits.square().mean() + out.aux_loss).backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    dense = build_hybrid_lm(small(), seed=0)(torch.randint(0, 23, (1, 4)))
    assert dense.expert_load is None and dense.aux_loss.item() == 0.0


def test_parameter_counts_count_k_of_n_experts_as_active():
    cfg = small(mlp="moe", moe=MoEConfig(num_experts=8, top_k=2, expert_hidden=8))
    model = build_hybrid_lm(cfg)
    counts = parameter_counts(model)
    routed = sum(p.numel() for m in model.mlps for p in m.experts.parameters())
    assert counts["total"] == sum(p.numel() for p in model.parameters())
    assert counts["total"] - counts["active"] == round(routed * 6 / 8)


def test_kit_loss_runs_on_right_padding_and_left_padding_is_refused():
    model = build_hybrid_lm(small(), seed=0)
    ids = torch.tensor([[1, 5, 6, 7, 2], [1, 8, 2, 0, 0]])
    mask = (ids != 0).long()
    labels = ids.masked_fill(mask == 0, -100)
    loss = sft_loss(model, {"input_ids": ids, "attention_mask": mask, "labels": labels})
    assert torch.isfinite(loss) and loss.item() == pytest.approx(torch.log(torch.tensor(23.0)).item(), rel=0.05)
    with pytest.raises(ValueError, match="left padding"):
        model(ids.flip(1), attention_mask=mask.flip(1))
    moe = build_hybrid_lm(small(mlp="moe", moe=MoEConfig(num_experts=4, top_k=2, expert_hidden=8,
                                                         balancing="aux_loss", aux_loss_coef=0.5)), seed=0).eval()
    batch = {"input_ids": ids, "attention_mask": mask, "labels": labels}
    total, ce, out = next_token_loss(moe, batch)
    assert torch.allclose(ce, sft_loss(moe, batch)) and out.aux_loss.item() > 0
    assert torch.allclose(total, ce + out.aux_loss)


def test_checkpoint_roundtrip_keeps_router_biases(tmp_path):
    cfg = small(mlp="moe", moe=MoEConfig(num_experts=4, top_k=2, expert_hidden=8))
    model = build_hybrid_lm(cfg, seed=0).train()
    model(torch.randint(0, 23, (2, 16)))      # one quantile update moves the selection biases
    assert any(m.selection_bias.abs().sum() > 0 for m in model.mlps)
    save_hybrid_checkpoint(model, tmp_path / "m.safetensors")
    again = load_hybrid_checkpoint(tmp_path / "m.safetensors")
    assert again.cfg == cfg
    for k, v in model.state_dict().items():
        assert torch.equal(v, again.state_dict()[k]), k
    ids = torch.randint(0, 23, (1, 9))
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(ids).logits, again(ids).logits)
    with pytest.raises(ArtifactError, match="missing"):
        load_hybrid_checkpoint(tmp_path / "none.safetensors")


def test_same_seed_same_weights():
    a, b = build_hybrid_lm(small(), seed=3), build_hybrid_lm(small(), seed=3)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


@pytest.mark.parametrize("residual", ["standard", "full_attnres", "block_attnres"])
def test_probe_reports_the_stream_rms_each_sublayer_reads(residual):
    model = build_hybrid_lm(small(residual=residual), seed=0).eval()
    ids = torch.randint(0, 23, (2, 7))
    with torch.no_grad():
        out = model(ids, probe=True)
        emb = model.embed(ids)
        first = model.mixers[0](model.mixer_norms[0](emb))
    second_input = emb + first if residual == "standard" else (emb + first) / 2   # AttnRes starts uniform
    assert out.stream_rms.shape == (9,)
    assert torch.allclose(out.stream_rms[0], emb.square().mean().sqrt())   # the first sublayer reads the embedding
    assert torch.allclose(out.stream_rms[1], second_input.square().mean().sqrt())
    assert model(ids).stream_rms is None
