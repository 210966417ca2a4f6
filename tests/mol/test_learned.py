"""Learned routing from peft (``paperworks/mol/learned.py``) on the tiny base: X-LoRA holds the trained specialists
bit for bit and trains only its classifier; Polytropon answers with the task id it is given."""
from __future__ import annotations

import pytest
import torch

from paperworks.mol import learned as L
from paperworks.mol import world as W


@pytest.fixture(scope="module")
def xlora(tiny_repo, tiny_base, tmp_path_factory):
    from paperworks.core.params import load_section
    from paperworks.mol.artifacts import seed_dir
    from paperworks.mol.params import Params

    base, _, tok = tiny_base
    p = load_section("mol", Params, tiny_repo / "params.yaml")
    files = {cap: tiny_repo / seed_dir(p.versions.seed) / "adapters" / f"{cap}.safetensors" for cap in W.CAPABILITIES}
    dirs = L.peft_adapter_dirs(base, files, p.adapters.rank, p.adapters.alpha_over_rank, tmp_path_factory.mktemp("xlora"))
    return L.xlora_model(base, dirs, depth=1, size=8, layerwise=False, temperature=1.0, seed=0), files, dirs, p


def test_xlora_holds_the_specialists_and_trains_only_its_classifier(xlora, tiny_base):
    from paperworks.core.io import load_safetensors

    model, files, _, _ = xlora
    base, _, tok = tiny_base
    for i, cap in enumerate(W.CAPABILITIES):
        held, saved = L.xlora_expert_tensors(model, i), load_safetensors(files[cap])
        assert set(held) == set(saved) and all(torch.equal(held[k], saved[k]) for k in saved), cap
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("internal_xlora_classifier" in n for n in trainable)
    ids = torch.tensor([[tok.bos_token_id] + tok("user: call a tool to show the open invoices of ana, limit 3\nassistant:",
                                                  add_special_tokens=False)["input_ids"]])
    model.eval()
    with torch.no_grad():
        mixed = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False).logits
        plain = base(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False).logits
    assert (mixed - plain).abs().max() > 1e-3  # the experts are applied
    before = {k: v.clone() for k, v in L.xlora_expert_tensors(model, 0).items()}
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    model.train()
    model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=ids, use_cache=False).loss.backward()
    opt.step()
    model.eval()
    assert all(torch.equal(before[k], v) for k, v in L.xlora_expert_tensors(model, 0).items())


def test_xlora_adapter_names_trap(xlora, tiny_base):
    """peft 0.21.2 loads X-LoRA experts as '0'…'n-1' but activates them by the dict's keys: other keys break."""
    base, _, tok = tiny_base
    _, _, dirs, _ = xlora
    with pytest.raises(ValueError, match="must be '0'"):
        L.xlora_model(base, {cap: d for cap, d in zip(W.CAPABILITIES, dirs.values())}, 1, 8, False, 1.0, 0)


def test_poly_uses_the_task_id_it_is_given(tiny_base, tiny_repo):
    from paperworks.mol.artifacts import WORLD, read_world

    base, cfg, tok = tiny_base
    world = read_world(tiny_repo / WORLD)
    model = L.poly_model(base, rank=2, n_skills=4, n_splits=1, seed=0)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():  # peft starts B at 0 and the routing logits near 0: every task would look the same
        for name, p in model.named_parameters():
            if "poly_lora_B" in name or "module_logits" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 2)
    items = [world["train"][cap][0] for cap in W.CAPABILITIES]
    data = L.encode_tasks(tok, items, cfg.max_positions)
    assert data["task_ids"].tolist() == [L.TASK_ID[x["capability"]] for x in items] == [0, 1, 2, 3]
    model.eval()
    own = float(L.task_loss(model, data))
    swapped = float(L.task_loss(model, {**data, "task_ids": data["task_ids"].flip(0)}))
    assert abs(own - swapped) > 1e-3
    with pytest.raises(ValueError, match="task_ids"):
        model(input_ids=data["input_ids"], attention_mask=data["attention_mask"], use_cache=False)
    prompts = [x["prompt"] for x in items]
    a = L.generate_tasks(model, tok, prompts, [0, 1, 2, 3], 6)
    assert a == L.generate_tasks(model, tok, prompts, [0, 1, 2, 3], 6)  # greedy: deterministic
    logits = {t: L.task_loss(model, {**data, "task_ids": torch.full((4,), t)}) for t in range(4)}
    assert len({round(float(v), 5) for v in logits.values()}) == 4


def test_train_tasks_learns_and_logs_the_curve(tiny_base, tiny_repo):
    from paperworks.core.lm import TrainConfig
    from paperworks.mol.artifacts import WORLD, read_world

    base, cfg, tok = tiny_base
    world = read_world(tiny_repo / WORLD)
    items = [x for cap in W.CAPABILITIES for x in world["train"][cap][:8]]
    data = L.encode_tasks(tok, items, cfg.max_positions)
    model = L.poly_model(base, rank=2, n_skills=2, n_splits=1, seed=0)
    start = L.task_heldout_loss(model, data)
    hist = L.train_tasks(model, data, TrainConfig(steps=12, batch_size=8, lr=3e-2, warmup_steps=1, log_every=4, eval_every=4), 0,
                         lambda step: {"dev_loss": L.task_heldout_loss(model, data)})
    assert [h["step"] for h in hist] == [4, 8, 12] and hist[-1]["dev_loss"] < start
    assert all(not p.requires_grad for n, p in model.named_parameters() if "poly" not in n)
