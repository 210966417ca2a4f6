"""Learned routing from peft on the frozen base: X-LoRA (a classifier on the base's hidden states mixes the four
trained specialists token by token; no router) and Polytropon (``poly``: an inventory of LoRA skills shared by the
four capabilities, each capability — a task id — learning its own mixture of skills).

Both run on the base because ``core.lm`` builds a plain transformers ``LlamaForCausalLM``. Two peft traps, checked
with the pinned peft 0.21.2:

- **X-LoRA adapter names**: ``XLoraModel`` loads the adapters of ``XLoraConfig.adapters`` under the names ``"0"``,
  ``"1"``, … but then activates them by the dict's *keys*; keys other than ``"0" … "n-1"`` fail on the first forward
  with ``KeyError: '<key>'`` (``tuners_utils.disable_adapter_layers``). The adapters dict here is keyed
  ``"0" … "3"`` in ``CAPABILITIES`` order. X-LoRA also needs ``config.use_cache = False`` (else ``ValueError:
  `use_cache` must be False``) and the adapters as peft folders (``save_pretrained``), which ``peft_adapter_dirs`` writes.
- **Poly needs task ids** in every forward and ``generate`` (``ValueError: task_ids should not be None.``), so it
  trains with ``train_tasks`` (the ``core.lm.train_sft`` loop — same optimizer, schedule, clipping, data order —
  with each batch's task ids) and answers with ``generate_tasks``. Poly scales its LoRA by ``1/r`` (no alpha).
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Callable, Sequence

import torch

from paperworks.core.lm import TrainConfig, encode_sft
from paperworks.core.lm.train import IGNORE, train_sft
from paperworks.mol.models import LORA_TARGETS
from paperworks.mol.world import CAPABILITIES

TASK_ID = {cap: i for i, cap in enumerate(CAPABILITIES)}


# ------------------------------------------------------------------ X-LoRA
def peft_adapter_dirs(base, adapter_files: dict[str, Path], rank: int, alpha_over_rank: float, out: Path) -> dict[str, str]:
    """The specialists (``mol_train``'s safetensors) as peft adapter folders, keyed ``"0" … "3"`` in
    ``CAPABILITIES`` order (the X-LoRA name trap in the module docstring)."""
    from peft import get_peft_model_state_dict, set_peft_model_state_dict

    from paperworks.core.io import load_safetensors
    from paperworks.mol.models import lora_model

    dirs = {}
    for i, cap in enumerate(CAPABILITIES):
        model = lora_model(base, rank, alpha_over_rank, seed=0)
        shapes = {k: tuple(v.shape) for k, v in get_peft_model_state_dict(model).items()}
        set_peft_model_state_dict(model, load_safetensors(adapter_files[cap], shapes))
        model.save_pretrained(out / cap)
        dirs[str(i)] = str(out / cap)
    return dirs


def xlora_model(base, adapter_dirs: dict[str, str], depth: int, size: int, layerwise: bool, temperature: float, seed: int):
    """X-LoRA over the frozen specialists: only the classifier trains (``use_trainable_adapters=False``)."""
    from peft import XLoraConfig, get_peft_model

    if sorted(adapter_dirs) != [str(i) for i in range(len(adapter_dirs))]:
        raise ValueError(f"X-LoRA adapter keys must be '0' … '{len(adapter_dirs) - 1}' (got {sorted(adapter_dirs)})")
    torch.manual_seed(seed)  # the classifier's init
    model = copy.deepcopy(base)
    model.config.use_cache = False
    cfg = XLoraConfig(task_type="CAUSAL_LM", hidden_size=model.config.hidden_size, adapters=dict(adapter_dirs),
                      xlora_depth=depth, xlora_size=size, layerwise_scalings=layerwise, softmax_temperature=temperature,
                      use_trainable_adapters=False)
    return get_peft_model(model, cfg)


def xlora_expert_tensors(model, i: int) -> dict[str, torch.Tensor]:
    """The LoRA weights X-LoRA holds for expert ``i`` (keys as peft's adapter state dict, without the adapter name)."""
    out = {}
    for name, p in model.named_parameters():
        for part in ("lora_A", "lora_B"):
            tag = f".{part}.{i}."
            if tag in name:
                key = name.split(".layers.", 1)[1].replace(tag, f".{part}.")
                out["base_model.model.model.layers." + key] = p.detach()
    return out


# ------------------------------------------------------------------ Polytropon
def poly_model(base, rank: int, n_skills: int, n_splits: int, seed: int):
    """Polytropon on all 7 linear modules: ``n_skills`` LoRA skills of ``rank`` and per-task routing logits."""
    from peft import PolyConfig, get_peft_model

    torch.manual_seed(seed)
    cfg = PolyConfig(task_type="CAUSAL_LM", r=rank, n_tasks=len(CAPABILITIES), n_skills=n_skills, n_splits=n_splits,
                     poly_type="poly", target_modules=list(LORA_TARGETS))
    return get_peft_model(copy.deepcopy(base), cfg)


def encode_tasks(tok, items: Sequence[dict], max_positions: int) -> dict[str, torch.Tensor]:
    data = encode_sft(tok, [x["prompt"] for x in items], [x["target"] for x in items], max_positions)
    data["task_ids"] = torch.tensor([TASK_ID[x["capability"]] for x in items], dtype=torch.long)
    return data


def task_loss(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """``core.lm.sft_loss`` with the batch's task ids."""
    width = int(batch["attention_mask"].sum(1).max())
    logits = model(input_ids=batch["input_ids"][:, :width], attention_mask=batch["attention_mask"][:, :width],
                   task_ids=batch["task_ids"], use_cache=False).logits
    return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(),
                                             batch["labels"][:, 1:width].reshape(-1), ignore_index=IGNORE)


@torch.no_grad()
def task_heldout_loss(model, data: dict[str, torch.Tensor], batch_size: int = 64) -> float:
    was = model.training
    model.eval()
    total, count = 0.0, 0
    for i in range(0, data["input_ids"].shape[0], batch_size):
        batch = {k: v[i: i + batch_size] for k, v in data.items()}
        tokens = int((batch["labels"][:, 1:] != IGNORE).sum())
        total += float(task_loss(model, batch)) * tokens
        count += tokens
    model.train(was)
    return total / max(count, 1)


def train_tasks(model, data: dict[str, torch.Tensor], cfg: TrainConfig, seed: int, eval_fn: Callable[[int], dict[str, float]],
                desc: str = "poly") -> list[dict[str, float]]:
    """``core.lm.train_sft`` (same optimizer, schedule, clipping, data order, evaluation) with the batch's task ids
    in the loss."""
    return train_sft(model, data, cfg, seed, eval_fn=eval_fn, desc=desc, loss_fn=task_loss)


@torch.no_grad()
def generate_tasks(model, tok, prompts: Sequence[str], task_ids: Sequence[int], max_new_tokens: int, batch_size: int = 64) -> list[str]:
    """Greedy completions with each prompt's task id (``core.lm.sample`` with ``task_ids``)."""
    from transformers import GenerationConfig

    from paperworks.core.lm.sampling import completion_mask_from_ids, encode_prompts

    gen = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=False, use_cache=True, top_k=None, top_p=None, temperature=None,
                           pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id)
    was = model.training
    model.eval()
    out: list[str] = []
    for i in range(0, len(prompts), batch_size):
        ids, mask = encode_prompts(tok, list(prompts[i: i + batch_size]))
        res = model.generate(input_ids=ids, attention_mask=mask, generation_config=gen,
                             task_ids=torch.tensor(list(task_ids[i: i + batch_size]), dtype=torch.long))
        comp = res[:, ids.shape[1]:]
        cmask, _ = completion_mask_from_ids(comp, tok.eos_token_id)
        comp = torch.where(cmask.bool(), comp, torch.full_like(comp, tok.pad_token_id))
        out.extend(tok.batch_decode(comp, skip_special_tokens=True))
    model.train(was)
    return out
