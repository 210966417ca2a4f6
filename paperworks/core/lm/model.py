"""A Llama-style causal LM built from a config (no hub), with checked safetensors checkpoints.

Being a plain ``LlamaForCausalLM`` it keeps ``generate``, the KV cache and peft working.
"""
from __future__ import annotations

import json
from pathlib import Path

from pydantic import Field, model_validator

from paperworks.core.io import ArtifactError, load_safetensors, safetensors_metadata, save_safetensors
from paperworks.core.params import StrictModel


class LMConfig(StrictModel):
    """Model sizes (usable directly as a nested params model)."""

    hidden_size: int = Field(64, ge=8)
    num_layers: int = Field(2, ge=1)
    num_heads: int = Field(4, ge=1)
    num_kv_heads: int = Field(0, ge=0, description="0 = same as num_heads")
    intermediate_size: int = Field(256, ge=8)
    max_positions: int = Field(128, ge=8, description="context length: prompt + completion")
    rope_theta: float = Field(10000.0, gt=0)

    @model_validator(mode="after")
    def _heads_divide(self):
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size {self.hidden_size} must be divisible by num_heads {self.num_heads}")
        if self.num_kv_heads and self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads {self.num_heads} must be divisible by num_kv_heads {self.num_kv_heads}")
        return self


def hf_config(cfg: LMConfig, vocab_size: int, pad_id: int = 0, bos_id: int = 1, eos_id: int = 2):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab_size, hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads or cfg.num_heads, max_position_embeddings=cfg.max_positions,
        rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta},
        pad_token_id=pad_id, bos_token_id=bos_id, eos_token_id=eos_id,
        tie_word_embeddings=False,  # safetensors refuses shared tensors; untied is simpler
        use_cache=True,
    )


def build_model(cfg: LMConfig, vocab_size: int, seed: int | None = None):
    """A freshly initialised ``LlamaForCausalLM`` in float32 (seeded when ``seed`` is given)."""
    import torch
    from transformers import LlamaForCausalLM

    if seed is not None:
        torch.manual_seed(seed)
    model = LlamaForCausalLM(hf_config(cfg, vocab_size))
    model.generation_config.pad_token_id = 0
    model.generation_config.bos_token_id = 1
    model.generation_config.eos_token_id = 2
    return model.float()


def expected_shapes(model) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def save_checkpoint(model, path: Path | str, cfg: LMConfig, vocab_size: int, extra: dict | None = None) -> None:
    """Weights as safetensors; the config and vocab size travel in the file's metadata."""
    meta = {"lm_config": cfg.model_dump_json(), "vocab_size": str(vocab_size)}
    meta.update({k: str(v) for k, v in (extra or {}).items()})
    save_safetensors(path, model.state_dict(), metadata=meta)


def load_checkpoint(path: Path | str, cfg: LMConfig | None = None, vocab_size: int | None = None):
    """Rebuild the model from a checkpoint; shapes are checked against the (given or stored) config.

    Returns ``(model, cfg, vocab_size)``. A config that disagrees with the file raises ``ArtifactError``.
    """
    path = Path(path)
    meta = safetensors_metadata(path)
    if cfg is None:
        if "lm_config" not in meta:
            raise ArtifactError(f"{path}: no lm_config in metadata; pass cfg explicitly")
        cfg = LMConfig.model_validate(json.loads(meta["lm_config"]))
    if vocab_size is None:
        if "vocab_size" not in meta:
            raise ArtifactError(f"{path}: no vocab_size in metadata; pass vocab_size explicitly")
        vocab_size = int(meta["vocab_size"])
    model = build_model(cfg, vocab_size)
    tensors = load_safetensors(path, expected_shapes(model))
    model.load_state_dict(tensors, strict=True)
    return model, cfg, vocab_size
