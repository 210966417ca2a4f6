"""Exploratory comparisons downstream of the fusions: instruction retention and tool use.

Both use a :class:`PromptedDecoder`: the report decoder of :mod:`paperworks.encoder_fusion.decoder`
(fusion module → projected visual prefix → ``core.lm`` decoder) with a **text prompt** between the visual
prefix and ``<bos>``: [g² prefix tokens] [P prompt tokens] ``<bos>`` report ``<eos>``. Prompts are left-padded
with ``<pad>``; the pads are masked and not counted in the position ids, so an empty prompt is exactly the visual
prefix then ``<bos>`` (as in the report decoder) and a batch is cut to its longest prompt (compute, not
results: the pad width changes nothing up to float rounding). The loss is on the report and ``<eos>``.

1. **Instruction retention** (MedIF-like, synthetic). Per seed, on one fusion:
   - *instruction tuning*: every training case as a plain item (empty prompt → its report) and as one item
     per format instruction (``instructions.PROMPTS[kind]`` → ``instructions.render(kind, report)``), reports
     in canonical wording; ends at its lowest dev loss (dev cases, same item mix);
   - *domain tuning*, from that checkpoint, two arms: ``domain_only`` trains on the domain's reports only
     (paraphrased at ``explore.domain_paraphrase_rate``: the new house style, empty prompt); ``mixed`` draws
     ``explore.mix_share`` of every batch from the instruction-tuning items, the rest as ``domain_only``.
     Same steps, same seed; each ends at its lowest domain dev loss (the same criterion for both arms);
   - the measure: per test case and instruction kind, does the greedy report under that prompt comply
     (``instructions.complies``)? Unit = (case, kind), cluster = seed.
2. **Tool use**. Per seed, on one fusion (default the foundation alone, which cannot see small lesions): the
   decoder trained and tested with the segmentation tool's region text of each case as its prompt (``tool``:
   ``tool.SegmentationTool`` on the case's own-modality specialist) vs with an empty prompt (``none``); same
   seed, initialisation, data and steps. Measure: report RoI-F1 per test case (``decoder.roi_f1``).
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from paperworks.core.lm import LMConfig
from paperworks.core.lm.train import warmup_cosine
from paperworks.encoder_fusion.decoder import ReportDecoder, _trim, positions
from paperworks.encoder_fusion.decoder import _rows as _case_rows  # the report decoder's own row gather
from paperworks.encoder_fusion.instructions import complies
from paperworks.encoder_fusion.models import patience_spent

# (case rows into the token dict, prompt ids N × P, report ids N × T, report mask N × T)
PromptData = tuple[np.ndarray, torch.Tensor, torch.Tensor, torch.Tensor]


def prompted_config(hidden_size: int, num_layers: int, num_heads: int, intermediate_size: int, prefix_len: int,
                    prompt_len: int, max_report_tokens: int, max_new_tokens: int) -> LMConfig:
    return LMConfig(hidden_size=hidden_size, num_layers=num_layers, num_heads=num_heads, intermediate_size=intermediate_size,
                    max_positions=prefix_len + prompt_len + 1 + max(max_report_tokens, max_new_tokens) + 1)


class PromptedDecoder(ReportDecoder):
    """Visual prefix, then a left-padded text prompt, then ``<bos>`` + the report. The prompt's pads are masked
    and the positions count attended tokens only, so how wide a prompt is padded changes nothing (up to float
    rounding); each batch is cut to its longest prompt (an all-empty batch: no prompt columns at all)."""

    def _context(self, tok: dict[str, torch.Tensor], prompt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(embeddings, mask) of the visual prefix + the batch's prompt cut to its longest."""
        prompt = trim_prompt(prompt, self.lm.config.pad_token_id)
        pre = self.prefix_embeds(tok)
        mask = torch.cat([torch.ones(pre.shape[:2], dtype=torch.long), (prompt != self.lm.config.pad_token_id).long()], dim=1)
        return torch.cat([pre, self.lm.get_input_embeddings()(prompt)], dim=1), mask

    def forward(self, tok: dict[str, torch.Tensor], prompt: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        ctx, ctx_mask = self._context(tok, prompt)
        emb = torch.cat([ctx, self.lm.get_input_embeddings()(ids)], dim=1)
        attn = torch.cat([ctx_mask, mask.long()], dim=1)
        out = self.lm(inputs_embeds=emb, attention_mask=attn, position_ids=positions(attn), use_cache=False)
        k = ctx.shape[1]
        return out.logits[:, k:k + ids.shape[1] - 1].float()

    def loss(self, tok: dict[str, torch.Tensor], prompt: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        logits = self(tok, prompt, ids, mask)
        target = ids[:, 1:].masked_fill(mask[:, 1:] == 0, -100)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=-100)

    @torch.no_grad()
    def generate(self, tok: dict[str, torch.Tensor], prompt: torch.Tensor, bos_id: int, eos_id: int,
                 max_new_tokens: int) -> list[list[int]]:
        """Greedy, with the KV cache; token ids up to (not including) ``<eos>``."""
        self.eval()
        ctx, ctx_mask = self._context(tok, prompt)
        return self.greedy_after(ctx, bos_id, eos_id, max_new_tokens, pre_mask=ctx_mask)


def trim_prompt(prompt: torch.Tensor, pad_id: int) -> torch.Tensor:
    """The left-padded prompts without the pad columns no row uses (width 0 when every prompt is empty)."""
    width = int((prompt != pad_id).sum(1).max()) if prompt.numel() else 0
    return prompt[:, prompt.shape[1] - width:]


# ------------------------------------------------------------------ encoding
def encode_prompts(tokenizer, texts: list[str], width: int) -> torch.Tensor:
    """Each prompt's ids left-padded with ``<pad>`` to ``width`` (an empty text: all pads); longer is an error."""
    out = torch.full((len(texts), width), tokenizer.pad_token_id, dtype=torch.long)
    for i, t in enumerate(texts):
        ids = tokenizer(t, add_special_tokens=False)["input_ids"] if t else []
        if len(ids) > width:
            raise ValueError(f"prompt of {len(ids)} tokens does not fit width {width}: {t!r}")
        if ids:
            out[i, width - len(ids):] = torch.tensor(ids)
    return out


def prompt_width(tokenizer, texts: list[str]) -> int:
    return max([len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts if t] + [1])


def encode_targets(tokenizer, texts: list[str], width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``<bos>`` text ``<eos>``, right-padded to ``width``: (ids, mask)."""
    ids = torch.full((len(texts), width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(texts), width), dtype=torch.long)
    for i, t in enumerate(texts):
        r = [tokenizer.bos_token_id] + tokenizer(t, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        if len(r) > width:
            raise ValueError(f"target of {len(r)} tokens does not fit width {width}")
        ids[i, :len(r)] = torch.tensor(r)
        mask[i, :len(r)] = 1
    return ids, mask


def target_width(tokenizer, texts: list[str]) -> int:
    return max(len(tokenizer(t, add_special_tokens=False)["input_ids"]) + 2 for t in texts)


def make_data(tokenizer, rows: np.ndarray, prompts: list[str], targets: list[str], p_width: int, t_width: int) -> PromptData:
    if not len(rows) == len(prompts) == len(targets):
        raise ValueError(f"{len(rows)} rows, {len(prompts)} prompts, {len(targets)} targets")
    return (np.asarray(rows), encode_prompts(tokenizer, prompts, p_width), *encode_targets(tokenizer, targets, t_width))


# ------------------------------------------------------------------ training
@torch.no_grad()
def prompted_dev_loss(model: PromptedDecoder, tokens: dict[str, torch.Tensor], data: PromptData, batch: int = 256) -> float:
    """Token-mean cross-entropy of the targets (report tokens + ``<eos>``)."""
    model.eval()
    rows, prompt, ids, mask = data
    total, count = 0.0, 0
    for i in range(0, len(rows), batch):
        bi, bm = _trim(ids[i:i + batch], mask[i:i + batch])
        n = int(bm[:, 1:].sum())
        total += float(model.loss(_case_rows(tokens, rows[i:i + batch]), prompt[i:i + batch], bi, bm)) * n
        count += n
    return total / max(count, 1)


def _sample(sources: list[tuple[PromptData, float]], batch_size: int, rng: np.random.Generator) -> PromptData:
    """A batch with ``share`` of its items from each source (the first source takes the rounding)."""
    counts = [int(round(batch_size * share)) for _, share in sources]
    counts[0] = batch_size - sum(counts[1:])
    parts = []
    for (data, _), n in zip(sources, counts):
        if n <= 0:
            continue
        idx = rng.choice(len(data[0]), size=min(n, len(data[0])), replace=False)
        parts.append((data[0][idx], data[1][idx], data[2][idx], data[3][idx]))
    return (np.concatenate([q[0] for q in parts]), torch.cat([q[1] for q in parts]), torch.cat([q[2] for q in parts]),
            torch.cat([q[3] for q in parts]))


def train_prompted(model: PromptedDecoder, tokens: dict[str, torch.Tensor], sources: list[tuple[PromptData, float]],
                   dev: PromptData, steps: int, batch_size: int, lr: float, log_every: int, seed: int,
                   patience: int | None = None) -> list[dict]:
    """AdamW (5 % warm-up, cosine to 0.1×), teacher forcing on batches mixed from ``sources`` (data, share of each
    batch; shares sum to 1); the dev loss every ``log_every`` steps is the plateau curve; ends at the lowest-dev-loss
    checkpoint (``selected``), training stopped once ``patience`` steps pass without a lower dev loss (None: never)."""
    if abs(sum(s for _, s in sources) - 1.0) > 1e-6:
        raise ValueError(f"source shares {[s for _, s in sources]} must sum to 1")
    rng = np.random.default_rng(seed)
    params = [q for q in model.parameters() if q.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    warm = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: warmup_cosine(s, warm, steps, 0.1))
    history, best, best_state, running = [], float("inf"), None, []
    for step in range(steps + 1):
        if step % log_every == 0 or step == steps:
            row = {"step": step, "dev_loss": prompted_dev_loss(model, tokens, dev), "selected": False}
            if running:
                row["train_loss"], running = float(np.mean(running)), []
            history.append(row)
            if row["dev_loss"] < best:
                best, best_state = row["dev_loss"], {k: v.detach().clone() for k, v in model.state_dict().items()}
                for r in history:
                    r["selected"] = r is row
            model.train()
        if step == steps or patience_spent(history, step, patience):
            break
        rows, prompt, ids, mask = _sample(sources, batch_size, rng)
        bi, bm = _trim(ids, mask)
        loss = model.loss(_case_rows(tokens, rows), prompt, bi, bm)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        running.append(float(loss.detach()))
    model.load_state_dict(best_state)
    return history


def generate_prompted(model: PromptedDecoder, tokenizer, tokens: dict[str, torch.Tensor], rows: np.ndarray, prompt: torch.Tensor,
                      max_new_tokens: int, batch: int = 256) -> list[str]:
    out = []
    for i in range(0, len(rows), batch):
        ids = model.generate(_case_rows(tokens, rows[i:i + batch]), prompt[i:i + batch], tokenizer.bos_token_id,
                             tokenizer.eos_token_id, max_new_tokens)
        out += [tokenizer.decode(r, skip_special_tokens=True) for r in ids]
    return out


def compliance(model: PromptedDecoder, tokenizer, tokens: dict[str, torch.Tensor], rows: np.ndarray, case_ids: list[str],
               kinds: tuple[str, ...], prompts: dict[str, str], p_width: int, max_new_tokens: int) -> list[dict]:
    """Per (case, kind): the greedy report under the kind's prompt and whether it complies."""
    out = []
    for kind in kinds:
        prompt = encode_prompts(tokenizer, [prompts[kind]] * len(rows), p_width)
        texts = generate_prompted(model, tokenizer, tokens, rows, prompt, max_new_tokens)
        out += [{"case_id": c, "kind": kind, "text": t, "complies": bool(complies(kind, t))} for c, t in zip(case_ids, texts)]
    return out
