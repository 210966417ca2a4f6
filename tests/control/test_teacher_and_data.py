"""The teacher's numpy export matches SB3; noisy oracle rollouts are labelled cleanly and reproducible."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from paperworks.control.policies import Actor, Critic, actor_shapes, critic_shapes, export_sb3
from paperworks.control.rollouts import SCHEMA, STATE_COLS, arrays, collect
from paperworks.core.io import save_safetensors, write_parquet

NET = [16, 16]


def random_teacher(tmp_path, seed=0, net=NET):
    g = torch.Generator().manual_seed(seed)
    save_safetensors(tmp_path / "actor.safetensors", {k: torch.randn(s, generator=g) * 0.5 for k, s in actor_shapes(net).items()})
    save_safetensors(tmp_path / "critic.safetensors", {k: torch.randn(s, generator=g) * 0.5 for k, s in critic_shapes(net).items()})
    return Actor.load(tmp_path / "actor.safetensors", net), Critic.load(tmp_path / "critic.safetensors", net)


def test_sb3_export_matches_sb3_forward(tmp_path):
    from paperworks.control.td3 import TD3Config, build_model, numpy_actor

    model = build_model(TD3Config(net_arch=(32, 32)), seed=0)
    export_sb3(model, tmp_path / "a.safetensors", tmp_path / "c.safetensors", {})
    actor, critic = Actor.load(tmp_path / "a.safetensors", [32, 32]), Critic.load(tmp_path / "c.safetensors", [32, 32])
    obs = np.random.default_rng(0).normal(size=(20, 4)) * 0.2
    with torch.no_grad():   # SB3's own forward: actor in [-1, 1], unscaled to the torque range
        sb3 = model.policy.unscale_action(model.actor(torch.as_tensor(obs, dtype=torch.float32)).numpy())[:, 0]
    np.testing.assert_allclose(actor.batch(obs), sb3, atol=1e-5)
    np.testing.assert_allclose(numpy_actor(model).batch(obs), sb3, atol=1e-5)   # what validation runs
    acts = np.linspace(-3, 3, 20)
    with torch.no_grad():
        want = model.critic.q1_forward(torch.as_tensor(obs, dtype=torch.float32),
                                       torch.as_tensor(acts / 3, dtype=torch.float32).reshape(-1, 1)).numpy()[:, 0]
    np.testing.assert_allclose(critic.q(obs, acts), want, atol=1e-4)
    assert np.all(np.abs(actor.batch(obs * 50)) <= 3.0)  # tanh scaled to the torque range


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_noisy_rollouts_are_clean_labelled_weighted_and_reproducible(tmp_path):
    actor, _ = random_teacher(tmp_path)
    kw = dict(env_id="InvertedPendulum-v5", sigmas=[0.0, 1.0], steps_per_sigma=300, max_steps=1000,
              transient_steps=5, transient_weight=3.0)
    df = collect(actor, seed=42, **kw)
    assert len(df) == 600 and list(df.columns) == SCHEMA.names
    # every state is labelled with the teacher's clean action, not the noisy one that was applied
    np.testing.assert_allclose(df["teacher_action"], actor.batch(df[STATE_COLS].to_numpy()), atol=1e-9)
    noisy = df[df["sigma"] == 1.0]
    assert np.abs(noisy["applied_action"] - noisy["teacher_action"]).mean() > 0.1
    clean = df[df["sigma"] == 0.0]
    np.testing.assert_allclose(clean["applied_action"], clean["teacher_action"])
    np.testing.assert_array_equal(df["weight"], np.where(df["t"] < 5, 3.0, 1.0))
    S, Y, W = arrays(df, 1.0)
    assert S.shape == (300, 4) and len(Y) == len(W) == 300
    # same seed -> byte-identical file; another seed -> different data
    write_parquet(tmp_path / "a.parquet", df, SCHEMA)
    write_parquet(tmp_path / "b.parquet", collect(actor, seed=42, **kw), SCHEMA)
    write_parquet(tmp_path / "c.parquet", collect(actor, seed=43, **kw), SCHEMA)
    assert _sha(tmp_path / "a.parquet") == _sha(tmp_path / "b.parquet")
    assert _sha(tmp_path / "a.parquet") != _sha(tmp_path / "c.parquet")
    with pytest.raises(KeyError):
        arrays(df, 2.0)
