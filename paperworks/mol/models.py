"""The base LM, the four LoRA specialists, the one LoRA on the mixture and multi-task full fine-tuning.

Everything is ``core.lm`` (a Llama-style ``LlamaForCausalLM`` + ``train_sft``) and peft. The base is
pre-trained on the generic corpus and then frozen: every adapter is trained on a deep copy wrapped by
``peft.get_peft_model`` (only the LoRA matrices require grad; ``make_optimizer`` takes ``requires_grad``
params only). Every trained model logs its held-out (dev) loss, the curve the plateau check reads.
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from paperworks.core.lm import TrainConfig, encode_sft, sample, sft_loss, train_sft
from paperworks.mol.params import AdapterParams, BaseParams

LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")  # all 7 linear modules


@torch.no_grad()
def heldout_loss(model, data: dict[str, torch.Tensor], batch_size: int = 64) -> float:
    """Mean next-token loss over the labelled tokens of ``data`` (token-weighted across batches)."""
    was = model.training
    model.eval()
    total, count = 0.0, 0
    n = data["input_ids"].shape[0]
    for i in range(0, n, batch_size):
        batch = {k: v[i: i + batch_size] for k, v in data.items()}
        width = int(batch["attention_mask"].sum(1).max())
        batch = {k: v[:, :width] for k, v in batch.items()}
        tokens = int((batch["labels"][:, 1:] != -100).sum())
        total += float(sft_loss(model, batch)) * tokens
        count += tokens
    model.train(was)
    return total / max(count, 1)


def encode_docs(tok, docs: Sequence[str], max_positions: int) -> dict[str, torch.Tensor]:
    """Plain documents for pre-training: the loss covers the whole document (empty prompt)."""
    return encode_sft(tok, [""] * len(docs), list(docs), max_positions)


def pretrain_base(model, tok, train_docs, dev_docs, p: BaseParams, seed: int, live_dir: Path | None):
    """Next-token pre-training on the generic corpus; returns the dvclive rows (``dev_loss`` every ``eval_every``)."""
    train = encode_docs(tok, train_docs, p.model.max_positions)
    dev = encode_docs(tok, dev_docs, p.model.max_positions)
    cfg = TrainConfig(steps=p.steps, batch_size=p.batch_size, lr=p.lr, warmup_steps=max(1, p.steps // 20),
                      log_every=p.eval_every, eval_every=p.eval_every)
    return train_sft(model, train, cfg, seed=seed, live_dir=live_dir, eval_fn=lambda step: {"dev_loss": heldout_loss(model, dev)},
                     desc="mol base")


def freeze(model):
    for param in model.parameters():
        param.requires_grad_(False)
    return model.eval()


def lora_model(base, rank: int, alpha_over_rank: float, seed: int):
    """A LoRA (peft) of ``rank`` on all 7 linear modules of a deep copy of the frozen base."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)  # LoRA A init
    cfg = LoraConfig(r=rank, lora_alpha=alpha_over_rank * rank, lora_dropout=0.0, target_modules=list(LORA_TARGETS),
                     bias="none", task_type="CAUSAL_LM")
    return get_peft_model(copy.deepcopy(base), cfg)


def save_adapter(model, path: Path, rank: int, alpha: float) -> None:
    """The LoRA weights only (peft's state dict of the adapter), as safetensors with its config in the metadata."""
    from peft import get_peft_model_state_dict

    from paperworks.core.io import save_safetensors

    tensors = {k: v.detach().contiguous() for k, v in get_peft_model_state_dict(model).items()}
    save_safetensors(path, tensors, metadata={"rank": str(rank), "alpha": str(alpha), "targets": ",".join(LORA_TARGETS)})


def trainable_parameters(model) -> int:
    return int(sum(p.numel() for p in model.parameters() if p.requires_grad))


def train_on(model, tok, items: Sequence[dict], dev_items: Sequence[dict], steps: int, lr: float, p: AdapterParams,
             max_positions: int, seed: int, eval_every: int, live_dir: Path | None, desc: str,
             dev_success: Callable[[list[str]], float] | None = None):
    """SFT on ``items`` (prompt → target); every ``eval_every`` steps the dev loss and, with ``dev_success``
    (greedy answers → verified share), the dev success: the curve the plateau check reads (a loss on a
    deterministic target keeps creeping down long after every answer is right)."""
    data = encode_sft(tok, [x["prompt"] for x in items], [x["target"] for x in items], max_positions)
    dev = encode_sft(tok, [x["prompt"] for x in dev_items], [x["target"] for x in dev_items], max_positions)
    cfg = TrainConfig(steps=steps, batch_size=p.batch_size, lr=lr, warmup_steps=max(1, steps // 20),
                      log_every=eval_every, eval_every=eval_every)

    def evaluate(step: int) -> dict[str, float]:
        row = {"dev_loss": heldout_loss(model, dev)}
        if dev_success is not None:
            row["dev_success"] = dev_success(generate(model, tok, [x["prompt"] for x in dev_items], p.max_new_tokens))
        return row

    return train_sft(model, data, cfg, seed=seed, live_dir=live_dir, eval_fn=evaluate, desc=desc)


def full_ft_model(base, seed: int):
    """Multi-task full fine-tuning: a trainable deep copy of the base."""
    torch.manual_seed(seed)
    model = copy.deepcopy(base)
    for param in model.parameters():
        param.requires_grad_(True)
    return model.train()


def generate(model, tok, prompts: Sequence[str], max_new_tokens: int, batch_size: int = 64) -> list[str]:
    """Greedy completions (the verified output of a deployment)."""
    out: list[str] = []
    for i in range(0, len(prompts), batch_size):
        out.extend(sample(model, tok, list(prompts[i: i + batch_size]), max_new_tokens=max_new_tokens, greedy=True).texts)
    return out

