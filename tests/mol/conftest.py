"""A tiny mol repository for the endpoint, fifth-specialist and one-cycle-flow tests: the smoke params, a world, the
tokenizer, a (random, untrained) base and four LoRA adapters with random non-zero weights — so every adapter answers
differently, which is what a test that the right adapter answered needs. Built once per session in seconds."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from tests.conftest import REPO


def random_adapter(base, rank: int, alpha_over_rank: float, seed: int, path: Path) -> Path:
    from paperworks.mol.models import lora_model, save_adapter

    model = lora_model(base, rank, alpha_over_rank, seed)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_" in name:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.5)
    save_adapter(model, path, rank, alpha_over_rank * rank)
    return path


@pytest.fixture(scope="session")
def tiny_repo(tmp_path_factory) -> Path:
    from paperworks.core.io import write_json, write_text
    from paperworks.core.lm import build_model, save_checkpoint, save_tokenizer, train_tokenizer
    from paperworks.core.params import validate_section
    from paperworks.core.profile import compose, render
    from paperworks.mol import world as W
    from paperworks.mol.artifacts import BASE, WORLD, seed_dir
    from paperworks.mol.models import freeze
    from paperworks.mol.params import Params

    root = tmp_path_factory.mktemp("mol_tiny")
    params = compose("smoke", REPO / "conf")
    write_text(root / "params.yaml", render(params))
    p = validate_section("mol", Params, params["mol"])
    world = W.build_world(p.world, int(params["seed"]))
    write_json(root / WORLD / "world.json", world)
    tok = train_tokenizer(world["corpus_train"], vocab_size=p.tokenizer.vocab_size)
    save_tokenizer(tok, root / WORLD / "tokenizer.json")
    base = freeze(build_model(p.base.model, len(tok), seed=0))
    save_checkpoint(base, root / BASE, p.base.model, len(tok))
    for i, cap in enumerate(W.CAPABILITIES):
        path = root / seed_dir(p.versions.seed) / "adapters" / f"{cap}.safetensors"
        path.parent.mkdir(parents=True, exist_ok=True)
        random_adapter(base, p.adapters.rank, p.adapters.alpha_over_rank, 100 + i, path)
    return root


@pytest.fixture(scope="session")
def tiny_base(tiny_repo):
    from paperworks.core.lm import load_checkpoint, load_tokenizer
    from paperworks.mol.artifacts import BASE, WORLD
    from paperworks.mol.models import freeze

    base, cfg, _ = load_checkpoint(tiny_repo / BASE)
    return freeze(base), cfg, load_tokenizer(tiny_repo / WORLD / "tokenizer.json")


def tables():
    from paperworks.mol import world as W

    return [W.hidden_tables(np.random.default_rng(k)) for k in range(2)]
