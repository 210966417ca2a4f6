"""Tokenizers trained on a track's own corpus with HF ``tokenizers``, used as ``PreTrainedTokenizerFast``.

A BPE model over raw characters (no pre-tokenizer, no byte fallback): with
``vocab_size`` at or below the alphabet size + specials it is a pure character
tokenizer (what arithmetic tasks want); a larger ``vocab_size`` adds merges.
Padding is on the left, which batched ``generate`` needs.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

from paperworks.core.io import ArtifactError, atomic_path

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK)  # ids 0..3 in this order


def _wrap(tok):
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token=PAD, bos_token=BOS, eos_token=EOS, unk_token=UNK,
        padding_side="left", truncation_side="left",
    )


def train_tokenizer(texts: Iterable[str], vocab_size: int = 0, min_frequency: int = 2):
    """Train on ``texts``; ``vocab_size=0`` means characters only (alphabet + specials).

    Deterministic: the same texts give the same ``tokenizer.json``.
    """
    from tokenizers import Tokenizer, decoders, models, trainers

    texts = list(texts)
    alphabet = sorted({ch for t in texts for ch in t})
    if not alphabet:
        raise ValueError("train_tokenizer: empty corpus")
    size = max(vocab_size, len(alphabet) + len(SPECIAL_TOKENS))
    tok = Tokenizer(models.BPE(unk_token=UNK))
    tok.decoder = decoders.Fuse()  # characters joined back verbatim (spaces are ordinary tokens)
    trainer = trainers.BpeTrainer(
        vocab_size=size, min_frequency=min_frequency, special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=alphabet, limit_alphabet=len(alphabet), show_progress=False,
    )
    tok.train_from_iterator(sorted(texts), trainer=trainer)  # sorted: order-independent merges
    return _wrap(tok)


def save_tokenizer(tokenizer, path: Path | str) -> None:
    """Write ``tokenizer.json`` atomically."""
    with atomic_path(path) as tmp:
        tokenizer.backend_tokenizer.save(str(tmp))


def load_tokenizer(path: Path | str):
    """Load a ``tokenizer.json`` written by :func:`save_tokenizer` (checks the special tokens)."""
    from tokenizers import Tokenizer

    path = Path(path)
    if not path.exists():
        raise ArtifactError(f"{path}: missing (run the upstream stage first)")
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as e:  # tokenizers raises a bare Exception on bad JSON
        raise ArtifactError(f"{path}: corrupt tokenizer ({e})") from None
    for i, name in enumerate(SPECIAL_TOKENS):
        if tok.token_to_id(name) != i:
            raise ArtifactError(f"{path}: special token {name} should have id {i}, has {tok.token_to_id(name)}")
    return _wrap(tok)
