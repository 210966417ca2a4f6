"""The report decoder: a ``core.lm`` decoder with a visual prefix, per fusion.

Per (fusion, seed): the fusion module of :mod:`paperworks.encoder_fusion.models` (``foundation`` /
``parallel`` / ``cascade`` over the frozen cached encoder tokens, built exactly as the VQA runs build it)
maps a case to its g × g fused grid; a linear projector turns the g² fused tokens into g² prefix
embeddings, which go in front of ``<bos>`` + the report tokens through ``inputs_embeds`` of a tiny
``LlamaForCausalLM`` (``core.lm.build_model``). Fusion, projector and decoder are trained end to end with
teacher forcing (loss on the report tokens + ``<eos>``); the held-out curve is the token loss on the dev
cases, and every run ends at its lowest-dev-loss checkpoint (``selected``). The test reports are greedy.

The same seed gives every fusion the same shared initialisation (P_F, positions, projector, decoder), so
the fusions differ only in what the fusion module adds (as in the VQA runs).
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from paperworks.core.lm import LMConfig, build_model
from paperworks.core.lm.train import warmup_cosine
from paperworks.encoder_fusion.models import FusionVQA, patience_spent
from paperworks.encoder_fusion.params import DecoderParams, HeadParams
from paperworks.encoder_fusion.reports import RoIScore


def lm_config(p: DecoderParams, prefix_len: int, max_report_tokens: int) -> LMConfig:
    return LMConfig(hidden_size=p.hidden_size, num_layers=p.num_layers, num_heads=p.num_heads,
                    intermediate_size=p.intermediate_size,
                    max_positions=prefix_len + 1 + max(max_report_tokens, p.max_new_tokens) + 1)


class ReportDecoder(nn.Module):
    """Fusion module → projected visual prefix → causal LM over the report."""

    def __init__(self, fusion: str, dims: dict[str, int], question_dim: int, grid: int, head: HeadParams,
                 cfg: LMConfig, vocab_size: int, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.fusion = FusionVQA(fusion, dims, question_dim, grid, head)
        for mod in (self.fusion.query, self.fusion.key, self.fusion.out):  # the VQA head: not used here
            mod.requires_grad_(False)
        self.lm = build_model(cfg, vocab_size, seed=seed)  # re-seeded: the same decoder for every fusion
        self.prefix = nn.Linear(head.d_model, cfg.hidden_size)
        self.prefix_len = grid * grid

    def prefix_embeds(self, tok: dict[str, torch.Tensor]) -> torch.Tensor:
        """B × g² × hidden: the fused grid (+ its learned positions) projected into the decoder's embedding space."""
        return self.prefix(self.fusion.fuse(tok) + self.fusion.pos)

    def forward(self, tok: dict[str, torch.Tensor], ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Logits B × (T−1) × V predicting text tokens 1 … T−1 (``ids`` right-padded, ``ids[:, 0]`` = ``<bos>``)."""
        pre = self.prefix_embeds(tok)
        emb = torch.cat([pre, self.lm.get_input_embeddings()(ids)], dim=1)
        attn = torch.cat([torch.ones(pre.shape[:2], dtype=mask.dtype), mask], dim=1)
        out = self.lm(inputs_embeds=emb, attention_mask=attn, use_cache=False)
        g = pre.shape[1]
        return out.logits[:, g:g + ids.shape[1] - 1].float()

    def loss(self, tok: dict[str, torch.Tensor], ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy over the report tokens and ``<eos>`` (padding excluded)."""
        logits = self(tok, ids, mask)
        target = ids[:, 1:].masked_fill(mask[:, 1:] == 0, -100)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=-100)

    @torch.no_grad()
    def generate(self, tok: dict[str, torch.Tensor], bos_id: int, eos_id: int, max_new_tokens: int) -> list[list[int]]:
        """Greedy reports (token ids up to, not including, ``<eos>``), with the decoder's KV cache."""
        self.eval()
        return self.greedy_after(self.prefix_embeds(tok), bos_id, eos_id, max_new_tokens)

    @torch.no_grad()
    def greedy_after(self, pre: torch.Tensor, bos_id: int, eos_id: int, max_new_tokens: int,
                     pre_mask: torch.Tensor | None = None) -> list[list[int]]:
        """Greedy continuation of the embeddings ``pre`` (B, P, D) after ``<bos>``, with the KV cache. ``pre_mask``
        (B, P; 0 = padding): masked positions are not attended and not counted in the positions (None: all attended)."""
        b = pre.shape[0]
        bos = self.lm.get_input_embeddings()(torch.full((b, 1), bos_id, dtype=torch.long))
        masked = {}
        if pre_mask is not None:
            attn = torch.cat([pre_mask, torch.ones((b, 1), dtype=pre_mask.dtype)], dim=1)
            masked = {"attention_mask": attn, "position_ids": positions(attn)}
        out = self.lm(inputs_embeds=torch.cat([pre, bos], dim=1), use_cache=True, **masked)
        cache, rows = out.cache, [[] for _ in range(b)]
        done = torch.zeros(b, dtype=torch.bool)
        nxt = out.logits[:, -1].argmax(-1)
        for _ in range(max_new_tokens):
            for i in range(b):
                if not done[i] and int(nxt[i]) != eos_id:
                    rows[i].append(int(nxt[i]))
            done |= nxt == eos_id
            if bool(done.all()):
                break
            if masked:
                attn = masked["attention_mask"]
                masked = {"attention_mask": torch.cat([attn, torch.ones((b, 1), dtype=attn.dtype)], dim=1),
                          "position_ids": masked["position_ids"][:, -1:] + 1}
            out = self.lm(input_ids=nxt[:, None], cache=cache, use_cache=True, **masked)
            cache, nxt = out.cache, out.logits[:, -1].argmax(-1)
        return rows


def positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids that count attended tokens only (a padding position repeats its predecessor's id; it is masked)."""
    return (attention_mask.long().cumsum(1) - 1).clamp(min=0)


def encode_reports(tokenizer, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """``<bos>`` report ``<eos>``, right-padded: (ids, mask)."""
    rows = [[tokenizer.bos_token_id] + tokenizer(t, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for t in texts]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = torch.tensor(r)
        mask[i, :len(r)] = 1
    return ids, mask


def _rows(tokens: dict[str, torch.Tensor], rows: np.ndarray | torch.Tensor) -> dict[str, torch.Tensor]:
    rows = torch.as_tensor(rows)
    return {k: tokens[k][rows] for k in ("foundation", "xray", "path")}


def _trim(ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    width = int(mask.sum(1).max())
    return ids[:, :width], mask[:, :width]


@torch.no_grad()
def dev_loss(model: ReportDecoder, tokens: dict[str, torch.Tensor], rows: np.ndarray, ids: torch.Tensor, mask: torch.Tensor,
             batch: int = 256) -> float:
    """Token-mean cross-entropy over every dev report."""
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(rows), batch):
        bi, bm = _trim(ids[i:i + batch], mask[i:i + batch])
        n = int(bm[:, 1:].sum())
        total += float(model.loss(_rows(tokens, rows[i:i + batch]), bi, bm)) * n
        count += n
    return total / max(count, 1)


def train_decoder(model: ReportDecoder, tokens: dict[str, torch.Tensor], train: tuple[np.ndarray, torch.Tensor, torch.Tensor],
                  dev: tuple[np.ndarray, torch.Tensor, torch.Tensor], p: DecoderParams, seed: int) -> list[dict]:
    """AdamW (warm-up + cosine) with teacher forcing; dev loss every ``log_every`` steps; ends at the lowest-dev-loss
    checkpoint (marked ``selected``), or earlier once ``p.patience`` steps pass without a lower dev loss.
    ``train``/``dev``: (case rows into ``tokens``, report ids, masks)."""
    rng = np.random.default_rng(seed)
    params = [q for q in model.parameters() if q.requires_grad]
    opt = torch.optim.AdamW(params, lr=p.lr, weight_decay=0.01)
    warm = max(1, p.steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: warmup_cosine(s, warm, p.steps, 0.1))
    rows, ids, mask = train
    history, best, best_state, running = [], float("inf"), None, []
    for step in range(p.steps + 1):
        if step % p.log_every == 0 or step == p.steps:
            row = {"step": step, "dev_loss": dev_loss(model, tokens, *dev), "selected": False}
            if running:
                row["train_loss"] = float(np.mean(running))
                running = []
            history.append(row)
            if row["dev_loss"] < best:
                best, best_state = row["dev_loss"], {k: v.detach().clone() for k, v in model.state_dict().items()}
                for r in history:
                    r["selected"] = r is row
            model.train()
        if step == p.steps or patience_spent(history, step, p.patience):
            break
        idx = rng.choice(len(rows), size=min(p.batch_size, len(rows)), replace=False)
        bi, bm = _trim(ids[idx], mask[idx])
        loss = model.loss(_rows(tokens, rows[idx]), bi, bm)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        running.append(float(loss.detach()))
    model.load_state_dict(best_state)
    return history


def generate_reports(model: ReportDecoder, tokenizer, tokens: dict[str, torch.Tensor], rows: np.ndarray, max_new_tokens: int,
                     batch: int = 256) -> list[str]:
    out = []
    for i in range(0, len(rows), batch):
        ids = model.generate(_rows(tokens, rows[i:i + batch]), tokenizer.bos_token_id, tokenizer.eos_token_id, max_new_tokens)
        out += [tokenizer.decode(r, skip_special_tokens=True) for r in ids]
    return out


def roi_f1(s: RoIScore, roi: str, roi_weight: float = 3.0) -> float:
    """RoI-weighted F1 of a scored report: 2·W(matched) / (2·W(matched) + W(missed) + W(hallucinated)), an error or
    match inside the RoI weighing ``roi_weight``, any other 1 — the harmonic mean of the RoI-weighted precision
    W(m)/(W(m)+W(h)) and recall W(m)/(W(m)+W(missed)). Nothing to find and nothing reported: 1."""
    def w(fs) -> float:
        return sum(roi_weight if f.region == roi else 1.0 for f in fs)

    m, miss, hall = w(s.matched), w(s.missed), w(s.hallucinated)
    return 1.0 if m + miss + hall == 0 else 2 * m / (2 * m + miss + hall)
