"""The episode format, the word-level vocabulary, demonstrations and the exact-match reward.

An episode is one token sequence::

    <bos> [context] question <act>  <s> query </s> <d> document </d> ... <a> answer </a>
    └──────────── prompt ──────────┘└──── completion: model tokens + tool-inserted <d>…</d> ────┘

The model writes the reasoning words, ``<s> query </s>`` search calls and ``<a> answer </a>``;
the environment inserts ``<d> top document </d>`` (or ``<d> none </d>``) after every ``</s>``.
Tool-inserted tokens are masked out of every loss. The context is empty for the student branch,
the protocol for MAPD's privileged branch, and the reference answer for OPSD's.
"""
from __future__ import annotations

from dataclasses import dataclass

from paperworks.core.lm.tokenizer import SPECIAL_TOKENS

ACT, S_OPEN, S_CLOSE, D_OPEN, D_CLOSE, A_OPEN, A_CLOSE = "<act>", "<s>", "</s>", "<d>", "</d>", "<a>", "</a>"
REF_OPEN, REF_CLOSE = "[ref]", "[/ref]"
EPISODE_TOKENS = (ACT, S_OPEN, S_CLOSE, D_OPEN, D_CLOSE, A_OPEN, A_CLOSE, REF_OPEN, REF_CLOSE, "[proto]", "[/proto]", "none")


def build_word_tokenizer(texts: list[str]):
    """A word-level tokenizer (HF ``tokenizers`` WordLevel) wrapped like the LM kit's tokenizers.

    Why word-level: the world's vocabulary is closed and made of whole words, so one token per
    word keeps episodes ~5x shorter than characters, which is what makes RL fit on 2 cores.
    Special tokens keep the kit's ids (<pad>=0, <bos>=1, <eos>=2, <unk>=3); the rest is sorted,
    so the same texts always give the same ids.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = sorted({w for t in texts for w in t.split()} | set(EPISODE_TOKENS))
    words = [w for w in words if w not in SPECIAL_TOKENS]
    vocab = {tok: i for i, tok in enumerate(list(SPECIAL_TOKENS) + words)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with single spaces
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>",
                                   unk_token="<unk>", padding_side="left", truncation_side="left")


class Codec:
    """Word <-> id mapping used by the rollout and training code (ids come from the tokenizer)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.word_to_id: dict[str, int] = dict(tokenizer.get_vocab())
        self.id_to_word = {i: w for w, i in self.word_to_id.items()}
        self.unk = self.word_to_id["<unk>"]
        self.pad, self.bos, self.eos = 0, 1, 2
        self.ids = {name: self.word_to_id[name] for name in EPISODE_TOKENS}

    def __len__(self) -> int:
        return len(self.word_to_id)

    def encode(self, text: str) -> list[int]:
        return [self.word_to_id.get(w, self.unk) for w in text.split()]

    def decode(self, ids) -> str:
        return " ".join(self.id_to_word[int(i)] for i in ids)


def prompt_text(question: str, context: str = "") -> str:
    """The privileged context goes *before* the question, so the question sits at the same distance
    from the completion in every branch (the student's reading of it transfers unchanged)."""
    return f"{context} {question} {ACT}" if context else f"{question} {ACT}"


def answer_context(answer: str) -> str:
    return f"{REF_OPEN} {answer} {REF_CLOSE}"


@dataclass
class Completion:
    """A completion as (word, is_model_token) pairs: the unit demonstrations and traces are made of."""

    words: list[str]
    model_mask: list[int]


def completion_from_text(text: str) -> Completion:
    """Split an episode-format text; ``<d> … </d>`` spans are tool-inserted (mask 0)."""
    words, mask, inside_doc = [], [], False
    for w in text.split():
        if w == D_OPEN:
            inside_doc = True
        words.append(w)
        mask.append(0 if inside_doc else 1)
        if w == D_CLOSE:
            inside_doc = False
    return Completion(words, mask)


def demonstration_text(queries: list[str], docs: list[str], answer: str) -> str:
    """The clean episode a demonstration teaches: the plan's searches, their documents, the answer."""
    parts = [f"{S_OPEN} {q} {S_CLOSE} {D_OPEN} {d or 'none'} {D_CLOSE}" for q, d in zip(queries, docs)]
    return " ".join(parts + [f"{A_OPEN} {answer} {A_CLOSE}"])


def plan_queries(protocol: dict) -> list[str]:
    """The search steps of a protocol's plan (the first word of a step is the teacher's verb)."""
    verbs = {"search", "lookup", "find"}
    return [step.split(" ", 1)[1] for step in protocol["plan"] if step.split(" ", 1)[0] in verbs]


def extract_answer(words: list[str]) -> str | None:
    """The text between the last ``<a>`` and the following ``</a>``; None when no answer was closed."""
    if A_CLOSE not in words:
        return None
    end = len(words) - 1 - words[::-1].index(A_CLOSE)
    if A_OPEN not in words[:end]:
        return None
    start = end - 1 - words[:end][::-1].index(A_OPEN)
    return " ".join(words[start + 1:end])


def exact_match(prediction: str | None, gold: str) -> float:
    """The reward: 1 when the normalised answer equals the gold answer, else 0 (no answer scores 0)."""
    if prediction is None:
        return 0.0
    return float(" ".join(prediction.split()) == " ".join(gold.split()))
